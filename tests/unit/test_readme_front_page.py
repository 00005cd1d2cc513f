"""The README as a front page (issue 27): short, its sections in order, the set-up commands CI runs,
and the stand-in command working from any clone.

The code blocks themselves run in tests/unit/test_docs_blocks.py; the picture of what it does is
checked against the quickstart's real output in tests/unit/test_examples.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.test_docs_blocks import ALL

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAX_LINES = 200
SECTIONS = ["What it does", "Install", "Quickstart", "Which store", "Documentation", "Set up and test"]


def section(heading: str) -> str:
    start = README.index(f"\n## {heading}")
    end = README.find("\n## ", start + 1)
    return README[start: end if end != -1 else len(README)]


def test_the_readme_is_a_short_front_page_with_its_sections_in_order() -> None:
    # Prevents: the README growing back into the manual (it was 1,196 lines with the quickstart at line 244).
    lines = README.splitlines()
    assert len(lines) <= MAX_LINES, len(lines)
    headings = [line[3:] for line in lines if line.startswith("## ")]
    assert [next(h for h in headings if h.startswith(s)) for s in SECTIONS] == [
        h for h in headings if any(h.startswith(s) for s in SECTIONS)]
    assert all(any(h.startswith(s) for h in headings) for s in SECTIONS), headings
    what = [line for line in README[:README.index("\n## ")].splitlines()[1:] if line.strip()]
    assert len(what) <= 3, what  # what it is, in three lines
    assert headings.index(next(h for h in headings if h.startswith("Quickstart"))) <= 2


def test_install_says_it_is_unpublished_with_one_command_each() -> None:
    # Prevents: `pip install iii-session-manager` (not on PyPI) as the first command a user runs.
    install = section("Install")
    assert "Not published on PyPI" in install
    assert "pip install iii-session-manager" not in README
    (block,) = [b for b in ALL if b.page == "README.md" and "Install" in README[:README.index(b.body)]
                and "Quickstart" not in README[:README.index(b.body)]]
    commands = [line.split("#")[0].strip() for line in block.body.splitlines() if line.strip()]
    assert commands == ["pip install .", "pip wheel --no-deps -w dist . && pip install dist/iii_session_manager-*.whl"]
    # Nor anywhere else: a page or an error message naming the unpublished distribution to install.
    texts = [*ROOT.glob("docs/*.md"), *ROOT.glob("session_manager/**/*.py"), *ROOT.glob("examples/*.py")]
    unpublished = re.compile(r"pip install [\"']?iii-session-manager")
    assert [p.name for p in texts if unpublished.search(p.read_text(encoding="utf-8"))] == []
    # The same block on the getting-started page.
    assert block.body in (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_wheel_command_builds_the_wheel_its_install_names(tmp_path: Path) -> None:
    # Prevents: a wheel command a fresh machine cannot run (it was `python -m build`, a package a new
    # user does not have), or one whose `dist/iii_session_manager-*.whl` matches nothing. The install
    # half is .ci/fresh_clone's (it installs a wheel into its venv and smoke-runs it).
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist): the wheel is built from a clone's tracked files")
    block = next(b for b in ALL if b.page == "README.md" and "pip wheel" in b.body)
    line = next(x for x in block.body.splitlines() if "pip wheel" in x)
    build, install = line.split("#")[0].strip().split(" && ")
    tree = tmp_path / "clone"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        if (ROOT / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / name).write_bytes((ROOT / name).read_bytes())
    argv = shlex.split(build)
    assert argv[:2] == ["pip", "wheel"]
    done = subprocess.run([sys.executable, "-m", *argv], cwd=tree, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    pattern = shlex.split(install)[-1]
    assert len(list(tree.glob(pattern))) == 1, sorted(p.name for p in (tree / "dist").iterdir())


def test_the_quickstart_is_twenty_typed_lines() -> None:
    # Prevents: a quickstart that grows past a screen, or falls back to dicts (`["messages"]`).
    body = next(b.body for b in ALL if b.page == "README.md" and b.lang == "python")
    assert len(body.splitlines()) <= 20
    assert "sm.transcript(" in body and ".text" in body and '["' not in body


def test_which_store_names_each_adapter() -> None:
    # Prevents: a user guessing between the four stores.
    rows = [line for line in section("Which store").splitlines() if line.startswith("| `")]
    assert [re.match(r"\| `(\w+)`", r).group(1) for r in rows] == ["fs", "sqlite", "postgres", "bridge"]  # type: ignore[union-attr]


def _normalized(command: str) -> list[str]:
    """A shell command's words without pip's -q and output plumbing (`2>&1 | quiet`)."""
    command = command.split(" 2>&1")[0]
    return [w for w in shlex.split(command) if w != "-q"]


def test_the_set_up_commands_are_the_ones_ci_runs() -> None:
    # Prevents: the README's two set-up commands and its test command drifting from what .ci/run's
    # fresh-clone lane runs (the decision: the README keeps them).
    block = next(b for b in ALL if b.page == "README.md" and "Set up and test" in README[:README.index(b.body)])
    setup, test = [line for line in block.body.splitlines() if line.strip()]
    if not (ROOT / ".ci" / "fresh_clone").is_file():
        pytest.skip("no .ci/ here (an unpacked sdist ships none): nothing to compare the README with")
    script = (ROOT / ".ci" / "fresh_clone").read_text(encoding="utf-8")
    ci_setup = next(line for line in script.splitlines() if line.startswith("python3 -m venv"))
    assert _normalized(setup) == _normalized(ci_setup)
    assert test == "pytest" and re.search(r"^\s+pytest -q --junitxml", script, re.M)
    # The getting-started page's copy says the same.
    assert block.body in (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")


def standin_dir() -> Path | None:
    for candidate in (os.environ.get("III_STANDIN_DIR"), str(ROOT.parent / "shared" / "tools" / "iii-standin")):
        if candidate and (Path(candidate) / "iii_standin").is_dir():
            return Path(candidate).resolve()
    return None


@pytest.mark.reference  # the stand-in is reference material beside the repository: optional, run by the main lane
def test_the_standin_command_starts_from_any_directory_with_iii_standin_dir(tmp_path: Path) -> None:
    # Prevents: the README's stand-in command working only beside the original checkout (issue 27).
    found = standin_dir()
    if found is None:
        pytest.skip("no iii stand-in beside the repository and no III_STANDIN_DIR")
    block = next(b for b in ALL if b.page == "README.md" and "iii_standin" in b.body)
    start = next(line for line in block.body.splitlines() if "iii_standin" in line)
    assert start.startswith("PYTHONPATH=${III_STANDIN_DIR:-") and start.rstrip().endswith("&")
    copies = {line for b in ALL if "iii_standin" in b.body for line in b.body.splitlines() if "iii_standin" in line}
    assert copies == {start}, copies  # the docs' copies (getting started, the worker page) say the same
    # As written, minus the trailing `&` (this test waits for it), from a directory with nothing beside it.
    command = start.rstrip().rstrip("&").replace(" python ", f" {shlex.quote(sys.executable)} ", 1)
    env = {**os.environ, "III_STANDIN_DIR": str(found)}
    env.pop("PYTHONPATH", None)
    server = subprocess.Popen(["bash", "-c", command], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert server.stdout is not None
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline and server.poll() is None:
            line = server.stdout.readline()
            if "listening on ws://" in line:
                break
        assert re.search(r"listening on ws://127\.0\.0\.1:\d+", line), (line, server.poll())
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def test_help_of_the_package_opens_with_a_typed_example_that_runs(tmp_path: Path) -> None:
    # Prevents: `help(session_manager)` opening on a dict example (`sm.call("session::create", {...})`)
    # while the README teaches the typed API, or on one that no longer runs (issue 27).
    import session_manager

    doc = session_manager.__doc__ or ""
    example = doc.split("::\n", 1)[1].split("\n\n", 2)
    code = "\n".join(line[4:] for line in "\n\n".join(example[:2]).splitlines())
    assert "sm.transcript(" in code and "sm.call(" not in code
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["user Will it rain in Paris?", "assistant Light rain tonight."]


def test_the_readme_quickstart_itself_draws_the_picture_above_it(tmp_path: Path) -> None:
    # Prevents: the README's quickstart drifting from its "What it does" picture (test_examples checks
    # the picture against examples/quickstart.py, a copy that could stay right while this one changes).
    from tests.unit.test_examples import normalized_tree

    body = next(b.body for b in ALL if b.page == "README.md" and b.lang == "python")
    (tmp_path / "quickstart.py").write_text(body, encoding="utf-8")
    subprocess.run([sys.executable, "quickstart.py"], cwd=tmp_path, check=True, capture_output=True, timeout=60)
    import session_manager

    with session_manager.open(tmp_path / "data" / "sessions", read_only=True) as sm:
        (sid,) = [s.session_id for s in sm.list().sessions if s.title == "Weather"]
    shown = subprocess.run([Path(sys.executable).parent / "session-manager", "data", "show",
                            str(tmp_path / "data" / "sessions"), sid, "--tree"],
                           capture_output=True, text=True, timeout=60, check=True)
    what = section("What it does")
    picture = what[what.index("```text\n") + 8:]
    assert normalized_tree(shown.stdout) == normalized_tree(picture[:picture.index("```")])
