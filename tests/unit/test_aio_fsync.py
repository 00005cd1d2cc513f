"""The fsync started at write time and reaped later (``store/_aio_fsync.py``): the kernel's
asynchronous fsync where it exists, the caller's own ``os.fsync`` wherever it does not, and
never a write reported durable that an fsync did not cover."""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.store import _aio_fsync
from session_manager.store._fds import GroupSync


def kernel() -> _aio_fsync.KernelBackend:
    backend = _aio_fsync._kernel()
    if not isinstance(backend, _aio_fsync.KernelBackend):
        pytest.skip("no Linux AIO on this system or architecture: every caller syncs itself")
    return backend


def probe(backend: _aio_fsync.KernelBackend, path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        op = backend.start(fd)
        if op is None:
            pytest.skip("this kernel or sandbox refuses an asynchronous fsync here")
        op.result()
    finally:
        os.close(fd)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[_aio_fsync.KernelBackend]:
    b = kernel()
    probe(b, tmp_path / "probe")
    yield b


def test_a_started_fsync_completes_and_its_context_is_reused(backend: _aio_fsync.KernelBackend,
                                                             tmp_path: Path) -> None:
    # Prevents: a context leaked per sync (the kernel's AIO contexts run out, then every sync falls
    # back) and a write changed by being synced this way.
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for i in range(50):
            os.write(fd, f"{i}\n".encode())
            op = backend.start(fd)
            assert op is not None
            op.result()
    finally:
        os.close(fd)
    assert backend._made == 1 and len(backend._idle) == 1
    assert (tmp_path / "log").read_bytes() == b"".join(f"{i}\n".encode() for i in range(50))


def test_syncs_in_flight_at_once_each_get_their_own_result(backend: _aio_fsync.KernelBackend,
                                                           tmp_path: Path) -> None:
    # Prevents: one thread reaping another's completion (a context shared by two syncs), which
    # would answer a writer before its own fsync finished.
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def writer(i: int) -> None:
        fd = os.open(tmp_path / f"{i}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            barrier.wait(5)
            for _ in range(30):
                os.write(fd, b"x\n")
                op = backend.start(fd)
                assert op is not None
                op.result()
        except BaseException as e:
            errors.append(e)
        finally:
            os.close(fd)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert 1 <= backend._made <= 8 and len(backend._idle) == backend._made


def test_a_replaced_os_fsync_is_honoured(backend: _aio_fsync.KernelBackend, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the kernel path bypassing an os.fsync a test or a tool installed (fault injection
    # would then test nothing).
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    assert backend.start(0) is None


def test_past_the_context_limit_callers_sync_themselves(backend: _aio_fsync.KernelBackend, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: unbounded AIO contexts (a system-wide resource) under many concurrent writers.
    monkeypatch.setattr(_aio_fsync, "MAX_CONTEXTS", 2)
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        first, second = backend.start(fd), backend.start(fd)
        assert first is not None and second is not None
        assert backend.start(fd) is None
        first.result()
        third = backend.start(fd)  # the reaped context is free again
        assert third is not None
        second.result()
        third.result()
    finally:
        os.close(fd)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_makes_its_own_contexts(backend: _aio_fsync.KernelBackend, tmp_path: Path) -> None:
    # Prevents: a child reusing its parent's AIO contexts (they belong to the parent's address
    # space: the child's reaping would fail or hang).
    assert backend._made == 1
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery from here on, only an exit status
        code = 1
        try:
            fd = os.open(tmp_path / "child", os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, b"child\n")
            op = backend.start(fd)
            if op is not None:
                op.result()
                code = 0 if backend._pid == os.getpid() and backend._made == 1 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (tmp_path / "child").read_bytes() == b"child\n"


class FakeKernel:
    """``libc.syscall`` for io_setup/io_submit/io_getevents (x86_64 numbers), scripted."""

    def __init__(self, *, submit: int = 1, submit_errno: int = 0, events: list[tuple[int, int]] | None = None) -> None:
        self.submit, self.submit_errno = submit, submit_errno
        self.events = events or [(1, 0)]  # each getevents call: (return value, res or errno)
        self.calls: list[str] = []
        self.syscall = lambda *args: self._syscall(*args)  # (a function: the backend sets its restype)

    def _syscall(self, number: Any, *args: Any) -> int:
        nr = number.value
        if nr == 206:  # io_setup(nr_events, &ctx)
            args[1]._obj.value = 77
            self.calls.append("setup")
            return 0
        if nr == 209:  # io_submit(ctx, 1, iocbs)
            self.calls.append("submit")
            ctypes.set_errno(self.submit_errno)
            return self.submit
        assert nr == 208  # io_getevents(ctx, 1, 1, events, NULL)
        got, value = self.events.pop(0)
        self.calls.append("getevents")
        if got == 1:
            args[3][0].res = value
        else:
            ctypes.set_errno(value)
        return got


def fake(kernel: FakeKernel) -> _aio_fsync.KernelBackend:
    return _aio_fsync.KernelBackend(kernel, (206, 209, 208))  # type: ignore[arg-type]


def test_a_failed_kernel_fsync_raises_its_errno_and_frees_the_context() -> None:
    # Prevents: an EIO from the asynchronous fsync reported as success (a writer answered for bytes
    # the disk may have dropped).
    k = FakeKernel(events=[(1, -errno.EIO)])
    backend = fake(k)
    op = backend.start(5)
    assert op is not None
    with pytest.raises(OSError) as failed:
        op.result()
    assert failed.value.errno == errno.EIO
    assert len(backend._idle) == 1 and k.calls == ["setup", "submit", "getevents"]


def test_an_interrupted_wait_is_retried() -> None:
    # Prevents: a signal during the wait treated as a finished sync.
    k = FakeKernel(events=[(-1, errno.EINTR), (1, 0)])
    op = fake(k).start(5)
    assert op is not None
    op.result()
    assert k.calls == ["setup", "submit", "getevents", "getevents"]


def test_a_wait_that_cannot_be_made_falls_back_to_os_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a broken context (EINVAL, e.g. after a fork) answering without any sync at all.
    k = FakeKernel(events=[(-1, errno.EINVAL)])
    backend = fake(k)
    op = backend.start(5)
    assert op is not None
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    op.result()
    assert synced == [5] and backend._idle == []  # the broken context is never reused


def test_a_file_system_without_asynchronous_fsync_turns_it_off() -> None:
    # Prevents: a submit that the kernel refuses (EINVAL) leaving a writer with no sync, or being
    # retried on every write.
    k = FakeKernel(submit=-1, submit_errno=errno.EINVAL)
    backend = fake(k)
    assert backend.start(5) is None
    assert backend.disabled and backend.start(5) is None
    assert k.calls == ["setup", "submit"]


def test_group_sync_reaps_a_started_sync_and_runs_the_next_for_later_writes(tmp_path: Path) -> None:
    # Prevents: a write made after a sync started counted as covered by it, and a started sync
    # never reaped (its writers waiting forever).
    path = tmp_path / "log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    started: list[int] = []

    class Recording:
        def start(self, fd: int) -> _aio_fsync.Pending | None:
            op = _aio_fsync.ThreadBackend().start(fd)
            started.append(fd)
            return op

    try:
        with _aio_fsync.use(Recording()):
            sync = GroupSync()
            os.write(fd, b"a\n")
            first = sync.written(0, 2)
            sync.start(fd)
            os.write(fd, b"b\n")
            second = sync.written(2, 4)
            sync.start(fd)  # one is in flight: not a second one
            assert started == [fd]
            sync.wait(fd, first)
            assert sync.pending and sync.durable_end == 2  # the started sync covered only "a"
            sync.wait(fd, second)  # no sync in flight: this waiter runs one
            assert not sync.pending and sync.durable_end == 4
            sync.start(fd)  # nothing left to cover: nothing started
            assert started == [fd]
    finally:
        os.close(fd)


def test_fsync_mode_appends_start_their_sync_at_write_and_answer_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the background sync left unwired (every append syncing after the commit's CPU),
    # and an answer returned before the sync it started was reaped.
    log: list[str] = []

    class Recording:
        def start(self, fd: int) -> _aio_fsync.Pending | None:
            inner = _aio_fsync.ThreadBackend().start(fd)
            assert inner is not None
            log.append("start")

            class Reaped:
                def result(self) -> None:
                    inner.result()
                    log.append("reaped")

            return Reaped()

    sm = session_manager.open(tmp_path / "d", durability="fsync")
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    seen: list[str] = []

    def added(event: dict[str, Any]) -> None:
        seen.append(event["entry_id"])
        log.append("event")

    sm.observe({"function_id": "session::on-message-added"}, added)
    with _aio_fsync.use(Recording()):
        for i in range(5):
            before = len(log)
            out = sm.call("session::append", {"session_id": sid,
                                               "message": {"role": "user", "timestamp": i,
                                                           "content": [{"type": "text", "text": "hi"}]}})
            # Reaped before the event left and before the answer came back.
            assert log[before:] == ["start", "reaped", "event"]
            assert seen[-1] == out["entry_id"]
    sm.close()
    again = session_manager.open(tmp_path / "d")
    assert again.call("session::get", {"session_id": sid})["meta"]["message_count"] == 5
    again.close()
