"""The one core every capability of the service runs over: its state, the
mutation entry point (:meth:`ServiceCore.mutating`), lookups and meta construction.

The capabilities are module-level functions taking a :class:`ServiceCore`
first (``appending.append(core, request)``); :class:`~.service.SessionService`
holds one core and forwards each function to them.

Mutations of one session are serialized by a per-session lock, so the
read-modify-write invariants (active leaf, message_count, revisions,
idempotent append) hold; reads take no lock. Ids and time come only from the
injected :class:`~session_manager.ids.IdGen` and :class:`~session_manager.clock.Clock`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .._wire import events as ev
from .._wire.models import SessionMeta
from .._wire.shape import build, edit
from ..clock import Clock, SystemClock
from ..errors import entry_not_found, not_found
from ..ids import IdGen, UuidIds
from ..store.base import NO_TRANSACTION, Commit, Entry, Meta, SessionStore, append_commit
from ..store.path import EntryPath
from .commit_order import CommitOrder
from .limits import LimitsCell
from .page_memo import PageMemo
from .stats import Stats
from .storage_errors import UNSHARED, locked_storage_errors

Result = tuple[Any, list[ev.Event]]
LOCK_STRIPES = 1024


def stripe(session_id: str) -> int:
    """The lock stripe of ``session_id``: its hash, as the locks are this process's
    own (a str keeps its hash, so this costs nothing after the first call)."""
    return hash(session_id) % LOCK_STRIPES


class ServiceCore:
    """State and plumbing every capability shares: the store, ids, clock,
    limits, and the per-session lock every mutation runs under. Nothing here
    knows a capability; the capability modules know only this."""

    def __init__(
        self,
        store: SessionStore,
        *,
        ids: IdGen | None = None,
        clock: Clock | None = None,
        limits: LimitsCell | None = None,
        stats: Stats | None = None,
    ) -> None:
        self.store = store
        self.stats = stats or Stats()  # cas_retries (see .contention)
        self.ids: IdGen = ids or UuidIds()
        self.clock: Clock = clock or SystemClock()
        self.limits = limits or LimitsCell()
        # Optional on duck-typed generators (see IdGen): without it the store picks.
        self._tx: Callable[[], str] | None = getattr(self.ids, "tx_id", None)
        # Striped, so the table stays this size however many ids callers name;
        # re-entrant, so a nested lock of two ids on one stripe cannot deadlock;
        # made on first use (1,024 locks cost ~0.2 ms, a share of a cold open).
        self._locks: list[threading.RLock | None] = [None] * LOCK_STRIPES
        self._locks_made = threading.Lock()
        # Per stripe, the entry point of a mutation the store runs outside any transaction
        # (the fs store in flush mode): it holds nothing per call, so one serves every call.
        self._plain: list[locked_storage_errors | None] = [None] * LOCK_STRIPES
        # messages-tail pages by request, each with the session version it was built from
        # (kept only over a store that names versions: see PageMemo).
        self.tail_pages = PageMemo()
        # The calls' events delivered in commit order (see .commit_order), for a store that
        # leaves that to the default run_and_deliver (fs, memory; sqlite and postgres order
        # their own with other processes'): None for those.
        self.order: CommitOrder | None = (
            CommitOrder() if getattr(type(store), "run_and_deliver", None) is SessionStore.run_and_deliver else None)
        # The store's wait for durability after a mutation; None for one with nothing to wait for
        # (SessionStore.settle's: postgres, sqlite), so a mutation does not call it. Looked up on
        # the store itself: one may give its own as an attribute (the fs store does).
        settle = store.settle
        self._settle: Callable[[], None] | None = (
            None if getattr(settle, "__func__", None) is SessionStore.settle else settle)

    # -- the mutation entry point ---------------------------------------------

    def session_lock(self, session_id: str) -> threading.RLock:
        """The lock that serializes mutations of one session (the store
        protocol takes it too, so raw writes never interleave with ours).
        One of :data:`LOCK_STRIPES` locks: a session always maps to the same one."""
        return self._stripe_lock(stripe(session_id))

    def stripe_lock(self, i: int) -> threading.RLock:
        """The lock of stripe ``i`` (:func:`stripe` of a session id): a call holding several
        sessions' locks takes them in stripe order."""
        return self._stripe_lock(i)

    def _stripe_lock(self, i: int) -> threading.RLock:
        lock = self._locks[i]
        if lock is None:
            with self._locks_made:  # two threads must never get two locks for one stripe
                lock = self._locks[i]
                if lock is None:
                    lock = self._locks[i] = threading.RLock()
        return lock

    def mutating(self, session_id: str) -> locked_storage_errors:
        """The one entry point of every mutation of ``session_id``: its
        read-check-write runs inside, under the session's lock, with store
        failures mapped once. A per-mutation storage transaction (the seam the
        provisional :class:`~session_manager.store.SessionStore` leaves for it)
        is entered here too, so no capability module needs to know of it."""
        # store.mutation: one transaction, serialized across processes too.
        store = self.store
        inner = store.mutation((session_id,))
        i = hash(session_id) % LOCK_STRIPES  # (stripe(), inline: this runs on every mutation)
        if inner is not NO_TRANSACTION:
            return locked_storage_errors(self._locks[i] or self._stripe_lock(i), inner, self._settle, self.order)
        plain = self._plain[i]
        if plain is None:  # two threads racing here build equal ones (on the one stripe lock)
            plain = self._plain[i] = locked_storage_errors(self._stripe_lock(i), inner, self._settle, self.order)
        return plain

    def mutating_new(self, session_id: str) -> locked_storage_errors:
        """:meth:`mutating` for an id this call just drew, which no other call can
        name yet: the store's transaction and failure mapping, without the lock.
        A fork takes it while a shared store's transaction may still hold its
        source's lock (postgres keeps it until the call's events are recorded):
        waiting there for the new id's stripe, held by a writer of the source
        that waits for that lock, would stall both until a timeout.

        A store without transactions (memory, fs) takes the id's lock all the same: a client may
        name the id itself (``session::ensure``) and nothing else keeps that call from creating
        it between the fork's check that it is free and the copy of the path's attachments into
        it (review 21). Nothing holds a source's lock there once its block ended."""
        store = self.store
        inner = store.mutation((session_id,))
        if inner is NO_TRANSACTION:
            return self.mutating(session_id)
        return locked_storage_errors(UNSHARED, inner, self._settle, self.order)

    def commit(self, session_id: str, *, entries: tuple[Entry, ...] = (), leaf: str | None = None,
               meta: Meta | None = None, **decided_on: Any) -> Commit:
        """Write one mutation (inside :meth:`mutating`); ``decided_on`` are the
        compare-and-set fields of :class:`Commit` (``expect_meta``, ``append`` ...).
        Returns the commit as the store applied it. A function that commits is
        wrapped in :func:`.contention.retry_conflicts`."""
        return self.store.commit(session_id, Commit(entries=entries, leaf=leaf, meta=meta, tx=self._tx,
                                                    **decided_on))

    def commit_append(self, session_id: str, meta: Meta, entries: tuple[Entry, ...], *, chain: bool,
                      data_json: bytes | None = None, checked: bool = False) -> Commit:
        """Append new entries; the store derives the meta from its own (and,
        with ``chain``, parents the first entry on its current leaf), so
        concurrent appends neither fork the session nor lose a count.
        ``data_json``: the one entry's data as JSON, when encoded already
        (:class:`~session_manager.store.base.Commit`). ``checked``: only while the session's meta
        is still ``meta`` (every append changes it): a store of several writers conflicts otherwise."""
        if checked:
            return self.store.commit(session_id, append_commit(meta, entries, chain=chain, tx=self._tx,
                                                               data_json=data_json, expect_meta=meta))
        return self.store.commit(session_id, append_commit(meta, entries, chain=chain, tx=self._tx,
                                                           data_json=data_json))

    # -- lookups ----------------------------------------------------------------

    def meta_or_raise(self, session_id: str) -> Meta:
        """The session's stored meta; ``session/not_found`` when there is none."""
        meta = self.store.get_meta(session_id)
        if meta is None:
            raise not_found(session_id)
        return meta

    def still_there(self, session_id: str) -> None:
        """An empty answer is only given for a session that exists: one deleted while the
        call read it (its meta seen, then its entries cleared) is ``not_found``."""
        self.meta_or_raise(session_id)

    def entry_or_raise(self, session_id: str, entry_id: str) -> Entry:
        """One stored entry; ``not_found`` for a gone session, else ``entry_not_found``."""
        entry = self.store.entry_held(session_id, entry_id)
        if entry is None:
            self.still_there(session_id)  # deleted since the caller saw its meta: not_found
            raise entry_not_found(session_id, entry_id)
        return entry

    def page_size(self, requested: int | None) -> int:
        """A requested page size clamped by the live limits."""
        return self.limits.get().clamp(requested)

    def path(self, session_id: str, leaf: str | None) -> EntryPath:
        """The root-to-``leaf`` path of the session, as the store hands it out."""
        return self.store.path(session_id, leaf)


def new_meta(
    session_id: str,
    title: str,
    description: str,
    metadata: dict[str, Any] | None,
    now: int,
    *,
    forked_from: str | None = None,
    message_count: int = 0,
) -> Meta:
    """A new session's meta (status idle)."""
    return build[SessionMeta](session_id=session_id, title=title, description=description, status="idle",
                              metadata=metadata, forked_from=forked_from, created_at=now, updated_at=now,
                              message_count=message_count)


# ``changed(meta, **changes)``: a copy of a stored meta with changes applied
# (key order kept; ``None`` removes a key).
changed = edit[SessionMeta]
