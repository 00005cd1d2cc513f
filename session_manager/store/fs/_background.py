"""Background compaction: the rewrite's write and fsync off the caller's path.

A commit that finds its log past the soft line (:meth:`._rewrite.LogBudget.
wants_background`; a log whose live state is past ``INLINE_LIVE``, a smaller one
is rewritten inline at the hard line) snapshots the live state's bytes under the session's lock
and hands a :class:`Job` to the store's :class:`Compactor`. A worker thread
writes the snapshot to the temp file and fsyncs it holding no lock (``fsync``
releases the GIL). Commits go on meanwhile; each one's bytes are also kept in
the job's journal. The worker then takes the session's lock, appends the
journal to the temp file (and fsyncs it again in ``fsync`` mode: those commits
were promised durable), renames it over the log and lets the store point its
descriptor, lazy bodies and budget at the new file (the job's ``land``).
Closing the replaced log's descriptor and writing the new index sidecar (both
can take milliseconds on ext4) run afterwards on a second thread (a log under
SAVE_MIN_BYTES gets no index: its replaced log's is removed at the landing, under
the lock, so a save made since is never undone). When the
commits carried over already put the new log past the soft line, the next job
is snapshotted in the same critical section (no wake-up in between).

The new log is the snapshot plus every commit made since, byte for byte: the
same replay as the old one. A crash at any instant leaves the old log (the
rename did not happen) or the new one (it did, and everything in it was on
disk first), never a mix. The job is abandoned, the old log kept, when it was
cancelled (delete, close) or the session's state left the cache meanwhile.

Bound: while a job is in flight, a commit that finds the log past the hard
line (the synchronous trigger, ``RATIO * live + SLACK``) first waits for the
job to land, so the log never grows past that line by more than one commit,
as without the background. One job per session at a time, so the temp name
stays the one :mod:`._rewrite` uses.

No thread outlives a short idle spell and no job outlives its work, so an
idle compactor references no store (dropping a store still releases its
data_dir at once).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..path import Entry
from ._fileops import CREATE_FLAGS, Ops, reason, write_all
from ._rewrite import TEMP_SUFFIX

log = logging.getLogger("session_manager.store.fs")

# The temp file becomes the log's kept descriptor once renamed: readable and appending.
TEMP_FLAGS = (CREATE_FLAGS & ~os.O_WRONLY) | os.O_RDWR | os.O_APPEND
IDLE_SECONDS = 0.2  # a worker thread with nothing to do exits after this


@dataclass(eq=False)
class Job:
    """One rewrite of one session's log."""

    session_id: str
    state: Any  # the SessionState the snapshot was taken from
    path: str
    body: bytes  # the snapshot (:func:`._records.encode_snapshot`)
    ids: list[str]  # the snapshot's entry ids, in its order
    has_meta: bool
    # Under the session's lock, before the rename: may this job still land (its
    # state is still the session's cached one)?
    current: Callable[[Job], bool]
    # Under the session's lock, with the journal appended and the rename done:
    # the store's bookkeeping (never raises); returns the cleanup to run without the lock.
    land: Callable[[Job, int], Callable[[], None]]
    # Under the session's lock: the rewrite failed (an OSError), the log is as it was.
    failed: Callable[[Job], None]
    # Under the session's lock, right after landing: the next job if the log is
    # past the soft line already (commits made meanwhile): no wake-up between the two.
    again: Callable[[Job], Job | None]
    sync: bool  # durability "fsync" (then or since, set by ``current``): the journal is fsynced too, and the directory
    journal: list[tuple[bytes, tuple[str, ...]]] = field(default_factory=list)  # commits since the snapshot
    cancelled: bool = False

    @property
    def tail(self) -> bytes:
        return b"".join(data for data, _ in self.journal)


