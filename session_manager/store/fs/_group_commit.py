"""Group commit for ``durability="fsync"``: appends waiting on one session share an fsync.

The service runs every mutation inside ``store.mutation(...)`` under the
session's lock and calls ``store.settle()`` once it has let go of that lock,
before it answers. In fsync mode a commit made inside such a scope writes
its lines and takes a ticket from the descriptor's
:class:`~._descriptors.GroupSync`, but leaves the fsync to :meth:`GroupCommit.settle`:
the writers that queued on the lock meanwhile write theirs, and the first
of them to wait syncs for all (the GIL is released in ``fsync``). No one is
answered, and no event leaves, before an fsync covering its bytes returned.
A commit made outside a scope (a direct ``store.commit``) still syncs before
it returns. A scope that wrote nothing to a session it named (an idempotent
replay, ``ensure`` of an existing session, a fork's read of its source) waits
in ``settle`` for that session's pending writes: its answer rests on them.

Readers of the same store may see an entry whose fsync is still running
(as every reader does in flush mode). If that fsync fails, every write it
or a later one on the descriptor was to cover is undone: the log is
truncated back to the end of what was durable, the session is dropped from
memory (its next access replays the log) and the catalog takes the log's
meta again, so each of those writers hears ``session/storage`` and nothing
they wrote replays.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from types import TracebackType

from ...errors import StoreError
from .._core.state import SessionState
from ..base import NO_TRANSACTION
from ._datadir import DataDir
from ._descriptors import _Slot
from ._fileops import reason

log = logging.getLogger("session_manager.store.fs")

# (session_id, log path, pinned slot, ticket): an fsync a thread still owes its caller.
_Owed = tuple[str, str, _Slot, int]


class _Scope:
    """``FsStore.mutation()`` in fsync mode: commits inside it owe their fsync
    to :meth:`GroupCommit.settle` (nested scopes count)."""

    __slots__ = ("_local",)

    def __init__(self, local: threading.local) -> None:
        self._local = local

    def __enter__(self) -> None:
        self._local.depth = getattr(self._local, "depth", 0) + 1

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._local.depth -= 1


class GroupCommit:
    """The fsync-mode half of the fs store's writes (its part; see the module)."""

    def __init__(self, data: DataDir) -> None:
        self._d = data
        self._owed = threading.local()
        self._scope = _Scope(self._owed)
        # Set by the first fsync-mode scope: from then on settle() looks for what is owed even
        # in flush mode (durability hot-reloads; a write owed before the switch is still synced).
        self._scoped = False

    def mutation(self, session_ids: Collection[str]) -> AbstractContextManager[None]:
        if self._d.durability != "fsync":  # (the property's field: read on every mutation)
            return NO_TRANSACTION
        self._scoped = True
        local = self._owed
        named: list[str] | None = getattr(local, "named", None)
        if named is None:
            named = local.named = []
        named.extend(session_ids)
        return self._scope

    def _sync_write(self, session_id: str, path: str, slot: _Slot, start: int, end: int) -> bool:
        """After a write in fsync mode (under the session's lock): sync it now,
        or, inside a mutation scope, owe it to :meth:`settle`. True: owed (the
        slot stays pinned until then)."""
        ticket = slot.sync.written(start, end)
        local = self._owed
        if getattr(local, "depth", 0) > 0:
            owed: list[_Owed] | None = getattr(local, "owed", None)
            if owed is None:
                owed = local.owed = []
            owed.append((session_id, path, slot, ticket))
            return True
        slot.sync.wait(slot.fd, ticket)
        return False

    def _failed_write(self, session_id: str, path: str, slot: _Slot) -> None:
        """A write or its fsync failed under the session's lock: if other
        writes on the descriptor are still owed an fsync that can no longer
        be trusted, undo them too (before any later write can follow them)."""
        if slot.sync.failed:
            self._undo_unsynced(session_id, path, slot)

    def settle(self) -> None:
        """Wait until every commit this thread made in a mutation scope is on
        disk; :class:`StoreError` if an fsync failed (those writes are undone)."""
        if not self._scoped:
            return  # nothing was ever owed (and a thread-local miss costs more than this)
        local = self._owed
        owed: list[_Owed] = getattr(local, "owed", None) or []
        named: list[str] = getattr(local, "named", None) or []
        if not owed and not named:
            return
        local.owed, local.named = [], []
        error: StoreError | None = None
        # (The usual call: it named one session and wrote it; nothing else to wait for.)
        if named and not (len(named) == 1 and owed and owed[0][0] == named[0]):
            # What the caller read of a session it did not write may be another thread's
            # unsynced write: it is answered only once that is durable (or failed and undone).
            wrote = {session_id for session_id, _, _, _ in owed}
            for session_id in named:
                path = None if session_id in wrote else self._d.files.known_log_path(session_id)
                if path is not None:  # (no files known: no write of it can be pending)
                    failed = self._sync_pending(session_id, path, self._d.fds.acquire_cached)
                    if failed is not None and error is None:
                        error = StoreError(f"fsync {os.path.basename(path)}: {reason(failed)}")
        for session_id, path, slot, ticket in owed:
            try:
                slot.sync.wait(slot.fd, ticket)
            except OSError as e:
                self._undo_unsynced(session_id, path, slot)
                error = error or StoreError(f"fsync {os.path.basename(path)}: {reason(e)}")
            finally:
                self._d.fds.release(path, slot)
        if error is not None:
            raise error

    def synced_before_rewrite(self, session_id: str) -> bool:
        """A compaction replaces the log with what memory holds: the writes
        still owed an fsync are made durable first, or undone (then no
        rewrite), so a snapshot never outlives a write reported failed."""
        if self._d.durability != "fsync":
            return True

        def acquire(path: str) -> _Slot | None:
            try:
                return self._d.fds.acquire(path, create=False)[0]
            except OSError:
                return None  # no log to replace

        return self._sync_pending(session_id, self._d.files.log_path(session_id), acquire) is None

    def _sync_pending(self, session_id: str, path: str, acquire: Callable[[str], _Slot | None]) -> OSError | None:
        """Make every write so far on the log's descriptor durable, or undo
        them (returning the failure)."""
        slot = acquire(path)
        if slot is None:
            return None  # no descriptor: nothing is owed (an owed write keeps its slot pinned)
        try:
            if slot.sync.pending:
                slot.sync.wait(slot.fd, slot.sync.last())
            elif slot.flushed and self._d.durability == "fsync":
                # Flush-mode bytes (no ticket) an fsync-mode answer is about to rest on: a ticket
                # of their own, starting at their end (a failed sync undoes none of them).
                end = slot.end if slot.end is not None else os.fstat(slot.fd).st_size
                slot.flushed = False
                try:
                    slot.sync.wait(slot.fd, slot.sync.written(end, end))
                except BaseException:
                    slot.flushed = True
                    raise
            return None
        except OSError as e:
            self._undo_unsynced(session_id, path, slot)
            return e
        finally:
            self._d.fds.release(path, slot)

    def _undo_unsynced(self, session_id: str, path: str, slot: _Slot) -> None:
        """Truncate the log back to what the descriptor's syncs made durable,
        forget the descriptor and the session's memory; once per failed sync."""
        sync = slot.sync
        state = self._cached_state_locked(session_id)
        try:
            if not sync.claim_undo() or not self._d.fds.holds(path, slot):
                # Another writer it failed did this already, or the log was deleted since.
                with self._d.lock:
                    if not state.loaded and self._d.sessions.get(session_id) is state:
                        self._d.sessions.pop(session_id, None)  # the placeholder taken below
                return
            slot.end = None
            try:
                if sync.durable_end >= 0:
                    os.ftruncate(slot.fd, sync.durable_end)
            except OSError as e:
                log.warning("cannot undo unsynced writes to %s: %s", os.path.basename(path), reason(e))
            self._d.fds.forget(path)
            self._d.files.forget(session_id)
            with self._d.lock:
                if self._d.sessions.get(session_id) is state:
                    self._d.sessions.pop(session_id, None)
                    self._d.detach(session_id, state)  # as an eviction: a reader may still hold it
                self._d.budgets.pop(session_id, None)
                # The next write inspects the tail first: the undone bytes may have begun with the
                # newline a valid unterminated last record was owed (or the truncation failed).
                self._d.tail_fix[session_id] = "check"
                catalog = self._d.metas is not None
        finally:
            state.lock.release()
        if catalog:
            self._recatalog(session_id)

    def _cached_state_locked(self, session_id: str) -> SessionState:
        """The session's cached state with its lock held; if none is cached (evicted while
        its write awaited the fsync), an unloaded placeholder: a reader loading the session
        meanwhile waits on its lock, so no state replayed from the bytes being undone is
        left in memory."""
        while True:
            with self._d.lock:
                state = self._d.sessions.get(session_id)
                if state is None:
                    state = self._d.sessions.setdefault(session_id, SessionState())
            state.lock.acquire()
            if self._d.sessions.get(session_id) is state:
                return state
            state.lock.release()  # replaced meanwhile: take the current one

    def _recatalog(self, session_id: str) -> None:
        """The catalog holds a meta that was undone: take the log's again."""
        while True:
            try:
                state = self._d.load(session_id, False)
            except StoreError as e:
                log.warning("session %s unreadable after undoing unsynced writes: %s", session_id, e)
                return
            # Under the session's lock, as a commit catalogs its meta: a commit made since the
            # replay must not have its newer meta overwritten by this one.
            with state.lock if state is not None else contextlib.nullcontext():
                if state is not None and self._d.sessions.get(session_id) is not state:
                    continue  # dropped meanwhile (evicted, deleted, undone again): read it afresh
                meta = state.meta if state is not None else None
                with self._d.lock:
                    self._d.catalogue(session_id, meta)
                return
