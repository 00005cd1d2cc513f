"""An fsync started now and waited for later, so a writer's remaining CPU runs while the disk syncs.

In fsync mode a writer that has just written its lines still has work to do
before it may wait (the in-memory update, the index, the catalog, letting go
of the session's lock). Started with :func:`start`, the sync runs meanwhile:
on Linux through the kernel's asynchronous I/O (an ``IOCB_CMD_FSYNC``,
which the kernel runs as ``fsync(2)`` on a worker of its own, with the
same error reporting), reaped by :meth:`Pending.result`.

:func:`start` returns ``None`` whenever that is not possible (another
system or architecture, no AIO in this kernel or sandbox, the contexts
used up, ``os.fsync`` replaced by a test or a tool): the caller then syncs
with ``os.fsync`` itself, as it always could. Nothing here decides
durability; it only moves where the wait happens.

:class:`ThreadBackend` is the test double: it runs ``os.fsync`` (whatever
it is then) on a thread, so the callers' reaping logic can be driven with
injected failures and delays. :func:`use` installs a backend.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import platform
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

log = logging.getLogger("session_manager.store.fs")

_REAL_FSYNC = os.fsync
_IOCB_CMD_FSYNC = 2
# How many syncs may be in flight at once (one context each); past that, callers sync themselves.
MAX_CONTEXTS = 64
# (io_setup, io_submit, io_getevents) per machine; the generic table (aarch64, riscv64) is shared.
_SYSCALLS = {"x86_64": (206, 209, 208), "amd64": (206, 209, 208),
             "aarch64": (0, 2, 4), "arm64": (0, 2, 4), "riscv64": (0, 2, 4)}


class Pending(Protocol):
    def result(self) -> None:
        """Block until the sync is done (the GIL released); ``OSError`` if it failed.
        Called exactly once."""


class Backend(Protocol):
    def start(self, fd: int) -> Pending | None: ...


class _Iocb(ctypes.Structure):
    # struct iocb (linux/aio_abi.h); aio_key/aio_rw_flags swap on big-endian, both zero here.
    _fields_ = [("data", ctypes.c_uint64), ("key", ctypes.c_uint32), ("rw_flags", ctypes.c_int32),
                ("opcode", ctypes.c_uint16), ("reqprio", ctypes.c_int16), ("fildes", ctypes.c_uint32),
                ("buf", ctypes.c_uint64), ("nbytes", ctypes.c_uint64), ("offset", ctypes.c_int64),
                ("reserved2", ctypes.c_uint64), ("flags", ctypes.c_uint32), ("resfd", ctypes.c_uint32)]


class _Event(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64), ("res", ctypes.c_int64),
                ("res2", ctypes.c_int64)]


class _Context:
    """One AIO context holding at most one sync: whoever reaps it gets that sync's result."""

    __slots__ = ("ctx", "event", "iocb", "iocbs")

    def __init__(self, ctx: int) -> None:
        self.ctx = ctypes.c_ulong(ctx)
        self.iocb = _Iocb()
        self.iocb.opcode = _IOCB_CMD_FSYNC
        self.iocbs = (ctypes.POINTER(_Iocb) * 1)(ctypes.pointer(self.iocb))
        self.event = (_Event * 1)()


class KernelBackend:
    """Linux AIO through ``syscall(2)`` (no libaio needed): a pool of one-slot contexts."""

    def __init__(self, libc: ctypes.CDLL, numbers: tuple[int, int, int]) -> None:
        self._syscall = libc.syscall
        self._syscall.restype = ctypes.c_long
        self._setup, self._submit, self._getevents = (ctypes.c_long(n) for n in numbers)
        self._lock = threading.Lock()
        self._idle: list[_Context] = []
        self._made = 0
        self._pid = os.getpid()
        self.disabled = False

    def start(self, fd: int) -> Pending | None:
        if self.disabled or os.fsync is not _REAL_FSYNC:
            return None
        context = self._take()
        if context is None:
            return None
        context.iocb.fildes = fd
        if self._syscall(self._submit, context.ctx, ctypes.c_long(1), context.iocbs) != 1:
            code = ctypes.get_errno()
            self._give(context)
            if code in (errno.EINVAL, errno.ENOSYS, errno.EBADF, errno.EPERM):
                # This file system (or sandbox) does not run fsync asynchronously: stop asking.
                log.debug("asynchronous fsync unavailable (%s): syncing in the caller", os.strerror(code))
                self.disabled = True
            return None
        return _KernelPending(self, context, fd)

    def _take(self) -> _Context | None:
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's contexts are not its own
                self._idle, self._made, self._pid = [], 0, os.getpid()
            if self._idle:
                return self._idle.pop()
            if self._made >= MAX_CONTEXTS:
                return None
            self._made += 1
        ctx = ctypes.c_ulong(0)
        if self._syscall(self._setup, ctypes.c_long(1), ctypes.byref(ctx)) != 0:
            code = ctypes.get_errno()
            with self._lock:
                self._made -= 1
                if code in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
                    self.disabled = True
            return None
        return _Context(ctx.value)

    def _give(self, context: _Context) -> None:
        with self._lock:
            if self._pid == os.getpid():
                self._idle.append(context)

    def reap(self, context: _Context) -> int:
        """Wait for the context's one event; its result (0 or -errno), or 1 when
        the wait itself failed (the caller then syncs synchronously)."""
        while True:
            got = self._syscall(self._getevents, context.ctx, ctypes.c_long(1), ctypes.c_long(1),
                                context.event, None)
            if got == 1:
                return int(context.event[0].res)
            if got < 0 and ctypes.get_errno() == errno.EINTR:
                continue
            return 1


class _KernelPending:
    __slots__ = ("_backend", "_context", "_fd")

    def __init__(self, backend: KernelBackend, context: _Context, fd: int) -> None:
        self._backend, self._context, self._fd = backend, context, fd

    def result(self) -> None:
        res = self._backend.reap(self._context)
        if res == 1:
            # The context is unusable (e.g. this is a forked child): never reuse it, sync here.
            os.fsync(self._fd)
            return
        self._backend._give(self._context)
        if res < 0:
            raise OSError(-res, os.strerror(-res))


class ThreadBackend:
    """The test double: each sync is ``os.fsync`` (as it is when started) on a thread of its own."""

    def start(self, fd: int) -> Pending | None:
        return _ThreadPending(fd)


class _ThreadPending:
    __slots__ = ("_done", "_error")

    def __init__(self, fd: int) -> None:
        self._done = threading.Event()
        self._error: OSError | None = None
        threading.Thread(target=self._run, args=(os.fsync, fd), daemon=True).start()

    def _run(self, fsync: Callable[[int], None], fd: int) -> None:
        try:
            fsync(fd)
        except OSError as e:
            self._error = e
        finally:
            self._done.set()

    def result(self) -> None:
        self._done.wait()
        if self._error is not None:
            raise self._error


def _kernel() -> Backend | None:
    numbers = _SYSCALLS.get(platform.machine().lower())
    if not sys.platform.startswith("linux") or numbers is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    return KernelBackend(libc, numbers)


_backend: Backend | None = _kernel()


def start(fd: int) -> Pending | None:
    """Begin an fsync of ``fd`` in the background; ``None``: sync it yourself."""
    backend = _backend
    return None if backend is None else backend.start(fd)


@contextlib.contextmanager
def use(backend: Backend | None) -> Iterator[None]:
    """Install ``backend`` for the block (``None``: every caller syncs itself)."""
    global _backend
    saved, _backend = _backend, backend
    try:
        yield
    finally:
        _backend = saved
