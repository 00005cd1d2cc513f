"""Open log descriptors kept between writes, and fsyncs shared by waiters.

:class:`FdCache` is a bounded LRU of append descriptors keyed by path: a
write costs one ``write`` instead of ``stat``/``open``/``fstat``/``close``
around it. A descriptor in use is pinned and never closed under its user;
``forget`` (before a log is unlinked or renamed over) closes it as soon as
it is unpinned, so no write can land in a file that is no longer the log.

:class:`GroupSync` lets every writer that has written to one descriptor
wait for a single ``fsync`` that covers all of them: the first waiter
syncs (with the GIL released, as ``os.fsync`` always is), the ones that
wrote while it ran share the next one.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# Read access too: the tail check after a failed write and lazy bodies pread it.
_FLAGS = os.O_RDWR | os.O_APPEND | _O_CLOEXEC
DEFAULT_CAPACITY = 256
# Opens ``path`` for appending (creating it when asked): ``(fd, created)``.
Opener = Callable[[str, bool], tuple[int, bool]]

log = logging.getLogger("session_manager.store.fs")


def close_quietly(fd: int) -> None:
    """Close a log descriptor this cache let go of; a failure is logged, never raised. The
    descriptor is released either way (Linux frees it even when ``close`` reports an error),
    and the caller is some other log's write, a delete or the store's close: none of them
    may fail, or leave a slot pinned, for an error that concerns an idle file (on NFS, a
    write-back error of bytes its writers were answered for long ago: logged for the operator)."""
    try:
        os.close(fd)
    except OSError as e:
        log.warning("closing a log descriptor failed (%s); earlier writes to it may not be on disk", e)


class _Slot:
    __slots__ = ("doomed", "end", "fd", "flushed", "pins", "sync")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pins = 0
        self.doomed = False
        self.sync = GroupSync()
        # Bytes written in flush mode that no fsync covered since (no ticket of ``sync`` does):
        # synced before an fsync-mode answer rests on them (:meth:`FsStore._sync_pending`) and
        # before the descriptor closes once the store is in fsync mode (``FdCache.sync_flushed``).
        self.flushed = False
        # Where the file ends, as its writer (FsStore._append, the only one writing
        # through a slot) last left it; None: ask fstat. The store owns its
        # data_dir, so only its own writes move it.
        self.end: int | None = None


class FdCache:
    """At most ``capacity`` idle descriptors (pinned ones may exceed it briefly)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, opener: Opener | None = None) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._opener: Opener = opener or _open
        # Set while the store is in fsync mode: a descriptor closed with flush-mode bytes on it
        # (written before a switch, or by a write that read "flush" as the switch happened) is
        # fsynced first, so no later fsync-mode answer rests on bytes nothing will sync.
        self.sync_flushed = False
        self._lock = threading.Lock()
        self._slots: OrderedDict[str, _Slot] = OrderedDict()

    def __len__(self) -> int:
        return len(self._slots)

    @contextmanager
    def use(self, path: str, *, create: bool = True) -> Iterator[tuple[int, bool, GroupSync]]:
        """``(fd, created, sync)`` of ``path``, pinned for the block; ``created``
        is true when this call created the file (its directory entry needs an
        fsync in fsync mode)."""
        slot, created = self.acquire(path, create=create)
        try:
            yield slot.fd, created, slot.sync
        finally:
            self.release(path, slot)

    def acquire(self, path: str, *, create: bool = True) -> tuple[_Slot, bool]:
        """:meth:`use` without the generator (the append path): pin ``path``'s
        slot; the caller must :meth:`release` it."""
        lock = self._lock
        lock.acquire()  # (acquire/try/finally, not ``with``: half the cost, on every write)
        try:
            slot = self._slots.get(path)
            if slot is not None:
                self._slots.move_to_end(path)
                slot.pins += 1
                return slot, False
        finally:
            lock.release()
        fd, created = self._opener(path, create)
        with self._lock:
            slot = self._slots.get(path)
            if slot is None:
                slot = self._slots[path] = _Slot(fd)
                fd = -1
            else:  # another thread opened it meanwhile: use theirs
                self._slots.move_to_end(path)
            slot.pins += 1
            self._evict()
        if fd >= 0:
            close_quietly(fd)
        return slot, created

    def acquire_cached(self, path: str) -> _Slot | None:
        """:meth:`acquire` if ``path`` has a descriptor already (nothing is opened)."""
        with self._lock:
            slot = self._slots.get(path)
            if slot is not None:
                slot.pins += 1
            return slot

    def release(self, path: str, slot: _Slot) -> None:
        lock = self._lock
        lock.acquire()  # (as in :meth:`acquire`)
        try:
            slot.pins -= 1
            if slot.pins == 0:
                if slot.doomed:
                    self._close(path, slot)
                elif len(self._slots) > self.capacity:
                    # Others make room, not this one: its writer is still to be answered, and a
                    # close error here (NFS reports write-back failures at close) would concern
                    # its own bytes. (Idle ones go oldest-acquired first, even one used since it was.)
                    self._evict(keep=path)
        finally:
            lock.release()

    def holds(self, path: str, slot: _Slot) -> bool:
        """Whether ``slot`` is still ``path``'s descriptor (not replaced or forgotten)."""
        with self._lock:
            return self._slots.get(path) is slot

    def forget(self, path: str) -> None:
        """Close ``path``'s descriptor (now, or when its last user is done)."""
        with self._lock:
            slot = self._slots.get(path)
            if slot is None:
                return
            self._close(path, slot)

    def swap(self, path: str, fd: int) -> int | None:
        """Make ``fd`` the descriptor of ``path`` (a log renamed over the old one);
        returns the old descriptor for the caller to close (it may take a while:
        the replaced file's blocks are freed then), or ``None`` when there was
        none or a user still holds it (its release closes it)."""
        with self._lock:
            old = self._slots.pop(path, None)
            self._slots[path] = _Slot(fd)
            self._evict()
            if old is None:
                return None
            old.doomed = True
            return old.fd if old.pins == 0 else None

    def close_all(self) -> None:
        with self._lock:
            for path in list(self._slots):
                self._close(path, self._slots[path])

    def _evict(self, keep: str | None = None) -> None:
        # The oldest idle slot is nearly always first: no copy of every path per open.
        while len(self._slots) > self.capacity:
            idle = next(((path, slot) for path, slot in self._slots.items() if slot.pins == 0 and path != keep),
                        None)
            if idle is None:
                return
            self._close(*idle)

    def _close(self, path: str, slot: _Slot) -> None:
        """Drop ``slot`` (if still cached) and close its fd unless pinned."""
        if self._slots.get(path) is slot:
            del self._slots[path]
        slot.doomed = True
        if slot.pins == 0:
            self._sync_flushed(slot)
            close_quietly(slot.fd)

    def _sync_flushed(self, slot: _Slot) -> None:
        # (Under the cache's lock: only descriptors written in flush mode and closed after a
        # switch to fsync pay it, each once.)
        if slot.flushed and self.sync_flushed:
            slot.flushed = False
            try:
                os.fsync(slot.fd)
            except OSError as e:  # (answered long ago, in flush mode: nobody left to tell but the log)
                log.warning("syncing a log's flush-mode writes before closing it failed (%s)", e)


