"""A lone writer in ``durability="fsync"``: each append costs the log one ``write`` and one
``fsync`` and no other file call (no reopen, no stat of the log, no directory sync) but the one
check that the data_dir is still the one the store locked (issue 25: an ``fstat`` of the held lock
file, or now and then an ``lstat`` of its path), and it is answered, and its event delivered, only
after the fsync covering its bytes returned."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

import session_manager
from tests.unit.test_group_commit import assert_told_after_sync

APPENDS = 20
# The file calls an append could add on the path (each would be a regression for a lone writer).
WATCHED = ("open", "stat", "lstat", "fstat", "ftruncate", "pread", "replace", "rename", "unlink")


def message(i: int) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": f"m{i}"}], "timestamp": i}


def test_a_lone_fsync_mode_append_pays_one_write_and_one_fsync_and_answers_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a lone writer in fsync mode paying more than the one write and one fsync the contract
    # needs (a directory fsync, an fstat or a reopen per append, a second sync of a sidecar), and an
    # answer or an event reaching the caller before the fsync of its bytes returned.
    sm = session_manager.open(tmp_path / "d", durability="fsync")
    sid = sm.call("session::create", {"title": "lone"})["session_id"]
    first = sm.call("session::append", {"session_id": sid, "message": message(0)})["entry_id"]
    log = sm.service.store.file_path(sid)  # type: ignore[attr-defined]
    history: list[tuple[str, Any]] = []
    lock = threading.Lock()

    def note(what: str, value: Any) -> None:
        with lock:
            history.append((what, value))

    real_write, real_fsync, real_fstat = os.write, os.fsync, os.fstat

    def write(fd: int, data: Any) -> int:
        note("write", fd)
        return real_write(fd, data)

    def fsync(fd: int) -> None:
        real_fsync(fd)
        note("durable", (fd, real_fstat(fd).st_size))  # what this sync covered

    sm.observe({"function_id": "session::on-message-added"}, lambda ev: note("event", ev["entry_id"]))
    for name in WATCHED:
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda *a, _n=name, _r=real, **k: (note(_n, a[:1]), _r(*a, **k))[1])
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fsync", fsync)
    answers = []
    for i in range(1, APPENDS + 1):
        answers.append(sm.call("session::append", {"session_id": sid, "message": message(i)})["entry_id"])
        note("answer", answers[-1])
    monkeypatch.undo()

    calls = {what for what, _ in history if what not in ("answer", "event", "durable")}
    assert calls <= {"write", "fstat", "lstat"} and "write" in calls
    # One check per append, of the lock file only: "is data_dir still mine" (issue 25), before the
    # answer: its link count on the held descriptor, or (at most every FULL_CHECK_SECONDS) its path.
    lock_file = os.path.join(os.fspath(tmp_path / "d"), ".session-manager.lock")
    checks = [(what, v) for what, v in history if what in ("fstat", "lstat")]
    assert len(checks) == APPENDS
    assert {v for what, v in checks if what == "lstat"} <= {(lock_file,)}
    assert all(os.path.samestat(real_fstat(v[0]), os.stat(lock_file)) for what, v in checks if what == "fstat")
    syncs = [v for what, v in history if what == "durable"]
    fd = os.open(log, os.O_RDONLY)
    try:
        assert [v for what, v in history if what == "write"] == [syncs[0][0]] * APPENDS  # all to the log
        assert len(syncs) == APPENDS and {s[0] for s in syncs} == {syncs[0][0]}  # no directory, no sidecar
        assert os.path.samestat(os.fstat(syncs[0][0]), os.fstat(fd))
    finally:
        os.close(fd)
    # Each answer and each event comes after a sync covering its entry's line.
    assert_told_after_sync(log, [(what, v[1] if what == "durable" else v) for what, v in history])
    assert [v for what, v in history if what == "event"] == answers  # one each, none for another
    expected = [first, *answers]
    assert [m["entry_id"] for m in sm.call("session::messages", {"session_id": sid})["messages"]] == expected
    sm.close()
    again = session_manager.open(tmp_path / "d")
    assert [m["entry_id"] for m in again.call("session::messages", {"session_id": sid})["messages"]] == expected
    again.close()
