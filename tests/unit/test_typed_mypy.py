"""The typed API as a user's type checker sees it: a small client checked by mypy --strict."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api", reason="mypy is not installed")

REPO = Path(__file__).resolve().parents[2]

CLIENT = '''
import session_manager
from session_manager import aio
from session_manager.messages import assistant_message, function_call, function_result_message, user_message

pytestmark = pytest.mark.slow  # the slow lane (`pytest -m slow`): runs mypy --strict over a sample


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
'''


def test_typed_methods_are_visible_to_mypy_strict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: typed methods that type checkers see as Any (or not at all): misspelt keywords,
    # wrong argument types and bad literals passing a user's mypy --strict, or results untyped.
    client = tmp_path / "client.py"
    client.write_text(textwrap.dedent(CLIENT).lstrip("\n"), encoding="utf-8")
    # An editable install is an import hook mypy cannot follow; point it at the sources.
    monkeypatch.setenv("MYPYPATH", str(REPO))
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n", encoding="utf-8")  # the user's settings, not this repository's
    out, err, _ = mypy_api.run([
        "--strict", "--follow-imports=silent", "--ignore-missing-imports", "--no-incremental",
        "--cache-dir", os.devnull, "--config-file", str(config), str(client),
    ])
    lines = [line.split(":", 1)[1] for line in out.splitlines()
             if line.startswith(str(client)) and " defined in " not in line]
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
    ], out
