"""Every code block of README.md and docs/*.md runs (issue 27: "nothing in them that CI does not run").

A block's kind is its fence language plus an optional marker on the line just before it:

- ``python``: run as a script in an empty temp dir (its own interpreter);
  ``<!-- test: postgres -->`` runs it where PostgreSQL answers (tests/pg_support.py's rule),
  ``<!-- test: engine -->`` against the iii engine at ``III_ENGINE_WS_URL`` with a session-manager
  registered on it (skips without one, saying why);
- ``bash`` with ``<!-- test: shell -->``: run by bash in an empty temp dir, the venv's scripts first
  on ``PATH``;
- ``bash`` with ``<!-- test: parse -->``: a reference list of ``session-manager`` command lines (over
  placeholder ids, or servers and engines): each line is parsed by the command's own parser and its
  DATA_DIR checked against what the subcommand takes, nothing is run (``[optional]`` parts are
  included, ``s_…`` stands for an id);
- ``yaml`` with ``<!-- test: config -->``: a worker configuration value, parsed by the worker's own
  model; any other ``yaml`` block must at least load;
- ``<!-- test: skip: REASON -->``: not run, and the reason is required (a block that installs a
  package or starts a server);
- ``text`` (or no language): output and diagrams, not code.

A ``bash``/``python`` block with no marker, or a marker this file does not know, fails the collection
test below, so a new block cannot slip in untested.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"(?:<!-- test: (?P<mark>[^>]*?) -->\n)?```(?P<lang>[a-z]*)\n(?P<body>.*?)^```\s*$", re.S | re.M)
NOT_CODE = {"", "text"}
TIMEOUT_S = 120


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    mark: str
    body: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start("lang")) + 1
            found.append(Block(page.relative_to(ROOT).as_posix(), line, m.group("lang"),
                               (m.group("mark") or "").strip(), m.group("body")))
    return found


ALL = blocks()


def kind(block: Block) -> str:
    """What the test does with a block: run, shell, config, yaml, skip, postgres, engine, text."""
    if block.mark.startswith("skip:"):
        return "skip"
    if block.lang in NOT_CODE:
        return "text"
    if block.lang == "python":
        return {"": "run", "postgres": "postgres", "engine": "engine"}.get(block.mark, "unknown")
    if block.lang == "bash":
        return {"shell": "shell", "parse": "parse"}.get(block.mark, "unknown")
    if block.lang == "yaml":
        return {"": "yaml", "config": "config"}.get(block.mark, "unknown")
    return "unknown"


def test_every_block_is_classified() -> None:
    # Prevents: a code block added to the docs that no test runs (an unmarked shell block, a typo'd
    # marker, a skip without its reason, a language this file does not know).
    bad = [f"{b.id} ({b.lang or 'no language'}, marker {b.mark!r})" for b in ALL if kind(b) == "unknown"]
    assert not bad, "blocks no test runs: " + ", ".join(bad)
    assert all(len(b.mark) > len("skip: ") + 10 for b in ALL if kind(b) == "skip")
    # The README's quickstart is among the blocks run.
    assert any(b.page == "README.md" and kind(b) == "run" for b in ALL)


def test_every_fence_is_a_block_this_file_sees() -> None:
    # Prevents: a block the FENCE pattern does not match (```python3, ```py title="x", ~~~, a fence
    # indented in a list) left out of the runs without a word, or throwing the pairing of fences off.
    for page in PAGES:
        opened = []
        inside = False
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith(("```", "~~~")):
                if not inside:
                    opened.append(number)
                inside = not inside
        name = page.relative_to(ROOT).as_posix()
        assert opened == [b.line for b in ALL if b.page == name], name


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["HOME"] = env.get("HOME", str(tmp))
    return env


def _run(argv: list[str], block: Block, tmp: Path) -> None:
    done = subprocess.run(argv, cwd=tmp, env=_env(tmp), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, f"{block.id} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"


def _params(*kinds: str) -> list[object]:
    marks = {"engine": [pytest.mark.engine], "postgres": [pytest.mark.postgres]}
    return [pytest.param(b, id=b.id, marks=marks.get(kind(b), [])) for b in ALL if kind(b) in kinds]


@pytest.mark.parametrize("block", _params("run", "shell"))
def test_block_runs(block: Block, tmp_path: Path) -> None:
    # Prevents: a documented snippet or command that raises, or exits non-zero, as written.
    script = tmp_path / ("block.py" if block.lang == "python" else "block.sh")
    script.write_text(block.body, encoding="utf-8")
    _run([sys.executable, str(script)] if block.lang == "python" else ["bash", str(script)], block, tmp_path)


def command_lines(block: Block) -> list[list[str]]:
    """The block's command lines as argv lists (comments, redirections and ``&`` dropped, ``[...]``
    unbracketed, ``…`` placeholders filled)."""
    import shlex

    lines = []
    for raw in block.body.splitlines():
        line = re.sub(r"\s#\s.*$", "", raw).strip()
        if not line:
            continue
        line = re.sub(r"\[([^\]]*)\]…?", r"\1", line).replace("s_…", "s_0").replace("…", "x")
        argv = shlex.split(line)
        for stop in (">", "|", "&"):
            if stop in argv:
                argv = argv[:argv.index(stop)]
        lines.append(argv)
    return lines


@pytest.mark.parametrize("block", _params("parse"))
def test_command_lines_parse(block: Block) -> None:
    # Prevents: a reference list of commands (not runnable as written: placeholder ids, servers) naming
    # a flag, a subcommand or a target the command no longer takes.
    from session_manager._cli.data import usage
    from session_manager._cli.data.commands import build_parser
    from session_manager._worker.main import parse_args

    for argv in command_lines(block):
        assert argv[0] == "session-manager", f"{block.id}: not a session-manager command: {argv}"
        try:
            if argv[1:2] == ["data"]:
                args = build_parser().parse_args(argv[2:])
                if getattr(args, "accepts", None) is not None:
                    usage.check_target(args.command, args.data_dir, args.accepts)
            else:
                parse_args(argv[1:])
        except SystemExit as e:  # argparse: --version and --help exit 0, a bad line exits 2
            assert e.code == 0, f"{block.id}: {' '.join(argv)} is refused by its parser"
        except usage.UsageError as e:
            raise AssertionError(f"{block.id}: {' '.join(argv)}: {e}") from None


@pytest.mark.parametrize("block", _params("config", "yaml"))
def test_yaml_block_reads(block: Block) -> None:
    # Prevents: a configuration example the worker would refuse (a renamed key, a bad value).
    from session_manager._worker.config_value import parse_config

    value = yaml.safe_load(block.body)
    if kind(block) == "config":
        parse_config(value)


@pytest.mark.parametrize("block", _params("postgres"))
def test_postgres_block_runs(block: Block, tmp_path: Path) -> None:
    # Prevents: the postgres page's snippet going stale; its schema is dropped before and after.
    from tests import pg_support

    pg_support.require()
    schemas = set(re.findall(r'schema="([a-z_]+)"', block.body))
    for name in schemas:
        pg_support.drop_schema(name)
    try:
        test_block_runs(block, tmp_path)
    finally:
        for name in schemas:
            pg_support.drop_schema(name)


@pytest.mark.parametrize("block", _params("engine"))
def test_engine_block_runs(block: Block, tmp_path: Path) -> None:
    # Prevents: the worker page's iii-sdk client (calls, an observer and what it receives) going stale.
    from tests.steps.engine_steps import Bus, engine_url

    bus = Bus(engine_url(), tmp_path)
    try:
        bus.connect()  # skips, saying why, without an engine or beside another session-manager
        bus.register_surface()
        os.environ.setdefault("III_ENGINE_WS_URL", engine_url())
        test_block_runs(block, tmp_path)
    finally:
        bus.close()


# -- the API reference: the code blocks of the docstrings docs/reference.md renders ------------------------

REFERENCE_MODULES = re.findall(r"^::: ([\w.]+)", (ROOT / "docs" / "reference.md").read_text(encoding="utf-8"), re.M)
LITERAL = re.compile(r"::\n\n((?:[ \t]+\S.*\n|[ \t]*\n)+)")
# Literal blocks that are diagrams, not code: the owner's name -> how the block starts.
DIAGRAMS = {"session_manager.errors": "Exception\n"}


def _own_docstrings(module_name: str) -> list[tuple[str, str]]:
    """The module's docstring and those its public classes, functions and methods define themselves
    (an inherited one, such as typing.Protocol's, is not this package's)."""
    import importlib
    import inspect

    module = importlib.import_module(module_name)
    found = [(module_name, module.__doc__ or "")]
    for name in getattr(module, "__all__", [n for n in dir(module) if not n.startswith("_")]):
        obj = getattr(module, name, None)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)) or not obj.__module__.startswith("session_manager"):
            continue
        found.append((f"{module_name}.{name}", obj.__doc__ or ""))
        for attr, value in list(vars(obj).items()) if inspect.isclass(obj) else []:
            doc = getattr(getattr(value, "__func__", value), "__doc__", None)
            if not attr.startswith("_") and isinstance(doc, str) and doc is not type(value).__doc__:
                found.append((f"{module_name}.{name}.{attr}", doc))
    return found


def docstring_blocks() -> list[Block]:
    import inspect

    found = []
    for module_name in REFERENCE_MODULES:
        for owner, doc in _own_docstrings(module_name):
            text = inspect.cleandoc(doc) + "\n"
            for m in LITERAL.finditer(text):
                body = textwrap.dedent(m.group(1)).strip("\n") + "\n"
                found.append(Block(owner, text.count("\n", 0, m.start(1)) + 1, "python", "", body))
    return found


DOCSTRING_BLOCKS = docstring_blocks()


def test_the_reference_has_docstring_blocks_and_each_is_code_or_a_known_diagram() -> None:
    # Prevents: a code example in a docstring the API reference renders that no test runs.
    owners = {b.page for b in DOCSTRING_BLOCKS}
    assert {"session_manager", "session_manager.aio", "session_manager.messages", "session_manager.testing"} <= owners
    for block in DOCSTRING_BLOCKS:
        if block.page in DIAGRAMS:
            assert block.body.startswith(DIAGRAMS[block.page]), block.id
        else:
            assert block.body.startswith(("import ", "from ")), f"{block.id}: neither code nor a known diagram"


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in DOCSTRING_BLOCKS if b.page not in DIAGRAMS])
def test_docstring_block_runs(block: Block, tmp_path: Path) -> None:
    # Prevents: help() and the API reference showing an example that does not run as written (the aio
    # module's had a top-level `async with` and `filters={...}`; the testing module's used undefined names).
    test_block_runs(block, tmp_path)
