"""The descriptor LRU and the shared fsync, with real files and real threads."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import session_manager
from session_manager._wire.events import ON_MESSAGE_ADDED
from session_manager.store import Commit, FsStore
from session_manager.store.fs import _descriptors
from session_manager.store.fs._descriptors import FdCache, GroupSync
from session_manager.testing.contract import message, meta


def test_descriptors_are_reused_and_bounded(tmp_path: Path) -> None:
    # Prevents: an open/close per write, or descriptors growing with every session touched.
    cache = FdCache(capacity=3)
    paths = [str(tmp_path / f"{i}.jsonl") for i in range(10)]
    with cache.use(paths[0]) as (fd0, created, _):
        os.write(fd0, b"a\n")
        assert created
    with cache.use(paths[0]) as (again, created, _):
        os.write(again, b"b\n")
        assert again == fd0 and not created
    for p in paths:
        with cache.use(p) as (fd, _, _):
            os.write(fd, b"x\n")
    assert len(cache) == 3
    assert Path(paths[0]).read_bytes() == b"a\nb\nx\n"
    assert all(Path(p).read_bytes() == b"x\n" for p in paths[1:])
    cache.close_all()
    assert len(cache) == 0


def test_a_pinned_descriptor_is_never_closed_under_its_user(tmp_path: Path) -> None:
    # Prevents: eviction closing (and the OS reusing) a descriptor another thread is writing to.
    cache = FdCache(capacity=1)
    first = str(tmp_path / "a.jsonl")
    with cache.use(first) as (fd, _, _):
        for i in range(5):
            with cache.use(str(tmp_path / f"{i}.jsonl")):
                pass
        os.write(fd, b"still mine\n")
    assert Path(first).read_bytes() == b"still mine\n"
    assert len(cache) <= 1


def test_forget_before_a_rename_sends_later_writes_to_the_new_file(tmp_path: Path) -> None:
    # Prevents: a cached descriptor writing into a log that compaction or delete replaced.
    cache = FdCache()
    path = str(tmp_path / "s.jsonl")
    with cache.use(path) as (fd, _, _):
        os.write(fd, b"old\n")
    Path(path + ".tmp").write_bytes(b"new\n")
    cache.forget(path)
    os.replace(path + ".tmp", path)
    with cache.use(path) as (fd, created, _):
        os.write(fd, b"more\n")
        assert not created
    assert Path(path).read_bytes() == b"new\nmore\n"


def test_no_create_does_not_create(tmp_path: Path) -> None:
    # Prevents: a read of an unknown session leaving an empty log behind.
    with pytest.raises(FileNotFoundError), FdCache().use(str(tmp_path / "none.jsonl"), create=False):
        pass
    assert list(tmp_path.iterdir()) == []


def test_waiting_writers_share_fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: one fsync per append when several appends are waiting on one file (or a writer
    # acknowledged before an fsync that started after its write).
    calls: list[int] = []
    started = threading.Event()
    release = threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        calls.append(fd)
        started.set()
        release.wait(5)
        real_fsync(fd)

    monkeypatch.setattr(_descriptors.os, "fsync", slow_fsync)
    path = tmp_path / "s.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sync = GroupSync()
    done: list[int] = []
    tickets = threading.Semaphore(0)

    def writer(i: int) -> None:
        os.write(fd, f"{i}\n".encode())
        ticket = sync.written()
        tickets.release()
        sync.wait(fd, ticket)
        done.append(i)

    first = threading.Thread(target=writer, args=(0,))
    first.start()
    assert started.wait(5)
    rest = [threading.Thread(target=writer, args=(i,)) for i in range(1, 8)]
    for t in rest:
        t.start()
    for _ in range(8):
        assert tickets.acquire(timeout=5)  # every write made while the first sync runs
    release.set()
    for t in [first, *rest]:
        t.join(10)
    os.close(fd)
    assert sorted(done) == list(range(8))
    # The first sync covers writer 0; the seven that wrote while it ran share the second.
    assert len(calls) == 2
    assert sorted(path.read_bytes().split()) == sorted(str(i).encode() for i in range(8))


def test_a_failed_fsync_fails_every_writer_not_yet_durable_for_good(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a writer acknowledged when the fsync meant to cover its bytes failed -- including by a
    # later fsync that succeeds (the kernel may have dropped the failed pages: that success proves nothing).
    synced: list[int] = []
    monkeypatch.setattr(_descriptors.os, "fsync", synced.append)
    sync = GroupSync()
    fd = os.open(tmp_path / "s", os.O_WRONLY | os.O_CREAT, 0o644)
    first = sync.written(0, 10)
    sync.wait(fd, first)
    assert (sync.durable_end, sync.pending) == (10, False)

    def failing(fd: int) -> None:
        raise OSError(5, "EIO")

    monkeypatch.setattr(_descriptors.os, "fsync", failing)
    ticket = sync.written(10, 25)
    with pytest.raises(OSError):
        sync.wait(fd, ticket)
    with pytest.raises(OSError):
        sync.wait(fd, ticket)  # still not durable: a retry must not report success
    monkeypatch.setattr(_descriptors.os, "fsync", synced.append)
    later = sync.written(25, 40)
    with pytest.raises(OSError):
        sync.wait(fd, later)  # nor a later write's sync: this file's unsynced tail is to be undone
    sync.wait(fd, first)  # what was durable stays so
    assert sync.failed and sync.pending and sync.durable_end == 10  # the owner truncates back to here
    assert len(synced) == 1
    os.close(fd)


def test_an_fsync_interrupted_by_a_signal_leaves_the_next_waiter_free_to_sync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a KeyboardInterrupt (or any signal handler's exception) raised in the thread running
    # the shared fsync leaving "a sync is running" set, so every later writer to the file waits forever.
    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    sync = GroupSync()
    fd = os.open(tmp_path / "s", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        first = sync.written(0, 10)
        monkeypatch.setattr(_descriptors.os, "fsync", interrupted)
        with pytest.raises(KeyboardInterrupt):
            sync.wait(fd, first)
        assert sync.pending and sync.durable_end == 0 and not sync.failed  # no verdict either way
        synced: list[int] = []
        monkeypatch.setattr(_descriptors.os, "fsync", synced.append)
        done = threading.Event()
        waiter = threading.Thread(target=lambda: (sync.wait(fd, first), done.set()))
        waiter.start()
        waiter.join(5)
        assert done.is_set() and synced == [fd]
        assert (sync.pending, sync.durable_end) == (False, 10)
    finally:
        os.close(fd)


class FailingClose:
    """``os.close`` as the fd module calls it, failing (EIO, as NFS may report a lost write)
    for the descriptors in ``doomed``: the descriptor is released all the same, as Linux does."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.doomed: set[int] = set()
        self.failed: list[int] = []
        real = os.close

        def close(fd: int) -> None:
            real(fd)
            if fd in self.doomed:
                self.doomed.discard(fd)  # (once: the number is free for the next open)
                self.failed.append(fd)
                raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "close", close)


