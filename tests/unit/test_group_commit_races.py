"""Group commit in fsync mode, against other callers: a write whose shared fsync fails is undone
outside the session's lock, so no other mutation may have built on it, copied it, or answered
from it as if it were stored."""

from __future__ import annotations

import errno
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.errors import PARENT_NOT_FOUND, STORAGE, SessionError


def message(i: int) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": f"m{i}"}], "timestamp": i}


class FailingSync:
    """``os.fsync`` of ``log`` blocks until ``release`` is set, then fails (EIO); other files sync."""

    def __init__(self, log: Path) -> None:
        self.log, self.real = log, os.fsync
        self.started, self.release = threading.Event(), threading.Event()

    def fsync(self, fd: int) -> None:
        if not os.path.samestat(os.fstat(fd), os.stat(self.log)):
            self.real(fd)
            return
        self.started.set()
        assert self.release.wait(10)
        raise OSError(errno.EIO, "Input/output error")


class Call(threading.Thread):
    """One embedded call on its own thread; ``outcome`` is the response or the SessionError's code."""

    def __init__(self, sm: session_manager.SessionManager, function_id: str, payload: dict[str, Any]) -> None:
        super().__init__()
        self.sm, self.function_id, self.payload = sm, function_id, payload
        self.outcome: Any = None

    def run(self) -> None:
        try:
            self.outcome = self.sm.call(self.function_id, self.payload)
        except SessionError as e:
            self.outcome = e.code