class _Worker:
    """A FIFO of tasks run by one thread, started on demand, gone when idle."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition(threading.Lock())
        self._tasks: deque[Callable[[], None]] = deque()
        self._thread: threading.Thread | None = None

    def submit(self, task: Callable[[], None]) -> None:
        with self._cond:
            self._tasks.append(task)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            else:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._tasks:
                    self._cond.wait(IDLE_SECONDS)
                if not self._tasks:
                    self._thread = None
                    return
                task = self._tasks.popleft()
            try:
                task()
            except Exception:  # a bug in one task must not strand the ones queued behind it
                log.exception("%s: a background task failed", self._name)


class Compactor:
    """The background rewrites of one store's logs."""

    def __init__(self, ops: Ops) -> None:
        self._ops = ops
        self._cond = threading.Condition(threading.Lock())
        # Rewriting: snapshot taken, not landed or abandoned yet (a commit calls :meth:`appended`
        # only while it holds one: read without the lock, as :meth:`appended` reads it).
        self.jobs: dict[str, Job] = {}
        self._busy: dict[str, int] = {}  # tasks outstanding per session (rewrite and cleanup)
        self._closed = False
        self._rewriter = _Worker("session-manager-compactor")
        self._cleaner = _Worker("session-manager-compactor-cleanup")

    # -- the store's calls (under the session's lock unless said otherwise) ------------

    def rewriting(self, session_id: str) -> bool:
        """A job of ``session_id`` is in flight (its log is about to be replaced)."""
        return session_id in self.jobs

    def busy(self, session_id: str) -> bool:
        """Anything of ``session_id`` is in flight, its cleanup included."""
        return session_id in self._busy

    def start(self, job: Job) -> bool:
        """Hand ``job`` to the worker; ``False`` when one is in flight or the store is closing."""
        with self._cond:
            if self._closed or job.session_id in self.jobs:
                return False
            self.jobs[job.session_id] = job
            self._busy[job.session_id] = self._busy.get(job.session_id, 0) + 1
        self._rewriter.submit(lambda: self._rewrite(job))
        return True

    def appended(self, session_id: str, data: bytes, entries: tuple[Entry, ...]) -> None:
        """A commit's bytes (of ``entries``) just landed in the log: the new log must
        carry them too. The ids are taken only when a job is in flight (every commit calls this)."""
        job = self.jobs.get(session_id)
        if job is not None:
            job.journal.append((data, tuple(e["id"] for e in entries)))

    def cancel(self, session_id: str) -> None:
        """The job in flight (if any) must not land (the session is being deleted)."""
        job = self.jobs.get(session_id)
        if job is not None:
            job.cancelled = True

    def wait(self, session_id: str) -> None:
        """Until nothing of ``session_id`` is in flight. The caller must not hold
        the session's lock (a job needs it to land)."""
        with self._cond:
            while session_id in self._busy:
                self._cond.wait()

    def wait_landed(self, session_id: str) -> None:
        """Until the job of ``session_id`` in flight now has landed or was
        abandoned (not the one that may follow it). No session lock held."""
        with self._cond:
            job = self.jobs.get(session_id)
            while job is not None and self.jobs.get(session_id) is job:
                self._cond.wait()

    def close(self) -> None:
        """Cancel every job and wait until all work is done (holding no session lock)."""
        with self._cond:
            self._closed = True
            for job in self.jobs.values():
                job.cancelled = True
            while self._busy:
                self._cond.wait()

    # -- the worker side -------------------------------------------------------------

    def _done(self, session_id: str) -> None:
        with self._cond:
            left = self._busy[session_id] - 1
            if left:
                self._busy[session_id] = left
            else:
                del self._busy[session_id]
            self._cond.notify_all()

    def _rewrite(self, job: Job) -> None:
        tmp = job.path + TEMP_SUFFIX
        cleanup: Callable[[], None] | None = None
        after: Job | None = None
        fd = -1
        try:
            try:
                fd = self._ops.open(tmp, TEMP_FLAGS, 0o644)
                write_all(fd, job.body)
                os.fsync(fd)  # always: a rename over the log must never expose an unsynced file
                if not job.cancelled:
                    landed = self._land(job, fd, tmp)
                    if landed is not None:
                        cleanup, after = landed
            except OSError as e:
                log.warning("%s: compaction skipped (%s); the log stays as it is",
                            os.path.basename(job.path), reason(e))
                with job.state.lock:
                    job.failed(job)
        finally:
            if cleanup is None:
                with self._cond:
                    self.jobs.pop(job.session_id, None)
                if fd >= 0:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    self._ops.unlink(tmp)
                self._done(job.session_id)
            else:
                with self._cond:
                    self._busy[job.session_id] += 1  # the cleanup's own count: delete waits for it too
                self._done(job.session_id)
                self._cleaner.submit(lambda: self._clean(job.session_id, cleanup))
                if after is not None:
                    self._rewriter.submit(lambda: self._rewrite(after))

    def _land(self, job: Job, fd: int, tmp: str) -> tuple[Callable[[], None], Job | None] | None:
        """Under the session's lock: carry the journal over, rename, refresh the store."""
        with job.state.lock:
            if job.cancelled or not job.current(job):
                return None
            tail = job.tail
            if tail:
                write_all(fd, tail)
                if job.sync:
                    os.fsync(fd)  # these commits were acknowledged as on disk
            with self._cond:
                if self._closed or job.cancelled:
                    return None
            self._ops.replace(tmp, job.path)
            # From here on the new log is the log: nothing may abandon it.
            cleanup = job.land(job, fd)
            after = job.again(job)
            with self._cond:
                # Before the lock is released: the next commit sees it landed (and
                # journals into the next job, if any).
                del self.jobs[job.session_id]
                if after is not None and not self._closed:
                    self.jobs[job.session_id] = after
                    self._busy[job.session_id] += 1
                else:
                    after = None
                self._cond.notify_all()
            return cleanup, after

    def _clean(self, session_id: str, cleanup: Callable[[], None]) -> None:
        try:
            cleanup()
        except Exception:  # a cleanup failure costs an index rebuild, never the store
            log.exception("after compacting a log of session %s", session_id)
        finally:
            self._done(session_id)