def _open(path: str, create: bool) -> tuple[int, bool]:
    if create:
        try:
            return os.open(path, _FLAGS | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:
            pass
    return os.open(path, _FLAGS), False


class GroupSync:
    """One ``fsync`` for every write made before it started.

    A writer calls :meth:`written` right after its ``write`` returns (getting
    a ticket, and saying where its bytes end), then :meth:`wait` with that
    ticket. Whoever finds no sync in progress runs one; a writer whose write
    was made while one ran waits for it and then, if still uncovered, for the
    next. A failed fsync fails every writer not yet durable, then and for
    good: after a failed fsync the kernel may have dropped the dirty pages,
    so a later fsync's success would prove nothing about them. The file's
    owner undoes those writes (back to :attr:`durable_end`) and replaces the
    descriptor.
    """

    __slots__ = ("_cond", "_durable", "_end", "_failed", "_lock", "_running", "_undone", "_waiting", "_written",
                 "durable_end")

    def __init__(self) -> None:
        # State changes take the plain lock (a C-level ``with``: every append in fsync mode
        # passes here twice); the condition over it is used only by a writer that must wait.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiting = 0  # writers inside cond.wait(): nobody to notify when 0
        self._written = 0  # tickets handed out
        self._durable = 0  # every ticket <= this is on disk
        self._running = False
        self._failed: OSError | None = None
        self._end = -1  # where the last written ticket's bytes end (-1: not said)
        self._undone = False
        # Where the durable bytes end: the start of the first write made through
        # this object, then the end of the last write a successful sync covered.
        self.durable_end = -1

    def written(self, start: int = -1, end: int = -1) -> int:
        with self._lock:
            self._written += 1
            if self.durable_end < 0:
                self.durable_end = start
            self._end = end
            return self._written

    @property
    def pending(self) -> bool:
        """Tickets handed out that no successful sync covers yet."""
        return self._written > self._durable

    @property
    def failed(self) -> bool:
        return self._failed is not None

    def claim_undo(self) -> bool:
        """True once after a failed sync: the caller undoes the unsynced writes."""
        with self._lock:
            if self._failed is None or self._undone:
                return False
            self._undone = True
            return True

    def last(self) -> int:
        """The newest ticket (waiting on it covers every write so far)."""
        return self._written

    def wait(self, fd: int, ticket: int) -> None:
        cond = self._cond
        with self._lock:
            while True:
                if self._durable >= ticket:
                    return
                if self._failed is not None:
                    raise self._failed
                if not self._running:
                    break
                self._waiting += 1
                try:
                    cond.wait()
                finally:
                    self._waiting -= 1
            self._running = True
            upto, end = self._written, self._end
        error: OSError | None = None
        try:
            os.fsync(fd)
        except OSError as e:
            error = e
        except BaseException:
            # Interrupted (a signal's exception) with no verdict: nothing is marked durable,
            # and the next waiter syncs again instead of waiting forever on this one.
            with self._lock:
                self._running = False
                if self._waiting:
                    cond.notify_all()
            raise
        with self._lock:
            self._running = False
            if error is None:
                self._durable = max(self._durable, upto)
                self.durable_end = max(self.durable_end, end)
            else:
                self._failed = error
            if self._waiting:
                cond.notify_all()
        if error is not None:
            raise error
