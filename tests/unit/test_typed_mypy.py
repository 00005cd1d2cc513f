"""The typed API as a user's type checker sees it: a small client checked by mypy --strict."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api", reason="mypy is not installed")

pytestmark = pytest.mark.slow  # the slow lane (`pytest -m slow`): runs mypy --strict over a sample


CLIENT = '''
import session_manager
from session_manager import aio
from session_manager.messages import assistant_message, function_call, function_result_message, user_message


def sync_use(sm: session_manager.SessionManager) -> None:
    sid = sm.create(title="t").session_id
    sm.append(sid, message=user_message("hi"))
    call = function_call("f", {"a": 1})
    sm.append_many(sid, messages=[assistant_message(call), function_result_message(call, "ok")])
    reveal_type(sm.append(sid, message=user_message("x")))
    reveal_type(sm.get(sid))
    reveal_type(sm.messages(sid, limit=5, roles=["user"]).messages)
    sm.messages(sid, limt=5)
    sm.messages(sid, limit="5")
    sm.set_status(sid, status="bogus")


async def async_use(asm: aio.AsyncSessionManager) -> None:
    reveal_type(await asm.get_message("s", entry_id="e"))
    reveal_type(await asm.call("session::get", {"session_id": "s"}))


def helpers_use(sm: session_manager.SessionManager) -> None:
    for item in sm.transcript("s"):
        print(item.message.text)
    for any_item in sm.messages("s").messages:
        print(any_item.text)
    sm.update_message("s", entry_id="e", content="streamed text")
    sm.update_message("s", entry_id="e", content=["a", function_call("f")])
    reveal_type(sm.alternatives("s", "e")[0].text)
    reveal_type(sm.system_prompt("s"))
    reveal_type(sm.transcript("s", include_custom=True))
    sm.edit("s", "e", 5)


async def async_helpers(asm: aio.AsyncSessionManager) -> None:
    async for item in asm.transcript("s"):
        print(item.message.text)
    reveal_type(await asm.regenerate("s", "e"))
'''


def test_typed_methods_and_helpers_are_visible_to_mypy_strict_from_outside_the_repository(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: typed methods that type checkers see as Any (or not at all): misspelt keywords,
    # wrong argument types and bad literals passing a user's mypy --strict, or results untyped; an
    # editable install whose types mypy cannot find from another directory (issue 27); and the
    # common reads (`item.message.text` over a transcript, `item.text`, a string as update content)
    # needing casts.
    client = tmp_path / "client.py"
    client.write_text(textwrap.dedent(CLIENT).lstrip("\n"), encoding="utf-8")
    # No MYPYPATH: the package must be found as installed, editable included (pyproject's package-dir
    # makes `pip install -e .` a path entry mypy follows, not an import hook it cannot).
    monkeypatch.delenv("MYPYPATH", raising=False)
    monkeypatch.chdir(tmp_path)  # outside the repository: nothing found through the working directory
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n", encoding="utf-8")  # the user's settings, not this repository's
    out, err, _ = mypy_api.run([
        "--strict", "--follow-imports=silent", "--ignore-missing-imports", "--no-incremental",
        "--cache-dir", os.devnull, "--config-file", str(config), client.name,
    ])
    lines = [line.split(":", 1)[1] for line in out.splitlines()
             if line.startswith(client.name) and " defined in " not in line]
    assert err == ""
    assert lines == [
        '11: note: Revealed type is "session_manager._wire.api.AppendResponse"',
        '12: note: Revealed type is "session_manager._wire.api.GetResponse | None"',
        '13: note: Revealed type is "list[session_manager._wire.api.MessageItem]"',
        '14: error: Unexpected keyword argument "limt" for "messages" of "TypedMethods"; did you mean "limit"?'
        '  [call-arg]',
        '15: error: Argument "limit" to "messages" of "TypedMethods" has incompatible type "str"; '
        'expected "int | None"  [arg-type]',
        '16: error: Argument "status" to "set_status" of "TypedMethods" has incompatible type '
        '"Literal[\'bogus\']"; expected "Literal[\'idle\', \'working\', \'done\', \'error\']"  [arg-type]',
        '20: note: Revealed type is "session_manager._wire.api.GetMessageResponse | None"',
        '21: note: Revealed type is "Any"',
        '31: note: Revealed type is "str"',
        '32: note: Revealed type is "str | None"',
        '33: note: Revealed type is "typing.Iterator[session_manager._wire.api.MessageItem]"',
        '34: error: Argument 3 to "edit" of "Helpers" has incompatible type "int"; expected "str | Sequence[str | '
        'TextBlock | ImageBlock | FileBlock | ThinkingBlock | RedactedThinkingBlock | FunctionCallBlock | '
        'FunctionResultBlock]"  [arg-type]',
        '40: note: Revealed type is "str"',
    ], out


TYPED_PAGES = ("README.md", "docs/getting-started.md", "docs/concepts.md", "docs/embedded-api.md", "docs/helpers.md")


def test_the_typed_pages_code_passes_mypy_strict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the pages a new user copies from first (the README's quickstart, getting started, concepts,
    # the embedded API, the helpers) teaching reads a `mypy --strict` project refuses (issue 27: the
    # getting-started loop read `item.message.role` off a page whose `message` may be None).
    from tests.unit.test_docs_blocks import ALL

    files = []
    for block in ALL:
        if block.page in TYPED_PAGES and block.lang == "python":
            name = "block_" + "".join(c if c.isalnum() else "_" for c in block.id) + ".py"
            (tmp_path / name).write_text(block.body, encoding="utf-8")
            files.append(name)
    assert len(files) >= 10, files
    monkeypatch.delenv("MYPYPATH", raising=False)
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n", encoding="utf-8")
    out, err, status = mypy_api.run(["--strict", "--no-incremental", "--cache-dir", os.devnull,
                                     "--config-file", str(config), *files])
    assert status == 0 and err == "", out + err
