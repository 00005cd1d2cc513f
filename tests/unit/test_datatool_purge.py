"""``session-manager data purge`` and ``data export --meta``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._cli.data import main
from session_manager.clock import ManualClock

OLD_MS = 1_000_000  # 1970: idle for any number of days the tests ask for


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def _fill(d: Path, owner: str, n: int, *, old: bool, status: str | None = None, text: str = "hi") -> list[str]:
    clock = ManualClock(OLD_MS) if old else None
    ids = []
    with session_manager.open(d, clock=clock) as sm:
        for _ in range(n):
            sid = sm.create(metadata={"owner": owner}).session_id
            sm.append(sid, message=_user(text))
            if status is not None:
                sm.set_status(sid, status=status)
            ids.append(sid)
    return ids


def _left(d: Path) -> set[str]:
    with session_manager.open(d, read_only=True) as sm:
        return {m.session_id for m in sm.list(limit=500).sessions}


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_purge_meta_deletes_one_tenant_and_the_deletion_survives_a_reopen(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a hand purge taking other tenants, or reporting what it did not delete.
    d = tmp_path / "d"
    a = _fill(d, "A", 3, old=False)
    b = _fill(d, "B", 2, old=False)
    code, out, err = run(capsys, "purge", d, "--meta", "owner=A", "--json")
    assert code == 0 and err == ""
    # What it reports, not the order: sessions made within one millisecond (real clock) list in
    # either order (a flaky failure under load).
    report = json.loads(out)
    assert report == {"session_ids": report["session_ids"], "dry_run": False}
    assert sorted(report["session_ids"]) == sorted(a)
    assert _left(d) == set(b)


def test_purge_idle_days_with_status_and_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: --idle-days taking recent sessions, --status ignored, a dry run that deletes.
    d = tmp_path / "d"
    old_done = _fill(d, "A", 2, old=True, status="done")
    old_idle = _fill(d, "A", 1, old=True)
    recent = _fill(d, "B", 1, old=False, status="done")
    code, out, _ = run(capsys, "purge", d, "--idle-days", "30", "--status", "done", "--dry-run")
    lines = out.splitlines()  # oldest first; these two share their creation ms, so either order
    assert code == 0 and lines[0] == "would purge 2 sessions" and sorted(lines[1:]) == sorted(old_done)
    assert _left(d) == {*old_done, *old_idle, *recent}
    code, out, _ = run(capsys, "purge", d, "--idle-days", "30", "--status", "done")
    assert code == 0 and out.strip() == "purged 2 sessions"
    assert _left(d) == {*old_idle, *recent}
    code, out, _ = run(capsys, "purge", d, "--idle-days", "30", "--meta", "owner=B")
    assert code == 0 and out.strip() == "purged 0 sessions"  # B's session is recent
    code, out, _ = run(capsys, "purge", d, "--idle-days", "30")
    assert code == 0 and out.strip() == "purged 1 session" and _left(d) == set(recent)


@pytest.mark.parametrize("args", [[], ["--status", "done"], ["--idle-days", "0"], ["--idle-days", "x"],
                                  ["--meta", "owner=A", "--status", "bogus"]])
def test_purge_usage_errors_exit_2_and_delete_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      args: list[str]) -> None:
    # Prevents: `data purge DIR` (no tenant, no age) deleting every session, or a bad value run anyway.
    d = tmp_path / "d"
    ids = _fill(d, "A", 1, old=True)
    with pytest.raises(SystemExit) as exited:
        main(["purge", str(d), *args])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert _left(d) == set(ids)


def test_purge_of_a_missing_data_dir_fails_without_creating_it(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "purge", tmp_path / "nope", "--idle-days", "1")
    assert code == 1 and "does not exist" in err and not (tmp_path / "nope").exists()


def test_purge_draws_a_progress_bar_on_a_terminal_and_erases(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a long hand purge with no sign of progress, and one that leaves the text on disk.
    d = tmp_path / "d"
    marker = "PURGE-CLI-MARKER-41c7"
    ids = _fill(d, "A", 120, old=True, text=marker)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, out, err = run(capsys, "purge", d, "--meta", "owner=A")
    assert code == 0 and out.strip() == "purged 120 sessions"
    assert "purge:" in err and "/120 [" in err  # tqdm draws the bar, with the total counted before deleting
    assert _left(d) == set()
    for root, _dirs, files in os.walk(d):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                assert marker.encode() not in f.read(), name
    assert len(ids) == 120


def test_export_meta_exports_one_tenant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a tenant export (data portability) that leaks another tenant's sessions.
    d = tmp_path / "d"
    a = _fill(d, "A", 2, old=False)
    _fill(d, "B", 2, old=False)
    code, out, _ = run(capsys, "export", d, "--meta", "owner=A")
    assert code == 0
    docs = [json.loads(line) for line in out.splitlines()]
    assert sorted(doc["meta"]["session_id"] for doc in docs) == sorted(a)
    code, _, err = run(capsys, "export", d, a[0], "--meta", "owner=A")
    assert code == 2 and "--meta" in err  # a usage error (issue 27: exit 2)