def test_a_failed_close_of_an_evicted_descriptor_never_fails_another_logs_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: an append to one session failing because closing another session's idle
    # descriptor (evicted to make room) raised, and the new slot staying pinned for good
    # (never closed, never evicted: a descriptor leak per failure).
    closing = FailingClose(monkeypatch)
    cache = FdCache(capacity=1)
    first, second = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    with cache.use(first) as (fd_a, _, _):
        os.write(fd_a, b"a\n")
    closing.doomed.add(fd_a)
    slot, created = cache.acquire(second)  # evicts first: its close fails
    assert created and closing.failed == [fd_a]
    os.write(slot.fd, b"b\n")
    cache.release(second, slot)
    assert slot.pins == 0 and len(cache) == 1
    with cache.use(first) as (fd, created, _):  # a fresh descriptor of the first log
        assert not created
        os.write(fd, b"a2\n")
    cache.close_all()
    assert len(cache) == 0
    assert Path(first).read_bytes() == b"a\na2\n" and Path(second).read_bytes() == b"b\n"


def test_a_failed_close_on_forget_or_close_all_is_not_raised(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a delete or a compaction (forget) or the store's close (close_all) failing half
    # way because one descriptor's close reported an error after releasing it.
    closing = FailingClose(monkeypatch)
    cache = FdCache()
    paths = [str(tmp_path / f"{i}.jsonl") for i in range(3)]
    fds = []
    for p in paths:
        with cache.use(p) as (fd, _, _):
            fds.append(fd)
    closing.doomed.update(fds)
    cache.forget(paths[0])
    cache.close_all()
    assert sorted(closing.failed) == sorted(fds) and len(cache) == 0


def test_an_append_succeeds_when_closing_another_sessions_evicted_log_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: session::append on one session answering session/storage (and its message
    # missing, or written but reported failed) because the store evicted another session's
    # idle descriptor to make room and that close reported an error.
    closing = FailingClose(monkeypatch)
    where = tmp_path / "d"
    added: list[str] = []
    with session_manager.open(where) as sm:
        store = sm.service.store
        assert isinstance(store, FsStore)
        store._fds.capacity = 1
        sm.observe({"function_id": ON_MESSAGE_ADDED}, lambda e: added.append(e["entry_id"]))
        a, b = (sm.call("session::create", {})["session_id"] for _ in range(2))
        msg = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}
        first = sm.call("session::append", {"session_id": a, "message": msg})
        closing.doomed.update(slot.fd for slot in store._fds._slots.values())
        second = sm.call("session::append", {"session_id": b, "message": msg})
        assert closing.failed and added == [first["entry_id"], second["entry_id"]]
    with session_manager.open(where) as again:
        for sid, got in ((a, first), (b, second)):
            page = again.call("session::messages", {"session_id": sid})
            assert [m["entry_id"] for m in page["messages"]] == [got["entry_id"]]


def test_an_append_never_closes_its_own_descriptor_before_it_is_answered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the append's own release closing the descriptor it just wrote through (the cache
    # over capacity while other logs are pinned), where a close error (NFS reports a lost
    # write-back at close) would concern its own bytes yet be logged and the commit answered.
    # Older idle descriptors make room instead; this one closes later, idle, like any other.
    where = tmp_path / "d"
    store = FsStore(where, "flush")
    try:
        store.commit("s_a", Commit(meta=meta("s_a")))
        store.commit("s_b", Commit(meta=meta("s_b")))
        store._fds.capacity = 1
        store._fds.close_all()
        # A concurrent writer on another session holds its log's descriptor pinned.
        other = store._files.log_path("s_a")
        held, _ = store._fds.acquire(other, create=False)
        target = os.path.realpath(store._files.log_path("s_b"))
        failed: list[int] = []
        real = os.close

        def close(fd: int) -> None:
            try:
                name = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                name = ""
            real(fd)
            if name == target:
                failed.append(fd)
                raise OSError(5, "Input/output error")  # NFS: write-back of s_b's bytes failed

        monkeypatch.setattr(os, "close", close)
        try:
            # s_b's slot is the second one pinned (capacity 1): its release must leave it open.
            store.commit("s_b", Commit(entries=(message("e_1", None),), leaf="e_1",
                                       meta=meta("s_b", message_count=1)))
            assert failed == [] and len(store._fds) == 2  # over capacity for now, s_b still open
            store._fds.release(other, held)  # s_a idle again: the oldest idle one (s_b) goes
            assert len(failed) == 1 and len(store._fds) == 1
        finally:
            monkeypatch.setattr(os, "close", real)
    finally:
        store.close()
    again = FsStore(where)
    try:
        assert again.get_entry("s_b", "e_1") == message("e_1", None) and again.get_leaf("s_b") == "e_1"
    finally:
        again.close()
