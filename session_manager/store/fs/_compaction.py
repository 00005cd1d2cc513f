"""The fs store's online compaction: when a log is rewritten, inline or in the
background, and what a rewrite that landed refreshes.

A small log (``rewrites_inline``: its live state at most ``INLINE_LIVE``) is
rewritten inline by the commit that takes it past the hard line. A larger one:
past the soft line a commit starts a background rewrite (:mod:`._compactor`),
past the hard line too when the commit crossed both; past the hard line with
one in flight, the next commit waits for it to land (the bound of
:mod:`._compaction` holds). A log far past it (loaded long: ``came_in_long``),
:meth:`compact` (maintenance) and a store whose compactor closed rewrite inline.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._core.state import SessionState
from . import _rewrite
from ._background import Compactor, Job
from ._cache import StateCache
from ._fileops import Ops
from ._logfiles import LogFiles
from ._records import encode_snapshot
from ._tail import TailFix


class OnlineCompaction:
    """Mixed into :class:`~.fs.FsStore` (its attributes, declared here for the checker)."""

    _ops: Ops
    _dir: str
    durability: str
    _lock: threading.Lock
    _sessions: StateCache
    _tail_fix: dict[str, TailFix]
    _budgets: dict[str, _rewrite.LogBudget]
    _files: LogFiles
    _compactor: Compactor | None
    compactions: int

    if TYPE_CHECKING:
        def _renamed(self, path: str, sync: bool) -> None: ...
        def _writable(self) -> None: ...
        def _owns(self) -> bool: ...
        def _log(self, session_id: str) -> str: ...
        def _state(self, session_id: str, create: bool = False) -> SessionState | None: ...
        def _synced_before_rewrite(self, session_id: str) -> bool: ...

    def compact(self, session_id: str) -> bool:
        """Rewrite the session's log as its live state now, however long it
        is (maintenance; commits compact on their own). ``False`` if there is
        no such session or the rewrite failed (the log is then unchanged)."""
        self._writable()
        while True:
            state = self._state(session_id)
            if state is None:
                return False
            if self._compactor is not None:
                self._compactor.wait(session_id)
            with state.lock:
                if self._sessions.get(session_id) is not state:
                    continue  # dropped while we waited: a newer load holds the writes since (a rewrite would lose them)
                if self._compactor is None or not self._compactor.rewriting(session_id):
                    return self._maybe_compact(session_id, state, force=True)

    def _must_wait(self, session_id: str) -> bool:
        """A commit must first let the rewrite in flight land: the log is past
        the hard line (caller holds the session's lock)."""
        compactor = self._compactor
        if compactor is None or not compactor.rewriting(session_id):
            return False
        budget = self._budgets.get(session_id)
        return budget is not None and budget.wants_compaction()

    def _maybe_compact(self, session_id: str, state: SessionState, *, force: bool = False) -> bool:
        """After a commit (or for :meth:`compact`), under the session's lock: rewrite a small
        log inline at the hard line; start a background rewrite of a larger one past the soft
        line (past the hard one too), rewrite inline one far past it. ``True`` when an inline
        rewrite replaced the log."""
        budget = self._budgets.get(session_id)
        if budget is None or not (force or budget.wants_background()):
            return False  # below the soft line (nearly every commit), so below the hard one too (SOFT_SLACK <= SLACK)
        compactor = self._compactor
        if compactor is not None and compactor.rewriting(session_id):
            return False  # one in flight: it lands soon, and commits past the hard line wait for it
        # Past the hard line too (one commit crossed both: a streamed entry over SLACK - SOFT_SLACK), in the
        # background all the same: the next commit waits for it (``_must_wait``), so the bound holds as
        # inline, and the fsync is off this caller (a 30 KB streamed reply: 357 of its 533 rewrites were inline).
        inline = force or _rewrite.came_in_long(budget)
        if not inline and _rewrite.rewrites_inline(budget):
            if not budget.wants_compaction():
                return False  # a small log between the lines: no job, the hard line rewrites it inline
            inline = True
        if not inline and compactor is not None and compactor.start(self._job(session_id, state)):
            return False
        if inline or budget.wants_compaction():  # (or no background: the store is closing)
            if compactor is not None:
                compactor.wait(session_id)  # an earlier job's cleanup (it never takes this lock)
            return self._rewrite_inline(session_id, state, budget)
        return False

    def _job(self, session_id: str, state: SessionState) -> Job:
        """A background rewrite of the state as it is now (under its lock)."""
        entries = state.entries
        return Job(session_id, state, self._log(session_id), encode_snapshot(state.meta, entries.values(), state.leaf),
                   list(entries), state.meta is not None, current=self._job_current, land=self._job_landed,
                   failed=self._job_failed, again=self._job_again, sync=self.durability == "fsync")

    def _rewrite_inline(self, session_id: str, state: SessionState, budget: _rewrite.LogBudget) -> bool:
        if not self._owns() or not self._synced_before_rewrite(session_id):
            return False
        body = encode_snapshot(state.meta, state.entries.values(), state.leaf)
        path = self._log(session_id)
        if _rewrite.rewrite(self._ops, path, body):
            self._renamed(path, self.durability == "fsync")
            budget.rewritten(len(body))
            self._tail_fix.pop(session_id, None)
            with self._lock:
                self.compactions += 1
            self._files.rewritten(session_id, state, body)  # new lines, new descriptor, the index (or none: small)
            return True
        budget.failed()  # retried once the log has doubled, not on every commit
        return False

    # -- a background job's calls back (under the session's lock) ------------------------

    def _job_current(self, job: Job) -> bool:
        """The job may land: its state is still the cached one and (fsync mode) the
        writes it carries that still owe an fsync got it (else they are undone,
        the state dropped, and the job abandoned): a new log never keeps a write
        its writer hears failed."""
        with self._lock:
            if self._sessions.get(job.session_id) is not job.state:
                return False
        if not self._owns():
            return False  # its rename would land in a data_dir this store no longer holds
        # Durability hot-reloads: commits carried over since a switch to fsync were answered as
        # synced, so the journal (and the new name) is synced as well (once fsync, always: the
        # commits from before a switch back were promised it too).
        job.sync = job.sync or self.durability == "fsync"
        if not self._synced_before_rewrite(job.session_id):
            return False
        with self._lock:
            return self._sessions.get(job.session_id) is job.state

    def _job_failed(self, job: Job) -> None:
        budget = self._budgets.get(job.session_id)
        if budget is not None:
            budget.failed()

    def _job_again(self, job: Job) -> Job | None:
        budget = self._budgets.get(job.session_id)
        return self._job(job.session_id, job.state) if budget is not None and budget.wants_background() else None

    def _job_landed(self, job: Job, fd: int) -> Callable[[], None]:
        session_id = job.session_id
        self._renamed(job.path, job.sync)  # (fsync then or since: set by ``_job_current``)
        old, index = self._files.landed(session_id, job.state, job.body, job.ids, job.has_meta, job.journal, fd)
        budget = self._budgets.get(session_id)
        if budget is not None:
            budget.rewritten(self._files.files(session_id).covered)
        self._tail_fix.pop(session_id, None)  # the new log ends on a whole line
        with self._lock:
            self.compactions += 1

        def cleanup() -> None:
            if old is not None:
                os.close(old)  # frees the replaced log's blocks: milliseconds, off every lock
            if index is not None:
                LogFiles.write_landed_index(*index)

        return cleanup
