"""``session-manager data``: every subcommand over a real data_dir, text and
``--json``, exit statuses, and a read-back of the data_dir afterwards."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._cli.data import main
from session_manager._hosts.surface import BY_ID
from session_manager._wire.schemas import json_schema
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds
from session_manager.store.fs import FsStore


def user(text: str, ts: int = 1) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}], "stop_reason": "end",
            "model": "m", "provider": "p", "timestamp": 2}


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """s_001 "Weather" (owner u1): a branch (e_001 -> e_002 | e_003 -> e_004), an attachment, a
    custom entry e_005 (the leaf); s_002 "Other" (working); s_003 "Third" (owner u2)."""
    d = tmp_path / "data"
    clock = ManualClock(1_000_000)
    with session_manager.open(d, ids=SequentialIds(), clock=clock) as sm:
        sm.call("session::create", {"title": "Weather", "metadata": {"owner": "u1", "n": 3}})
        e1 = sm.call("session::append", {"session_id": "s_001", "message": user("Rain?")})["entry_id"]
        sm.call("session::append", {"session_id": "s_001", "message": assistant("Yes.")})
        sm.call("session::append", {"session_id": "s_001", "message": user("Sure?"), "parent_id": e1})
        sm.call("session::append", {"session_id": "s_001", "message": assistant("No.")})
        sm.call("session::put-attachment", {"session_id": "s_001", "name": "a.txt", "mime": "text/plain",
                                            "data": base64.b64encode(b"bytes\x00\xff").decode()})
        sm.call("session::append", {"session_id": "s_001", "custom": {"custom_type": "note", "data": {"k": 1}}})
        clock.advance(10)
        sm.call("session::create", {"title": "Other"})
        sm.call("session::set-status", {"session_id": "s_002", "status": "working"})
        clock.advance(10)
        sm.call("session::create", {"title": "Third", "metadata": {"owner": "u2"}})
    return d


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *args: str | Path) -> Any:
    code, out, err = run(capsys, *args, "--json")
    assert code == 0 and err == "", (out, err)
    return json.loads(out)


def snapshot(d: Path) -> dict[str, Any]:
    """Everything a fresh store reads back from a data_dir."""
    store = FsStore(d, read_only=True)
    try:
        out = {}
        for meta in store.list_metas():
            sid = meta["session_id"]
            out[sid] = {
                "meta": meta, "leaf": store.get_leaf(sid),
                "entries": sorted(store.entries(sid), key=lambda e: e["id"]),
                "attachments": sorted(((a, store.read_attachment(sid, a["attachment_id"]))
                                       for a in store.list_attachments(sid)), key=lambda p: p[0]["attachment_id"]),
            }
        return out
    finally:
        store.close()


# -- ls ---------------------------------------------------------------------------------------------------


def test_ls_filters_and_sorts(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: filters or orders that differ from session::list's, or a text table missing sessions.
    ids = lambda doc: [m["session_id"] for m in doc["sessions"]]  # noqa: E731
    assert ids(run_json(capsys, "ls", data_dir)) == ["s_003", "s_002", "s_001"]
    assert ids(run_json(capsys, "ls", data_dir, "--sort", "created_asc")) == ["s_001", "s_002", "s_003"]
    assert ids(run_json(capsys, "ls", data_dir, "--status", "working")) == ["s_002"]
    assert ids(run_json(capsys, "ls", data_dir, "--meta", "owner=u1")) == ["s_001"]
    assert ids(run_json(capsys, "ls", data_dir, "--meta", "owner=u1", "--meta", "n=3")) == ["s_001"]
    assert ids(run_json(capsys, "ls", data_dir, "--meta", "n=\"3\"")) == []  # JSON value: the string "3"
    with session_manager.open(data_dir) as sm:
        assert run_json(capsys, "ls", data_dir)["sessions"] == sm.call("session::list", {})["sessions"]
    code, out, err = run(capsys, "ls", data_dir)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["SESSION", "STATUS", "MESSAGES", "UPDATED", "(UTC)", "FORKED", "FROM", "TITLE"]
    # MESSAGES counts the active path, as `show` does: s_001 has 4 messages on every branch, 3 on its path.
    assert [ln.split()[:3] for ln in lines[1:]] == [["s_003", "idle", "0"], ["s_002", "working", "0"],
                                                     ["s_001", "idle", "3"]]
    assert run_json(capsys, "ls", data_dir)["active_message_counts"] == {"s_001": 3, "s_002": 0, "s_003": 0}


def test_ls_on_a_missing_data_dir_fails_without_creating_it(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a read command creating an empty data_dir where a typo pointed it.
    code, out, err = run(capsys, "ls", tmp_path / "nope")
    assert code == 1 and out == "" and len(err.splitlines()) == 1 and "does not exist" in err
    assert not (tmp_path / "nope").exists()


# -- show -------------------------------------------------------------------------------------------------


def test_show_prints_the_active_transcript(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a transcript that shows another branch, drops custom entries or differs from session::messages.
    doc = run_json(capsys, "show", data_dir, "s_001")
    assert [m["entry_id"] for m in doc["messages"]] == ["e_001", "e_003", "e_004", "e_005"]
    assert doc["meta"]["title"] == "Weather"
    code, out, _ = run(capsys, "show", data_dir, "s_001")
    assert code == 0
    assert out.index("Rain?") < out.index("Sure?") < out.index("No.") < out.index("custom note")
    assert "Yes." not in out  # the other branch


def test_show_tree_marks_the_active_path(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a tree that hides a branch or marks the wrong path as active.
    doc = run_json(capsys, "show", data_dir, "s_001", "--tree")
    assert doc["leaf"] == "e_005"
    assert {n["entry"]["id"]: n["active"] for n in doc["entries"]} == {
        "e_001": True, "e_002": False, "e_003": True, "e_004": True, "e_005": True}
    code, out, _ = run(capsys, "show", data_dir, "s_001", "--tree")
    assert code == 0
    rows = {line.split()[2] if line.startswith("*") else line.split()[1]: line
            for line in out.splitlines() if " e_00" in line}
    assert rows["e_002"].startswith(" ") and "Yes." in rows["e_002"]
    assert all(rows[e].startswith("*") for e in ("e_001", "e_003", "e_004", "e_005"))
    assert rows["e_005"].endswith("(leaf)")


def test_show_unknown_session_is_one_line_not_found(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a traceback, or exit 0, for a mistyped session id.
    code, out, err = run(capsys, "show", data_dir, "s_999")
    assert code == 1 and out == "" and err.splitlines() == [
        "session-manager data show: error: session/not_found: session s_999 does not exist"]
    code, out, err = run(capsys, "show", data_dir, "s_999", "--json")
    assert code == 1 and json.loads(out)["error"]["code"] == "session/not_found"


# -- export / import ------------------------------------------------------------------------------------


def test_export_import_round_trips_every_session(data_dir: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: an export that loses a branch, the leaf, metadata or attachment bytes on the way to another store.
    out_file = tmp_path / "all.jsonl"
    summary = run_json(capsys, "export", data_dir, "--attachments", "-o", out_file)
    assert summary == {"sessions": 3, "output": str(out_file)}
    lines = out_file.read_text(encoding="utf-8").splitlines()
    docs = [json.loads(line) for line in lines]
    assert [d["meta"]["session_id"] for d in docs] == ["s_001", "s_002", "s_003"]
    assert docs[0]["leaf"] == "e_005" and len(docs[0]["entries"]) == 5
    assert base64.b64decode(docs[0]["attachments"][0]["data"]) == b"bytes\x00\xff"

    target = tmp_path / "copy"
    assert run_json(capsys, "import", target, out_file) == {
        "sessions": 3, "entries": 5, "attachments": 1, "attachments_without_bytes": 0}
    assert snapshot(target) == snapshot(data_dir)
    with session_manager.open(target) as sm:  # and the copy keeps working
        sm.call("session::append", {"session_id": "s_001", "message": user("more")})
    assert len(snapshot(target)["s_001"]["entries"]) == 6


def test_export_to_stdout_and_without_bytes(data_dir: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: attachment bytes leaking into a metadata-only export, or an import inventing attachments.
    code, out, err = run(capsys, "export", data_dir, "s_001")
    assert code == 0 and err == ""
    assert run(capsys, "export", data_dir, "s_001", "--json") == (0, out, "")  # no summary inside the stream
    (doc,) = [json.loads(line) for line in out.splitlines()]
    assert "data" not in doc["attachments"][0] and doc["attachments"][0]["name"] == "a.txt"
    (tmp_path / "one.jsonl").write_text(out, encoding="utf-8")
    result = run_json(capsys, "import", tmp_path / "copy", tmp_path / "one.jsonl")
    assert result["attachments"] == 0 and result["attachments_without_bytes"] == 1
    copy = snapshot(tmp_path / "copy")
    assert list(copy) == ["s_001"] and copy["s_001"]["attachments"] == []
    assert copy["s_001"]["entries"] == snapshot(data_dir)["s_001"]["entries"]


def test_import_refuses_bad_or_clashing_files_and_writes_nothing(data_dir: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a half-imported file, or an import overwriting a session that already exists.
    code, out, _ = run(capsys, "export", data_dir)
    good = out.splitlines()
    bad = tmp_path / "bad.jsonl"
    broken = json.loads(good[1])
    broken["entries"] = [{"id": "x"}]
    bad.write_text("\n".join([good[0], json.dumps(broken)]) + "\n", encoding="utf-8")
    code, _, err = run(capsys, "import", tmp_path / "fresh", bad)
    assert code == 1 and "line 2 (session s_002): entries[0]" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "fresh").exists() or snapshot(tmp_path / "fresh") == {}

    clash = tmp_path / "clash.jsonl"
    clash.write_text(out, encoding="utf-8")
    before = snapshot(data_dir)
    code, _, err = run(capsys, "import", data_dir, clash)
    assert code == 1 and "already exists" in err
    assert snapshot(data_dir) == before


def test_export_of_an_unknown_session_writes_nothing(data_dir: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a half-written export file that looks complete, or a missing session silently left out.
    target = tmp_path / "out.jsonl"
    code, out, err = run(capsys, "export", data_dir, "s_001", "s_404", "-o", target)
    assert code == 1 and out == "" and "session/not_found" in err and "s_404" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    code, out, err = run(capsys, "export", data_dir, "s_404")
    assert code == 1 and out == ""


def test_export_markdown_transcript(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a Markdown export of the wrong branch or of several sessions glued together.
    code, out, _ = run(capsys, "export", data_dir, "s_001", "--markdown")
    assert code == 0 and out.startswith("# Weather\n")
    assert out.count("\n## ") == 4 and "Yes." not in out and "Sure?" in out
    code, _, err = run(capsys, "export", data_dir, "--markdown")
    assert code == 2 and "exactly one SESSION" in err  # a usage error (issue 27)


# -- fsck / compact -----------------------------------------------------------------------------------------


def test_fsck_healthy(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: false alarms on a data_dir the store itself wrote.
    doc = run_json(capsys, "fsck", data_dir)
    assert doc["healthy"] is True and doc["sessions"] == 3 and doc["problems"] == []
    code, out, _ = run(capsys, "fsck", data_dir)
    assert code == 0 and out.strip().endswith("healthy: 3 session logs, 0 errors, 0 warnings")


def test_fsck_reports_damage_with_line_numbers(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: damage fsck cannot see, or reports that do not say where to look.
    log = data_dir / "s_002.jsonl"
    lines = log.read_bytes().split(b"\n")
    log.write_bytes(b"\n".join([lines[0], b"{not json", *lines[1:]]) + b'{"type":"entry","en')
    orphan = data_dir / "attachments" / "s_404"
    orphan.mkdir(parents=True)
    (orphan / "a.bin").write_bytes(b"x")
    bin_file = next((data_dir / "attachments" / "s_001").glob("*.bin"))
    bin_file.unlink()
    code, out, _ = run(capsys, "fsck", data_dir, "--json")
    assert code == 1
    doc = json.loads(out)
    found = {(p["kind"], p["file"], p.get("line")) for p in doc["problems"]}
    assert ("malformed_line", "s_002.jsonl", 2) in found
    assert ("torn_tail", "s_002.jsonl", len(lines) + 1) in found
    assert ("orphaned_attachments", "attachments/s_404", None) in found
    assert ("attachment_without_bytes", f"attachments/s_001/{bin_file.stem}.json", None) in found
    assert doc["healthy"] is False and len(doc["problems"]) == 4


def test_fsck_names_crash_leftovers_as_warnings(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: leftovers the store recovers from by design turning a healthy data_dir "not healthy".
    (data_dir / "s_009.jsonl~deleted").write_bytes(b"")
    (data_dir / "attachments" / "s_009~deleted").mkdir()
    (data_dir / "s_001.jsonl.compact").write_bytes(b"partial")
    (data_dir / "notes.txt").write_text("mine")
    doc = run_json(capsys, "fsck", data_dir)
    assert doc["healthy"] is True
    assert sorted((p["severity"], p["kind"], p["file"]) for p in doc["problems"]) == [
        ("warning", "interrupted_delete", "attachments/s_009~deleted"),
        ("warning", "interrupted_delete", "s_009.jsonl~deleted"),
        ("warning", "leftover_temp", "s_001.jsonl.compact"),
        ("warning", "unexpected_file", "notes.txt"),
    ]


def test_fsck_repair_cuts_only_the_torn_tail(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a repair that cuts good records, or leaves a tail that hides the next append.
    log = data_dir / "s_001.jsonl"
    good = log.read_bytes()
    before = snapshot(data_dir)
    log.write_bytes(good + b'{"type":"append","entry":{"id"')
    doc = run_json(capsys, "fsck", data_dir, "--repair")
    assert doc["healthy"] is True and doc["problems"] == []
    assert doc["repaired"] == [{"file": "s_001.jsonl", "line": good.count(b"\n") + 1, "cut_to_bytes": len(good)}]
    assert log.read_bytes() == good
    assert snapshot(data_dir) == before


def test_compact_shrinks_streamed_logs_and_keeps_their_state(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: compaction changing what a session reads back, or rewriting logs it cannot shrink.
    d = tmp_path / "d"
    with session_manager.open(d, ids=SequentialIds(), clock=ManualClock(5)) as sm:
        sm.call("session::create", {"title": "streamed"})
        sm.call("session::create", {"title": "small"})
        sm.call("session::append", {"session_id": "s_001", "message": assistant("")})
        for i in range(40):
            sm.call("session::update-message", {"session_id": "s_001", "entry_id": "e_001",
                                                "content": [{"type": "text", "text": "x" * i}]})
    before = snapshot(d)
    size = (d / "s_001.jsonl").stat().st_size
    doc = run_json(capsys, "compact", d)
    assert doc["sessions"] == 2 and [c["session_id"] for c in doc["compacted"]] == ["s_001"]
    assert doc["compacted"][0]["bytes_before"] == size > doc["compacted"][0]["bytes_after"]
    assert (d / "s_001.jsonl").stat().st_size == doc["compacted"][0]["bytes_after"]
    assert snapshot(d) == before
    assert run_json(capsys, "compact", d)["compacted"] == []


# -- call / schema ---------------------------------------------------------------------------------------------


def test_call_reads_and_writes(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a scripting entry point that answers differently from the function, or loses a write.
    got = run_json(capsys, "call", data_dir, "session::get", '{"session_id": "s_002"}')
    assert got["meta"]["status"] == "working"
    appended = run_json(capsys, "call", data_dir, "session::append",
                        json.dumps({"session_id": "s_002", "message": user("hi")}))
    assert set(appended) == {"entry_id", "parent_id", "timestamp"}
    assert [e["id"] for e in snapshot(data_dir)["s_002"]["entries"]] == [appended["entry_id"]]
    code, out, err = run(capsys, "call", data_dir, "session::get", "{bad")
    assert code == 2 and "error: JSON" in err and out == ""  # malformed arguments: a usage error
    code, _, err = run(capsys, "call", data_dir, "session::nope", "{}")
    assert code == 2 and "no function 'session::nope'" in err
    code, _, err = run(capsys, "call", data_dir, "session::get", '{"session_id": ""}')
    assert code == 1 and "session/invalid_request" in err


def test_schema_prints_the_registered_schemas(capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a schema command that drifts from what the worker registers.
    doc = run_json(capsys, "schema", "session::messages")
    f = BY_ID["session::messages"]
    assert doc["request_schema"] == json_schema(f.request)
    assert doc["response_schema"] == json_schema(f.response, nullable=f.nullable)
    assert doc["mutates"] is False
    code, out, _ = run(capsys, "schema", "session::append")
    assert code == 0
    assert any(line.split()[:3] == ["session_id", "string", "yes"] for line in out.splitlines())


def test_console_script_dispatches_data(data_dir: Path) -> None:
    # Prevents: `session-manager data` starting the worker instead (the no-subcommand default).
    out = subprocess.run([sys.executable, "-m", "session_manager", "data", "ls", str(data_dir), "--json"],
                         capture_output=True, text=True, timeout=60, env={**os.environ})
    assert out.returncode == 0, out.stderr
    assert [m["session_id"] for m in json.loads(out.stdout)["sessions"]] == ["s_003", "s_002", "s_001"]


def test_progress_bar_only_on_a_terminal(tmp_path: Path) -> None:
    # Prevents: bar redraws in piped output, or no feedback at all on a long interactive run.
    import fcntl
    import pty
    import struct
    import termios

    d = tmp_path / "many"
    with session_manager.open(d, ids=SequentialIds(), clock=ManualClock(1)) as sm:
        for i in range(60):
            sm.call("session::create", {"title": f"t{i}"})
    command = [sys.executable, "-m", "session_manager", "data", "export", str(d), "-o", str(tmp_path / "x.jsonl")]
    piped = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert piped.returncode == 0 and piped.stderr == ""
    assert piped.stdout.strip() == f"exported 60 sessions to {tmp_path / 'x.jsonl'}"

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a width
    try:
        on_tty = subprocess.run(command, stdout=subprocess.PIPE, stderr=slave, timeout=60)
        os.close(slave)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(master)
    assert on_tty.returncode == 0
    assert b"export:" in shown and b"/60 [" in shown  # the bar (cleared at the end: leave=False)
    assert len((tmp_path / "x.jsonl").read_text(encoding="utf-8").splitlines()) == 60


# -- beside a live writer (the data_dir's owner lock) ------------------------------------------------------


@pytest.fixture
def live_writer(data_dir: Path) -> Any:
    """A writable open holding the data_dir, as a running worker does (the lock is per open file
    description, so an owner in this process conflicts exactly like one in another process)."""
    with session_manager.open(data_dir) as sm:
        yield sm


def test_reads_work_beside_a_live_writer(data_dir: Path, live_writer: Any,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: inspection tools that need the worker stopped, or that write into its data_dir.
    live_writer.call("session::append", {"session_id": "s_002", "message": user("while inspecting")})
    files = {p: p.read_bytes() for p in data_dir.rglob("*") if p.is_file() and p.suffix == ".jsonl"}
    assert [m["session_id"] for m in run_json(capsys, "ls", data_dir)["sessions"]] == ["s_002", "s_003", "s_001"]
    assert [m["message"]["content"][0]["text"] for m in run_json(capsys, "show", data_dir, "s_002")["messages"]] \
        == ["while inspecting"]
    assert run_json(capsys, "show", data_dir, "s_001", "--tree")["leaf"] == "e_005"
    assert run_json(capsys, "fsck", data_dir)["healthy"] is True
    assert run_json(capsys, "call", data_dir, "session::get", '{"session_id": "s_003"}')["meta"]["title"] == "Third"
    code, out, _ = run(capsys, "export", data_dir)
    assert code == 0 and len(out.splitlines()) == 3
    assert {p: p.read_bytes() for p in files} == files  # nothing written by the readers
    live_writer.call("session::append", {"session_id": "s_002", "message": user("still mine")})  # the owner goes on


@pytest.mark.parametrize("args", [
    ["compact"],
    ["fsck", "--repair"],
    ["call", "session::append", json.dumps({"session_id": "s_002", "message": user("x")})],
    ["import", "FILE"],
])
def test_writers_refuse_a_data_dir_a_writer_holds(data_dir: Path, tmp_path: Path, live_writer: Any, args: list[str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a maintenance command rewriting or truncating logs under a running worker.
    export = tmp_path / "other.jsonl"
    other = tmp_path / "other"
    with session_manager.open(other) as sm:
        sm.call("session::create", {"title": "elsewhere"})
    run(capsys, "export", other, "-o", export)
    args = [str(export) if a == "FILE" else a for a in args]
    before = {p: p.read_bytes() for p in data_dir.rglob("*") if p.is_file()}
    code, out, err = run(capsys, args[0], data_dir, *args[1:])
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1 and "session/storage" in err and "already open for writing" in err, err
    assert {p: p.read_bytes() for p in data_dir.rglob("*") if p.is_file()} == before
