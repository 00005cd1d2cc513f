"""fsync mode, the first write of a new log: the directory is synced so the
log's name survives power loss. When that sync fails the caller hears
session/storage, so nothing of the mutation may be there after a restart."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

import session_manager
from session_manager.errors import SessionError
from session_manager.ids import UuidIds

MESSAGE = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 0}


def failing_dir_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


class Recorded(UuidIds):
    """Production ids, each session id handed out remembered."""

    def __init__(self) -> None:
        self.sessions: list[str] = []

    def session_id(self) -> str:
        self.sessions.append(super().session_id())
        return self.sessions[-1]


def test_a_fork_whose_log_name_could_not_be_synced_is_not_there_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prevents: the new log's lines written before its directory fsync, and left in place when that
    # failed: the fork answered session/storage, yet after a restart the forked session was there.
    ids = Recorded()
    with session_manager.open(tmp_path, durability="fsync", ids=ids) as sm:
        sid = sm.call("session::create", {"title": "source"})["session_id"]
        leaf = sm.call("session::append", {"session_id": sid, "message": MESSAGE})["entry_id"]
        with monkeypatch.context() as m:
            failing_dir_fsync(m)
            with pytest.raises(SessionError) as failed:
                sm.call("session::fork", {"session_id": sid, "entry_id": leaf})
            assert failed.value.code == "session/storage"
        lost = ids.sessions[-1]
        assert sm.call("session::get", {"session_id": lost}) is None
        # The next new log syncs its name again: it is answered, and there after a restart.
        forked = sm.call("session::fork", {"session_id": sid, "entry_id": leaf})["session_id"]
    with session_manager.open(tmp_path) as sm:
        assert sm.call("session::get", {"session_id": lost}) is None
        assert sorted(s["session_id"] for s in sm.call("session::list", {})["sessions"]) == sorted([sid, forked])
        assert len(sm.call("session::messages", {"session_id": forked})["messages"]) == 1


def test_a_create_whose_log_name_could_not_be_synced_is_not_there_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prevents: the same for session::create (any first write of a log).
    with session_manager.open(tmp_path, durability="fsync") as sm:
        with monkeypatch.context() as m:
            failing_dir_fsync(m)
            with pytest.raises(SessionError) as failed:
                sm.call("session::ensure", {"session_id": "s_1", "title": "first"})
            assert failed.value.code == "session/storage"
        assert sm.call("session::get", {"session_id": "s_1"}) is None
        assert sm.call("session::ensure", {"session_id": "s_1", "title": "second"})["created"] is True
    with session_manager.open(tmp_path) as sm:
        got = sm.call("session::get", {"session_id": "s_1"})
        assert got is not None and got["meta"]["title"] == "second"
