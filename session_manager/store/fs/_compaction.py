"""The fs store's online compaction: when a log is rewritten, inline or in the
background, and what a rewrite that landed refreshes.

A small log (``rewrites_inline``: its live state at most ``INLINE_LIVE``) is
rewritten inline by the commit that takes it past the hard line. A larger one:
past the soft line a commit starts a background rewrite (:mod:`._background`),
past the hard line too when the commit crossed both; past the hard line with
one in flight, the next commit waits for it to land (the bound of
:mod:`._rewrite` holds). A log far past it (loaded long: ``came_in_long``),
:meth:`compact` (maintenance) and a store whose compactor closed rewrite inline.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

from .._core.state import SessionState
from . import _rewrite
from ._background import Job
from ._datadir import DataDir
from ._group_commit import GroupCommit
from ._lazy import LazyEntries
from ._logfiles import LogFiles
from ._records import encode_snapshot, meta_size
from ._writer import Writer


class Compaction:
    """The fs store's online compaction (its part; see the module): rewrites through
    ``writer`` (a rename's directory sync) once ``group`` has synced what is owed."""

    def __init__(self, data: DataDir, writer: Writer, group: GroupCommit) -> None:
        self._d = data
        self._writer = writer
        self._group = group
        self.compactions = 0  # logs rewritten as their live state since this store opened (config-status)

    def compact(self, session_id: str) -> bool:
        """Rewrite the session's log as its live state now, however long it
        is (maintenance; commits compact on their own). ``False`` if there is
        no such session or the rewrite failed (the log is then unchanged)."""
        self._d.writable()
        while True:
            state = self._d.load(session_id, False)
            if state is None:
                return False
            if self._d.compactor is not None:
                self._d.compactor.wait(session_id)
            with state.lock:
                if self._d.sessions.get(session_id) is not state:
                    continue  # dropped while we waited: a newer load holds the writes since (a rewrite would lose them)
                if self._d.compactor is None or not self._d.compactor.rewriting(session_id):
                    return self.maybe_compact(session_id, state, force=True)

    def must_wait(self, session_id: str) -> bool:
        """A commit must first let the rewrite in flight land: the log is past
        the hard line (caller holds the session's lock)."""
        compactor = self._d.compactor
        if compactor is None or not compactor.rewriting(session_id):
            return False
        budget = self._d.budgets.get(session_id)
        return budget is not None and budget.wants_compaction()

    def maybe_compact(self, session_id: str, state: SessionState, *, force: bool = False) -> bool:
        """After a commit (or for :meth:`compact`), under the session's lock: rewrite a small
        log inline at the hard line; start a background rewrite of a larger one past the soft
        line (past the hard one too), rewrite inline one far past it. ``True`` when an inline
        rewrite replaced the log."""
        budget = self._d.budgets.get(session_id)
        if budget is None or not (force or budget.wants_background()):
            return False  # below the soft line (nearly every commit), so below the hard one too (SOFT_SLACK <= SLACK)
        compactor = self._d.compactor
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
        body = encode_snapshot(state.meta, entries.values(), state.leaf)
        return Job(session_id, state, self._d.log(session_id), body, list(entries), state.meta is not None,
                   current=self._job_current, land=self._job_landed, failed=self._job_failed,
                   again=self._job_again, sync=self._d.durability == "fsync")

    def _rewrite_inline(self, session_id: str, state: SessionState, budget: _rewrite.LogBudget) -> bool:
        if not self._d.owns() or not self._group.synced_before_rewrite(session_id):
            return False
        body = encode_snapshot(state.meta, state.entries.values(), state.leaf)
        path = self._d.log(session_id)
        if _rewrite.rewrite(self._d.ops, path, body):
            self._writer.renamed(path, self._d.durability == "fsync")
            budget.rewritten(len(body))
            self._d.tail_fix.pop(session_id, None)
            with self._d.lock:
                self.compactions += 1
            self._d.files.rewritten(session_id, state, body)  # new lines, new descriptor, the index (or none: small)
            return True
        budget.failed()  # retried once the log has doubled, not on every commit
        return False

    # -- a background job's calls back (under the session's lock) ------------------------

    def _job_current(self, job: Job) -> bool:
        """The job may land: its state is still the cached one and (fsync mode) the
        writes it carries that still owe an fsync got it (else they are undone,
        the state dropped, and the job abandoned): a new log never keeps a write
        its writer hears failed."""
        with self._d.lock:
            if self._d.sessions.get(job.session_id) is not job.state:
                return False
        if not self._d.owns():
            return False  # its rename would land in a data_dir this store no longer holds
        # Durability hot-reloads: commits carried over since a switch to fsync were answered as
        # synced, so the journal (and the new name) is synced as well (once fsync, always: the
        # commits from before a switch back were promised it too).
        job.sync = job.sync or self._d.durability == "fsync"
        if not self._group.synced_before_rewrite(job.session_id):
            return False
        with self._d.lock:
            return self._d.sessions.get(job.session_id) is job.state

    def _job_failed(self, job: Job) -> None:
        budget = self._d.budgets.get(job.session_id)
        if budget is not None:
            budget.failed()

    def _job_again(self, job: Job) -> Job | None:
        budget = self._d.budgets.get(job.session_id)
        return self._job(job.session_id, job.state) if budget is not None and budget.wants_background() else None

    def _job_landed(self, job: Job, fd: int) -> Callable[[], None]:
        session_id = job.session_id
        self._writer.renamed(job.path, job.sync)  # (fsync then or since: set by ``_job_current``)
        old, index = self._d.files.landed(session_id, job.state, job.body, job.ids, job.has_meta, job.journal, fd)
        budget = self._d.budgets.get(session_id)
        if budget is not None:
            budget.rewritten(self._d.files.files(session_id).covered)
        self._d.tail_fix.pop(session_id, None)  # the new log ends on a whole line
        with self._d.lock:
            self.compactions += 1

        def cleanup() -> None:
            if old is not None:
                os.close(old)  # frees the replaced log's blocks: milliseconds, off every lock
            if index is not None:
                LogFiles.write_landed_index(*index)

        return cleanup


def loaded_budget(covered: int, state: SessionState) -> _rewrite.LogBudget:
    """The budget of a log just loaded (``covered`` bytes of it read) into ``state``."""
    budget = _rewrite.LogBudget()
    budget.disk = covered
    entries = state.entries
    if isinstance(entries, LazyEntries):
        # The live entries' newest lines, from the index: no body is decoded for this (an
        # estimate on the high side, an append line also carrying a meta: compaction comes
        # no earlier than it would have).
        budget.live = entries.live_bytes()
        budget.entries = _rewrite.LoadedSizes(functools.partial(_line_bytes, entries))
    if state.meta is not None:
        budget.charge(0, (), meta_size(state.meta))
    return budget


def _line_bytes(entries: LazyEntries, entry_id: str) -> int:
    """The bytes :meth:`LazyEntries.live_bytes` counts for ``entry_id``'s newest line (0: none)."""
    at = entries.location(entry_id)
    return 0 if at is None else at[1] + 1
