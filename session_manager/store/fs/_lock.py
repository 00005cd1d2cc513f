"""One owner per data_dir: an exclusive ``flock`` on ``<data_dir>/.session-manager.lock``.

Every writable fs store takes it at open and keeps it until ``close`` (or
until the process dies: the kernel releases it, so a SIGKILLed owner never
leaves a stale lock). ``flock`` locks belong to an open file description, so
a second open in the same process conflicts exactly like one in another
process, however the path is spelled. The file holds the owner's pid for
the error text; it is never removed (removing it would let two owners lock
two different files of the same name).

POSIX only (Linux, macOS). On NFS, ``flock`` is emulated with per-process
byte-range locks on some clients and not at all on others: do not share a
data_dir over NFS. The Rust reference takes no lock.

A data_dir removed (``rm -rf``) or replaced under its owner leaves the owner
holding a lock on a file nobody can find, and its kept log descriptors
writing into files nobody can find: :meth:`DirLock.verify` compares the
lock file the path names now with the one locked (device and inode, one
``stat``), and every write path of the store asks it (:meth:`~._datadir.DataDir.still_ours`).
A commit, after its write, asks :meth:`DirLock.check`: the locked file's link count on the
held descriptor (one ``fstat``, no path lookup: ``rm -rf``, or the lock file removed or
renamed over, leaves it at 0), and the full ``lstat`` at most every ``FULL_CHECK_SECONDS``
(a data_dir renamed away, or a lock file hard-linked elsewhere, is caught by that one).

``fork()`` copies the descriptor, and with it the lock: a forked child (a
multiprocessing helper) closes its copy at once (:func:`_after_fork_in_child`),
so the owner's close still frees the data_dir, and the lock it inherited
answers :attr:`DirLock.inherited_from` so the store it inherited refuses
every call instead of becoming a second writer.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
import weakref
from pathlib import Path

from ...errors import StoreError
from ._fileops import Ops, reason

LOCK_NAME = ".session-manager.lock"
_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
# How long :meth:`DirLock.check` trusts the link count alone: the path lookup of a full check
# cost a commit ~3-5 us (one lstat), the fstat ~1-2 us; at this period the lstats left cost nothing.
FULL_CHECK_SECONDS = 0.1


from session_manager.errors import DataDirLocked as DataDirLocked  # noqa: E402 (defined with every other error)
from session_manager.errors import DataDirLost as DataDirLost  # noqa: E402


class DirLock:
    """The held lock; :meth:`release` gives it up (idempotent)."""

    def __init__(self, fd: int, path: str = "", shown: str = "") -> None:
        self._fd: int | None = fd
        self._pid = os.getpid()
        st = os.fstat(fd)
        self._identity = (st.st_dev, st.st_ino)
        self._path = path  # the lock file's path, as the store spells its data_dir
        self._shown = shown
        self._lost: str | None = None  # why the data_dir is no longer ours: for good
        self._full_due = 0.0  # (monotonic) when :meth:`check` asks the path again
        self.inherited_from: int | None = None  # the owner's pid, in a process forked from it
        _HELD.add(self)

    @classmethod
    def acquire(cls, ops: Ops, data_dir: Path, shown: str) -> DirLock:
        """Take the lock or raise :class:`DataDirLocked` naming ``shown`` (the
        data_dir as the caller spelled it) and the holder's pid. A refused
        open writes nothing: the file already exists, opening it changes no byte."""
        path = data_dir / LOCK_NAME
        try:
            fd = ops.open(path, _FLAGS, 0o644)
        except OSError as e:
            raise StoreError(f"data_dir {shown}: cannot open its lock file {LOCK_NAME}: {reason(e)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _holder(fd)
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                who = f"process {holder}" if holder else "another process"
                raise DataDirLocked(
                    f"data_dir {shown} is already open for writing by {who}; "
                    "one writer per data_dir (open it with read_only=True to inspect it); to run several "
                    "processes, use sqlite:///path.db on one machine or postgresql://... across machines"
                ) from None
            raise StoreError(f"data_dir {shown}: cannot lock {LOCK_NAME}: {reason(e)}") from None
        try:
            # Overwritten in place, cut only past its end: truncating to zero
            # frees the block, and on ext4 (discard, auto_da_alloc) that costs
            # milliseconds on every open.
            line = f"{os.getpid()}\n".encode()
            os.pwrite(fd, line, 0)
            if os.fstat(fd).st_size > len(line):
                os.ftruncate(fd, len(line))
        except OSError:
            pass  # the pid is only for error texts; the lock is what counts
        return cls(fd, os.fspath(path), shown)

    def verify(self) -> None:
        """Raise :class:`DataDirLost` unless the path still names the file this lock holds:
        a removed data_dir, or one created again, is no longer this store's to write."""
        if self._lost is None:
            try:
                st = os.lstat(self._path)
            except OSError as e:
                if e.errno not in (errno.ENOENT, errno.ENOTDIR):
                    raise StoreError(f"data_dir {self._shown}: cannot check its lock file: {reason(e)}") from None
                why = "its lock file is gone"
            else:
                if (st.st_dev, st.st_ino) == self._identity:
                    self._full_due = time.monotonic() + FULL_CHECK_SECONDS
                    return
                why = "its lock file is another file now"
            self._lost = (f"data_dir {self._shown} is no longer the directory this store locked ({why}: "
                          "removed or replaced while open); every write is refused, reopen it")
        raise DataDirLost(self._lost)

    def check(self) -> None:
        """:meth:`verify` for a commit just written (before its answer), cheaper: the locked file
        still has a name (its link count, one ``fstat`` on the held descriptor) and the full
        check ran less than ``FULL_CHECK_SECONDS`` ago; else the full check decides."""
        fd = self._fd
        if fd is not None and self._lost is None and time.monotonic() < self._full_due:
            try:
                if os.fstat(fd).st_nlink:
                    return
            except OSError:
                pass  # (the full check says why)
        self.verify()

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the last descriptor releases the flock

    def __del__(self) -> None:
        # A store dropped without close (a script, a test) frees its data_dir
        # the way a dropped file object closes.
        self.release()

    @property
    def held(self) -> bool:
        return self._fd is not None

    def _forked(self) -> None:
        """In a forked child: drop the copied descriptor (the parent's lock stays:
        it is the parent's descriptor that holds it until the parent closes)."""
        if self._fd is not None and self._pid != os.getpid():
            self.inherited_from = self._pid
            self.release()


# Every lock this process holds, for the fork hook (weak: a dropped store frees its lock).
_HELD: weakref.WeakSet[DirLock] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for lock in list(_HELD):
        lock._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _holder(fd: int) -> int | None:
    """Who holds the lock: the kernel's answer where it gives one (Linux), else the
    pid in the file. The file alone can be stale: a winner has taken the lock a
    moment before it writes its pid over the previous owner's."""
    held = _locker(fd)
    if held is not None:
        return held
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        return int(text) if text.isdigit() else None
    except (OSError, UnicodeDecodeError):
        return None


def _locker(fd: int) -> int | None:
    """The pid ``/proc/locks`` records for the flock on ``fd``'s file (its
    ``major:minor:inode`` in hex, hex, decimal); None where there is no such file."""
    try:
        st = os.fstat(fd)
        wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            for line in f:
                fields = line.split()
                # "1: FLOCK ADVISORY WRITE <pid> <dev:ino> 0 EOF"; a waiter's line has "->" second
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted and fields[4].isdigit():
                    return int(fields[4]) or None  # 0: a holder outside this pid namespace
    except OSError:
        pass
    return None
