"""Two fsync-mode writers of different sessions (real threads) after a hot switch from flush:
while one's directory sync (owed for the names flush mode changed) is in flight, the other must
not trust the flag and answer before a directory sync succeeded; if the in-flight one fails,
the other syncs itself."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

from session_manager.errors import StoreError
from session_manager.store import Commit, FsStore
from session_manager.store.fs._fileops import Ops, StrPath
from session_manager.testing.contract import message, meta


class GatedDirSync(Ops):
    """Real os calls. Each directory sync of data_dir (its read-only open) is recorded in
    ``events``; when ``gate`` is armed, the next one blocks until ``release`` is set and then
    fails with EIO (as a directory fsync on a flaky disk may)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = os.fspath(data_dir)
        self.events: list[str] = []
        self.guard = threading.Lock()
        self.gate = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def note(self, what: str) -> None:
        with self.guard:
            self.events.append(what)

    def open(self, path: StrPath, flags: int, mode: int = 0o644) -> int:
        if os.fspath(path) == self.data_dir and not flags & (os.O_WRONLY | os.O_RDWR):
            with self.guard:
                gated, self.gate = self.gate, False
            if gated:
                self.entered.set()
                assert self.release.wait(30)
                self.note("dir-sync-failed")
                raise OSError(errno.EIO, "Input/output error")
            fd = super().open(path, flags, mode)
            self.note("dir-sync")  # (the fsync itself follows at once, in the caller)
            return fd
        return super().open(path, flags, mode)


def _create(store: FsStore, sid: str) -> None:
    store.commit(sid, Commit(meta=meta(sid)))


def _append(sid: str, n: int) -> Commit:
    return Commit(entries=(message(f"e_{n}", None),), leaf=f"e_{n}", meta=meta(sid, message_count=n))


def test_a_writer_racing_an_in_flight_directory_sync_waits_for_a_successful_one(tmp_path: Path) -> None:
    # Prevents: the flag cleared before the sync ran, so the second writer skipped it and was
    # answered as durable with its log's name never synced (the first sync then failed).
    where = tmp_path / "d"
    ops = GatedDirSync(where)
    store = FsStore(where, "flush", ops=ops)
    try:
        _create(store, "s_x")
        _create(store, "s_y")  # both logs created in flush mode: their names are not synced
        assert store._names_unsynced and ops.events == []
        store.durability = "fsync"  # hot switch
        ops.gate = True

        x_error: list[BaseException] = []

        def write_x() -> None:
            try:
                store.commit("s_x", _append("s_x", 1))
            except StoreError as e:
                x_error.append(e)

        def write_y() -> None:
            store.commit("s_y", _append("s_y", 1))
            ops.note("y-acknowledged")

        tx = threading.Thread(target=write_x)
        tx.start()
        assert ops.entered.wait(30)  # X's directory sync is in flight
        ty = threading.Thread(target=write_y)
        ty.start()
        ty.join(0.5)  # (no time is asserted: Y may only be answered after a sync that succeeded)
        ops.release.set()
        tx.join()
        ty.join()
        assert x_error, "X's commit should have been refused (its directory sync failed)"

        events = list(ops.events)
        acked = events.index("y-acknowledged")
        # Y's log was created (flush mode) before any directory sync: Y's fsync-mode commit may
        # only be answered once a directory sync *succeeded* after that creation.
        assert "dir-sync" in events[:acked], (
            f"s_y's commit was acknowledged in fsync mode with its log's name never synced: {events}")
        # Y's entry is there, X's refused one nowhere (in memory, and after a reopen below).
        assert store.get_entry("s_y", "e_1") is not None and store.get_entry("s_x", "e_1") is None
    finally:
        ops.release.set()
        store.close()
    again = FsStore(where)
    try:
        assert again.get_entry("s_y", "e_1") is not None and again.get_entry("s_x", "e_1") is None
    finally:
        again.close()
