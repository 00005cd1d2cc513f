"""``session-manager data`` over a ``sqlite:///`` URI: an fs export imports into
sqlite and exports back identically, the read commands and ``call`` take the
URI, ``fsck`` runs the database's integrity check plus the contract's
invariants, and a read of a missing file creates nothing."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.unit.test_datatool import data_dir, run, run_json  # noqa: F401 - the shared fixture


def test_fs_export_imports_into_sqlite_and_exports_back_the_same(
        data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    # Prevents: a store that cannot be moved between fs and sqlite (either direction).
    uri = f"sqlite:///{tmp_path / 'moved.db'}"
    from_fs = tmp_path / "fs.jsonl"
    run_json(capsys, "export", data_dir, "--attachments", "-o", from_fs)
    assert run_json(capsys, "import", uri, from_fs) == {
        "sessions": 3, "entries": 5, "attachments": 1, "attachments_without_bytes": 0}
    from_lite = tmp_path / "lite.jsonl"
    run_json(capsys, "export", uri, "--attachments", "-o", from_lite)
    assert [json.loads(x) for x in from_lite.read_text().splitlines()] == \
        [json.loads(x) for x in from_fs.read_text().splitlines()]
    # And back: into a fresh fs data_dir, exported again, the same documents.
    back = tmp_path / "back"
    assert run_json(capsys, "import", back, from_lite)["sessions"] == 3
    again = tmp_path / "again.jsonl"
    run_json(capsys, "export", back, "--attachments", "-o", again)
    assert again.read_text() == from_fs.read_text()
    assert run_json(capsys, "show", uri, "s_001", "--tree")["leaf"] == "e_005"
    listed = run_json(capsys, "ls", uri)
    assert sorted(s["session_id"] for s in listed["sessions"]) == ["s_001", "s_002", "s_003"]
    got = run_json(capsys, "call", uri, "session::get", '{"session_id": "s_001"}')
    assert got["meta"]["session_id"] == "s_001"
    assert run_json(capsys, "fsck", uri)["healthy"] is True


def test_fsck_reports_a_broken_chain_and_a_wrong_count(
        data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    # Prevents: fsck of a sqlite store that checks only the file format and misses a session whose
    # chain or count is broken (what a hand edit or a foreign writer leaves).
    path = tmp_path / "broken.db"
    export = tmp_path / "fs.jsonl"
    run_json(capsys, "export", data_dir, "-o", export)
    run_json(capsys, "import", f"sqlite:///{path}", export)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM entries WHERE sk = (SELECT sk FROM sessions WHERE session_id = 's_001')"
                     " AND entry_id = 'e_001'")
        meta = json.loads(conn.execute("SELECT meta FROM sessions WHERE session_id = 's_002'").fetchone()[0])
        meta["message_count"] += 5
        conn.execute("UPDATE sessions SET meta = ? WHERE session_id = 's_002'", (json.dumps(meta),))
    code, out, _ = run(capsys, "fsck", f"sqlite:///{path}", "--json")
    report = json.loads(out)
    assert code == 1 and report["healthy"] is False and report["sessions"] == 3
    kinds = sorted((p["kind"], p["file"]) for p in report["problems"])
    assert ("dangling_parent", "s_001") in kinds and ("count_mismatch", "s_002") in kinds
    assert all(f != "s_003" for _, f in kinds)


def test_a_read_of_a_missing_database_creates_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a mistyped path turned into a new empty database by ls or fsck.
    uri = f"sqlite:///{tmp_path / 'typo.db'}"
    for command in ("ls", "fsck"):
        code, _, err = run(capsys, command, uri)
        assert code == 1 and "no such database file" in err
    assert list(tmp_path.iterdir()) == []