def signal_from(obj: Any, name: str, thread: Callable[[], threading.Thread | None],
                done: threading.Event, monkeypatch: pytest.MonkeyPatch) -> None:
    """``obj.name`` sets ``done`` once ``thread()`` has called it (the call's read is taken)."""
    real = getattr(obj, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        if threading.current_thread() is thread():
            done.set()
        return out

    monkeypatch.setattr(obj, name, wrapped)


def blocked_append(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[
        session_manager.SessionManager, str, str, FailingSync, Call]:
    """A session with one durable entry, and an append of ``e_x`` on top whose fsync is running."""
    sm = session_manager.open(tmp_path / "d", durability="fsync")
    sid = sm.call("session::create", {"title": "r"})["session_id"]
    kept = sm.call("session::append", {"session_id": sid, "message": message(0)})["entry_id"]
    disk = FailingSync(sm.service.store.file_path(sid))  # type: ignore[attr-defined]
    monkeypatch.setattr(os, "fsync", disk.fsync)
    first = Call(sm, "session::append", {"session_id": sid, "message": message(1), "entry_id": "e_x"})
    first.start()
    assert disk.started.wait(10)  # e_x written, the session's lock let go, its fsync running
    return sm, sid, kept, disk, first


def finish(disk: FailingSync, *calls: threading.Thread) -> None:
    disk.release.set()
    for t in calls:
        t.join(10)
        assert not t.is_alive()


def reopened_ids(tmp_path: Path, sid: str) -> list[str]:
    again = session_manager.open(tmp_path / "d")
    try:
        return [m["entry_id"] for m in again.call("session::messages", {"session_id": sid})["messages"]]
    finally:
        again.close()


def test_an_append_onto_a_parent_undone_after_its_check_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: an append naming parent e_x passing the parent check, e_x then undone (its shared fsync
    # failed), and the append stored anyway with a parent the session no longer holds.
    sm, sid, kept, disk, first = blocked_append(tmp_path, monkeypatch)
    store = sm.service.store
    checked, go = threading.Event(), threading.Event()
    real_commit = store.commit
    second = Call(sm, "session::append", {"session_id": sid, "message": message(2), "parent_id": "e_x"})

    def commit(session_id: str, c: Any) -> Any:
        if threading.current_thread() is second and not checked.is_set():
            checked.set()  # the parent was found; the write is next
            assert go.wait(10)
        return real_commit(session_id, c)

    monkeypatch.setattr(store, "commit", commit)
    second.start()
    assert checked.wait(10)
    finish(disk, first)  # e_x's fsync fails: undone
    assert first.outcome == STORAGE
    monkeypatch.setattr(os, "fsync", disk.real)
    go.set()
    second.join(10)
    assert not second.is_alive()
    assert second.outcome == PARENT_NOT_FOUND
    ids = [m["entry_id"] for m in sm.call("session::messages", {"session_id": sid})["messages"]]
    assert ids == [kept]
    sm.close()
    assert reopened_ids(tmp_path, sid) == [kept]


def test_a_fork_never_copies_an_entry_whose_fsync_then_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a fork answered (and durable) holding a copy of e_x while e_x's own writer is told its
    # write failed and e_x is undone in the source.
    sm, sid, kept, disk, first = blocked_append(tmp_path, monkeypatch)
    read = threading.Event()
    fork = Call(sm, "session::fork", {"session_id": sid, "entry_id": "e_x"})
    signal_from(sm.service.store, "path", lambda: fork, read, monkeypatch)
    fork.start()
    assert read.wait(10)  # the fork copied the path holding e_x
    finish(disk, first, fork)
    assert first.outcome == STORAGE
    assert fork.outcome == STORAGE  # it copied a write that did not hold
    listed = sm.call("session::list", {})["sessions"]
    assert [s["session_id"] for s in listed] == [sid]
    sm.close()
    assert reopened_ids(tmp_path, sid) == [kept]


def test_a_replayed_append_is_answered_only_once_the_original_is_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a retry with the same entry_id answered "stored" from the original's unsynced write,
    # which its failed fsync then undoes (the retry's caller was told e_x is stored; it is gone).
    sm, sid, kept, disk, first = blocked_append(tmp_path, monkeypatch)
    read = threading.Event()
    retry = Call(sm, "session::append", {"session_id": sid, "message": message(1), "entry_id": "e_x"})
    signal_from(sm.service.store, "entry_held", lambda: retry, read, monkeypatch)
    retry.start()
    assert read.wait(10)  # the retry found e_x
    finish(disk, first, retry)
    assert first.outcome == STORAGE and retry.outcome == STORAGE
    sm.close()
    assert reopened_ids(tmp_path, sid) == [kept]


def test_ensure_answers_for_a_created_session_only_once_its_creation_is_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: session::ensure answering "exists" from a creation whose fsync then fails (undone).
    sm = session_manager.open(tmp_path / "d", durability="fsync")
    sid = "s_ensured"
    disk = FailingSync(sm.service.store.file_path(sid))  # type: ignore[attr-defined]
    real = os.fsync
    log = str(sm.service.store.file_path(sid))  # type: ignore[attr-defined]

    def fsync(fd: int) -> None:
        if os.path.exists(log):
            disk.fsync(fd)
        else:
            real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    first = Call(sm, "session::ensure", {"title": "r", "session_id": sid})
    first.start()
    assert disk.started.wait(10)
    read = threading.Event()
    again = Call(sm, "session::ensure", {"title": "r", "session_id": sid})
    signal_from(sm.service.store, "get_meta", lambda: again, read, monkeypatch)
    again.start()
    assert read.wait(10)
    finish(disk, first, again)
    assert first.outcome == STORAGE
    assert again.outcome == STORAGE
    sm.close()
    reopened = session_manager.open(tmp_path / "d")
    assert reopened.call("session::list", {})["sessions"] == []
    reopened.close()


class HookedLock:
    """The store-wide lock, running ``hook`` once before the first acquisition made from ``frame``."""

    def __init__(self, real: Any, frame: str, hook: Callable[[], None]) -> None:
        self.real, self.frame, self.hook, self.hooked = real, frame, hook, False

    def __enter__(self) -> bool:
        self._maybe_hook()
        return bool(self.real.__enter__())

    def __exit__(self, *exc: Any) -> None:
        self.real.__exit__(*exc)

    def acquire(self, *args: Any) -> bool:
        self._maybe_hook()
        return bool(self.real.acquire(*args))

    def release(self) -> None:
        self.real.release()

    def _maybe_hook(self) -> None:
        if not self.hooked and sys._getframe(2).f_code.co_name == self.frame:
            self.hooked = True
            self.hook()


def test_the_catalog_corrected_after_an_undo_never_overwrites_a_newer_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the catalog correction after an undo reading the log's meta, another append committing
    # (and cataloguing its newer meta) meanwhile, then the correction writing the older meta over it:
    # session::list showing a stale message_count until the session's next write.
    sm = session_manager.open(tmp_path / "d", durability="fsync")
    sid = sm.call("session::create", {"title": "r"})["session_id"]
    sm.call("session::append", {"session_id": sid, "message": message(0)})
    sm.call("session::list", {})  # the catalog is built
    store: Any = sm.service.store
    real = os.fsync
    failures = [1]

    def fsync(fd: int) -> None:
        if failures and os.path.samestat(os.fstat(fd), os.stat(store.file_path(sid))):
            failures.pop()
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    later = Call(sm, "session::append", {"session_id": sid, "message": message(2)})

    def append_meanwhile() -> None:
        # The later append runs to its end, unless the correction holds the session's lock (the fix):
        # then it waits, and the bounded join lets the correction go first.
        later.start()
        later.join(2)

    monkeypatch.setattr(store, "_lock", HookedLock(store._lock, "_recatalog", append_meanwhile))
    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(SessionError):
        sm.call("session::append", {"session_id": sid, "message": message(1)})
    later.join(10)
    assert isinstance(later.outcome, dict)  # the later append was stored
    assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 2
    listed = {s["session_id"]: s["message_count"] for s in sm.call("session::list", {})["sessions"]}
    assert listed[sid] == 2
    sm.close()


def test_a_session_reloaded_while_its_evicted_write_is_undone_never_keeps_the_undone_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the undo finding the session evicted from memory (so holding no lock of it), a reader
    # replaying the log meanwhile (e_x still in it) and caching that state after the truncation: e_x
    # shown for good, and the next append chained onto it (an orphan on disk).
    sm, sid, kept, disk, first = blocked_append(tmp_path, monkeypatch)
    store: Any = sm.service.store
    budget = store.cache_bytes
    store.cache_bytes = 0  # the session leaves memory while its write awaits the fsync
    real_truncate = os.ftruncate
    reader = Call(sm, "session::messages", {"session_id": sid})

    def ftruncate(fd: int, length: int) -> None:
        if sys._getframe(1).f_code.co_name == "_undo_unsynced" and not reader.is_alive() and reader.outcome is None:
            store.cache_bytes = budget
            reader.start()
            reader.join(2)  # (the fix makes it wait for the undo: bounded, then the undo goes on)
        real_truncate(fd, length)

    monkeypatch.setattr(os, "ftruncate", ftruncate)
    finish(disk, first)
    reader.join(10)
    assert first.outcome == STORAGE
    monkeypatch.setattr(os, "fsync", disk.real)
    ids = [m["entry_id"] for m in sm.call("session::messages", {"session_id": sid})["messages"]]
    assert ids == [kept]
    later = sm.call("session::append", {"session_id": sid, "message": message(2)})
    assert later["parent_id"] == kept
    sm.close()
    assert reopened_ids(tmp_path, sid) == [kept, later["entry_id"]]
