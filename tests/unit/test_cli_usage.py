"""``session-manager data``'s edges (issue 27): every usage error exits 2 with one
line (and a suggestion where one is close), each subcommand's ``--help`` names
exactly the targets it takes, ``show`` and ``ls`` count the active path with
plural rules, and ``ls`` shows forked-from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import session_manager
from session_manager._cli.data import main, usage
from session_manager._cli.data.commands import build_parser
from session_manager._cli.main import main as worker_main
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds
from session_manager.messages import assistant_message, user_message


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    try:
        code = main([str(a) for a in args])
    except SystemExit as e:  # argparse's own errors
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """s_001: u -> a1 | a2 (regenerated; 3 messages, 2 on the active path); s_002: one message;
    s_003: a fork of s_001 at its question."""
    d = tmp_path / "data"
    with session_manager.open(d, ids=SequentialIds(), clock=ManualClock(1_000)) as sm:
        sid = sm.create(title="Branched").session_id
        question = sm.append(sid, message=user_message("Rain?")).entry_id
        first = sm.append(sid, message=assistant_message("Yes.")).entry_id
        sm.regenerate(sid, first)
        sm.append(sid, message=assistant_message("No."))
        single = sm.create(title="Single").session_id
        sm.append(single, message=user_message("hi"))
        sm.fork(sid, entry_id=question, title="Fork")
    return d


@pytest.mark.parametrize(("args", "named"), [
    (["ls", "DIR", "--meta", "user"], "--meta 'user': expected KEY=VALUE"),
    (["export", "DIR", "s_001", "s_002", "--markdown"], "exactly one SESSION"),
    (["export", "DIR", "s_001", "--markdown", "--html"], "choose one format"),
    (["call", "DIR", "session::get", "{bad"], "JSON"),
    (["call", "DIR", "messages", "{}"], "did you mean 'session::messages'?"),
    (["schema", "mesages"], "did you mean 'session::messages'?"),
    (["fsck", "postgresql://127.0.0.1:9/none"], "fsck takes a directory or a sqlite:/// URI, not a postgresql://"),
    (["compact", "postgresql://127.0.0.1:9/none"], "compact takes a directory"),
    (["import", "ws://127.0.0.1:9", "FILE"], "import takes a directory or a postgresql:// URI or a sqlite:/// URI, "
                                              "not a ws://"),
    (["call", "ws://127.0.0.1:9", "session::delete", "{}"], "session::delete writes"),
    # Its --help offered a ws:// URL, then a purge over one exited 1 after trying to connect.
    (["purge", "ws://127.0.0.1:9", "--idle-days", "3"], "purge deletes; a ws:// engine URL is opened read-only"),
    # A sqlite URI with two slashes (a common slip) ended in a ValueError traceback, exit 1.
    (["ls", "sqlite://x.db"], "expected sqlite:///relative/path.db"),
    # An option the target cannot take: --repair over a database exited 1, like a failed check.
    (["fsck", "sqlite:///x.db", "--repair"], "a sqlite database has none"),
    # Exited 1 as a failed export (session/invalid_request), after opening the store.
    (["export", "DIR", "s_001", "--meta", "user=u_1"], "--meta selects the sessions to export: name no SESSION"),
    (["fsck", "sqlite://x.db"], "expected sqlite:///relative/path.db"),
    (["import", "sqlite://x.db?mode=ro", "FILE"], "expected sqlite:///relative/path.db"),
])
def test_usage_errors_exit_2_with_one_line_and_touch_nothing(
        data_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str], named: str) -> None:
    # Prevents: usage errors exiting 1 like a failed run (issue 27: `ls --meta user`, `export A B
    # --markdown`), a list of every function id instead of a suggestion, and a refused target
    # that was opened (or connected to) first.
    before = sorted((p.name, p.stat().st_size) for p in data_dir.rglob("*"))
    code, out, err = run(capsys, *[str(data_dir) if a == "DIR" else a for a in args])
    assert code == 2, err
    assert out == "" and len(err.splitlines()) == 1 and named in err and "(see --help)" in err, err
    assert "session::append-many" not in err  # no dump of the 23 ids
    assert sorted((p.name, p.stat().st_size) for p in data_dir.rglob("*")) == before


def test_a_usage_error_under_json_is_a_json_error_with_exit_2(data_dir: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a script reading --json output getting prose (or exit 1) for its own mistake.
    code, out, err = run(capsys, "ls", data_dir, "--meta", "user", "--json")
    assert code == 2 and err == ""
    assert json.loads(out) == {"error": {"code": None, "message": "--meta 'user': expected KEY=VALUE"}}


def test_an_unknown_function_far_from_every_id_still_says_what_ids_look_like(
        data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a bare "no function" with no way forward when nothing is close enough to suggest.
    code, _, err = run(capsys, "call", data_dir, "zzzzzz", "{}")
    assert code == 2 and "no function 'zzzzzz'" in err and "session::messages" in err and "did you mean" not in err


def test_mistyped_subcommands_get_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: `data lss` answered with the whole list of subcommands and no suggestion, and a
    # mistyped `dta` starting the worker's argument parser ("unrecognized arguments").
    code, out, err = run(capsys, "lss", "x")
    assert code == 2 and out == "" and err.strip() == (
        "session-manager data: error: unknown subcommand 'lss'; did you mean 'ls'? (see --help)")
    assert worker_main(["dta", "ls", "x"]) == 2
    assert capsys.readouterr().err.strip() == (
        "session-manager: error: unknown command 'dta'; did you mean 'data'? (see --help)")
    code, _, err = run(capsys, "frobnicate")  # nothing close: argparse's own message, still exit 2
    assert code == 2 and "frobnicate" in err


@pytest.mark.parametrize("command", [n for n in build_parser().get_default("subcommands") if n != "schema"])
def test_each_help_names_exactly_the_targets_its_command_takes(command: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: `fsck --help` / `compact --help` promising a postgresql:// URI they then refuse.
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    help_text = " ".join(out.split())
    for target, kind in (("postgresql://", usage.POSTGRES), ("sqlite:///", usage.SQLITE), ("ws://", usage.ENGINE)):
        accepted = True
        try:
            usage.check_target(command, f"{target}127.0.0.1:9/x", build_parser().parse_args(_minimal(command)).accepts)
        except usage.UsageError:
            accepted = False
        assert (target in help_text) == accepted, (command, kind)
    if command == "purge":  # takes an engine URL to list what would go, never to delete
        assert "a ws:// URL with --dry-run only" in help_text


def _minimal(command: str) -> list[str]:
    extra = {"show": ["s"], "import": ["f"], "call": ["session::get", "{}"]}.get(command, [])
    return [command, "d", *extra]


def test_show_counts_the_active_path_with_plural_rules(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: "1 messages", and a header counting every branch while the transcript shows one.
    code, out, _ = run(capsys, "show", data_dir, "s_002")
    assert code == 0 and "· 1 message ·" in out
    code, out, _ = run(capsys, "show", data_dir, "s_001")
    assert code == 0 and "· 2 messages (3 on every branch) ·" in out and out.count("── ") == 2
    code, out, _ = run(capsys, "show", data_dir, "s_001", "--tree")
    assert code == 0 and "· 2 messages (3 on every branch) ·" in out
    code, out, _ = run(capsys, "show", data_dir, "s_003")
    assert code == 0 and "forked from s_001" in out and "· 1 message ·" in out


def test_ls_counts_the_active_path_and_shows_forked_from(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: `ls` listing 3 for a session `show` shows 2 messages of, and forks not telling their origin.
    code, out, _ = run(capsys, "ls", data_dir, "--sort", "created_asc")
    rows = [line.split() for line in out.splitlines()]
    assert code == 0 and rows[0][5:8] == ["FORKED", "FROM", "TITLE"]
    assert [(r[0], r[2], r[5]) for r in rows[1:]] == [("s_001", "2", "-"), ("s_002", "1", "-"),
                                                      ("s_003", "1", "s_001")]


def test_an_unreachable_engine_is_one_error_line(tmp_path: Path) -> None:
    # Prevents: the iii SDK's "Connection failed: ..." warning once per retry (three lines) before the
    # command's own error, where the worker has them at DEBUG while its engine is down.
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # a loopback port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "session_manager", "data", "ls", f"ws://127.0.0.1:{port}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"session-manager data ls: error: session/storage: the main engine at ws://127.0.0.1:{port} is unreachable"]


def test_export_takes_its_sessions_after_its_options_too(data_dir: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: `export DIR --markdown s_001` (or `-o FILE s_001 s_002`) refused as "unrecognized
    # arguments" because argparse fills SESSION... before the first option, and a usage error found
    # after `-o FILE` was created.
    code, out, err = run(capsys, "export", data_dir, "--markdown", "s_002")
    assert code == 0 and err == "" and out.startswith("# ")
    target = tmp_path / "two.jsonl"
    code, _, err = run(capsys, "export", data_dir, "-o", target, "s_001", "s_002")
    assert code == 0, err
    assert [json.loads(line)["meta"]["session_id"] for line in target.read_text().splitlines()] == ["s_001", "s_002"]
    refused = tmp_path / "refused.jsonl"
    code, _, err = run(capsys, "export", data_dir, "s_001", "--meta", "user=u_1", "-o", refused)
    assert code == 2 and not refused.exists()
    code, _, err = run(capsys, "export", data_dir, "s_001", "--bogus")
    assert code == 2 and "unrecognized arguments: --bogus" in err
