"""An answer given in fsync mode never rests on bytes that neither an fsync of their file nor an
``os.sync`` covered after they were written: not those of a write that read "flush" as the
durability switched (its descriptor is marked and synced before such an answer), not those a
flush-mode owner left before a restart in fsync mode (synced at the open)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.store import FsStore

MSG = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}


class Syncs:
    """Records, in order, every ``os.fsync`` (with the path of the file synced), every
    ``os.sync``, and marks the test puts in between."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, str]] = []
        self.guard = threading.Lock()
        real_fsync, real_sync = os.fsync, os.sync

        def fsync(fd: int) -> None:
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = f"fd {fd}"
            real_fsync(fd)
            self.note("fsync", target)

        def sync() -> None:
            real_sync()
            self.note("sync", "")

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "sync", sync)

    def note(self, kind: str, what: str) -> None:
        with self.guard:
            self.events.append((kind, what))

    def mark(self, what: str) -> None:
        self.note("mark", what)

    def covered_after(self, mark: str, path: str) -> bool:
        """Whether an fsync of ``path`` or an ``os.sync`` ran after ``mark``."""
        with self.guard:
            events = list(self.events)
        after = events[events.index(("mark", mark)) + 1:]
        real = os.path.realpath(path)
        return any(kind == "sync" or (kind == "fsync" and os.path.realpath(what) == real) for kind, what in after)


def _fs_session(sm: session_manager.SessionManager) -> tuple[FsStore, str]:
    """The fs store under ``sm`` and a new session's id."""
    store = sm.service.store
    assert isinstance(store, FsStore)
    return store, sm.call("session::create", {})["session_id"]


def _log_of(store: FsStore, sid: str) -> str:
    return os.fspath(store._files.log_path(sid))


def test_a_flush_write_in_flight_across_the_switch_is_synced_before_an_fsync_mode_replay_is_answered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: an append that read "flush" and wrote after the switch's os.sync (answered as
    # flush: fine), then an fsync-mode idempotent replay of its entry answered "already there"
    # although nothing synced those bytes (they took no fsync ticket).
    syncs = Syncs(monkeypatch)
    with session_manager.open(tmp_path / "d") as sm:
        store, sid = _fs_session(sm)

        entered, go = threading.Event(), threading.Event()
        writer: list[threading.Thread] = []
        real_acquire = store._fds.acquire

        def acquire(path: str, *, create: bool = True) -> Any:
            if writer and threading.current_thread() is writer[0] and not go.is_set():
                entered.set()  # past _append's read of _durability, before its write
                assert go.wait(30)
            return real_acquire(path, create=create)

        monkeypatch.setattr(store._fds, "acquire", acquire)
        answers: list[dict[str, Any]] = []
        errors: list[BaseException] = []

        def append() -> None:
            try:
                answers.append(sm.call("session::append", {"session_id": sid, "entry_id": "e_caller", "message": MSG}))
            except BaseException as e:  # (reported below)
                errors.append(e)

        t = threading.Thread(target=append)
        writer.append(t)
        t.start()
        assert entered.wait(30)
        switch = threading.Thread(target=setattr, args=(store, "durability", "fsync"))  # the reload's thread
        switch.start()
        switch.join()
        assert store.durability == "fsync" and ("sync", "") in syncs.events  # the switch's os.sync ran
        go.set()
        t.join()
        assert not errors and answers, errors
        syncs.mark("A answered (flush mode)")

        replay = sm.call("session::append", {"session_id": sid, "entry_id": "e_caller", "message": MSG})
        assert replay == answers[0]  # "already there", answered in fsync mode
        assert syncs.covered_after("A answered (flush mode)", _log_of(store, sid)), (
            "an fsync-mode replay was answered on bytes written after the switch's os.sync that no "
            f"fsync ever covered: {syncs.events}")


def test_a_restart_in_fsync_mode_syncs_what_the_flush_mode_owner_acknowledged_before_a_replay_is_answered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a restart with fsync (the usual way to change durability) answering a replay
    # "already there" on the flush-mode owner's page-cache bytes a power cut takes.
    where = tmp_path / "d"
    with session_manager.open(where) as sm:
        sid = sm.call("session::create", {})["session_id"]
        first = sm.call("session::append", {"session_id": sid, "entry_id": "e_caller", "message": MSG})
    syncs = Syncs(monkeypatch)
    syncs.mark("flush-mode owner closed")
    with session_manager.open(where, durability="fsync") as sm:
        store = sm.service.store
        assert isinstance(store, FsStore) and store.durability == "fsync"
        replay = sm.call("session::append", {"session_id": sid, "entry_id": "e_caller", "message": MSG})
        assert replay == first
        assert syncs.covered_after("flush-mode owner closed", _log_of(store, sid)), (
            f"an fsync-mode replay was answered on flush-mode bytes nothing ever synced: {syncs.events}")


def test_a_descriptor_with_flush_mode_bytes_is_synced_before_it_closes_in_fsync_mode(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the marked descriptor evicted (or closed) after the switch without a sync, so a
    # later answer could no longer find the bytes that still owe one.
    syncs = Syncs(monkeypatch)
    with session_manager.open(tmp_path / "d") as sm:
        store, sid = _fs_session(sm)
        sm.call("session::append", {"session_id": sid, "message": MSG})
        path = _log_of(store, sid)
        slot = store._fds.acquire_cached(path)
        assert slot is not None
        store._fds.release(path, slot)
        store.durability = "fsync"
        slot.flushed = True  # (as a write that read "flush" just before the switch leaves it)
        syncs.mark("switched")
        store._fds.close_all()
        assert syncs.covered_after("switched", path) and not slot.flushed
