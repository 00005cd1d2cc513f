"""The postgres adapter: any number of instances over one database.

Values are stored as their exact JSON text (the same encoder as the fs
store's lines), so they round-trip byte for byte; the only jsonb column is a
derived copy of the session metadata that serves list filters.

:class:`PostgresStore` is a facade over its parts, each handed the datastore
(:mod:`.core`: settings, pool, deadline, failure mapping):
:mod:`.transactions` (one transaction per mutation, under advisory locks),
the call runner (:mod:`..sql.transactions`: a call's events committed with
it), :mod:`.reads` (the queries), :mod:`.writes` (commits, deletions,
attachments), :mod:`.outbox` (events across instances), and
:mod:`.optimistic` (a call in one round trip when what this instance knows
of the session still holds), which serves the mutations and the reads they
make.

Reads outside a mutation run in autocommit on a pooled connection. Every
database failure becomes a :class:`StoreError` (``session/storage``) with the
password masked; a broken connection is discarded by the pool, so the next
call reconnects by itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Hashable, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import Any, TypeVar

from ..._wire.events import Event
from ...errors import ReadOnlyStore
from ..base import Commit, Entry, EventSink, Meta
from ..search_index import Matches, Ranked, SortKey, Stats
from ..search_text import Query
from ..sql.keys import key_or_none
from ..sql.store import SqlStore
from ..sql.transactions import CallRunner
from . import search
from .core import PgDatastore, Tx
from .optimistic import Optimistic, _Mutation
from .outbox import Outbox
from .reads import PgReads
from .settings import PostgresSettings
from .transactions import PgTransactions
from .writes import PgWrites

__all__ = ["PostgresSettings", "PostgresStore"]

R = TypeVar("R")

class PostgresStore(SqlStore):
    """Sessions, entries and attachments in one PostgreSQL schema."""

    db: PgDatastore
    reads: PgReads
    fresh_reads = True  # every read decodes the rows it fetched (the optimistic part's knowledge serves mutations only)
    writes: PgWrites
    outbox: Outbox

    def __init__(self, settings: PostgresSettings) -> None:
        self.db = PgDatastore(settings)  # checks the schema, migrates it, opens the pool
        self.settings = settings
        self.read_only = settings.read_only  # every mutation refused (SqlStore.writable)
        self.txs = PgTransactions(self.db)
        self.reads = PgReads(self.db)
        self.outbox = Outbox(self.db, settings.outbox_retention_s, self.reads)
        self.calls: CallRunner[Tx] = CallRunner(self.txs, self.outbox, self.db.local)
        self.writes = PgWrites(self.db, front=self)
        self.optimistic = Optimistic(self.db, self.txs, self.calls, self.reads, self.writes, self.outbox)
        # A mutation, the reads it makes and its commit: tried optimistically first.
        self.calls_part = self.session_reads = self.session_writes = self.optimistic
        # The seams every append passes (below), bound straight to the optimistic part: a hop
        # fewer each (a read-only store keeps the facade's, which refuses every mutation).
        self.meta_and_leaf_to_commit = self.optimistic.meta_and_leaf_to_commit  # type: ignore[method-assign]
        if not self.read_only:
            self.mutation = partial(_Mutation, self.optimistic)  # type: ignore[method-assign]
            self.commit = self.optimistic.commit  # type: ignore[method-assign]

    def run_and_deliver(self, call: Callable[[], tuple[R, list[Event]]],
                        deliver: EventSink | None) -> tuple[R, list[Event]]:
        """The call's events handed to ``deliver`` in commit order with other instances'
        (issue 23): noted in flight before anything is sent, the call waits for the
        listener to reach its own notification (every event committed before it handed
        on) and delivers while the listener holds back what was committed after it
        (:meth:`.outbox.Outbox.begin_call`). Nobody observing here: nothing of this; its
        events are recorded as nobody's here (``Outbox.unheard``), for the listener to hand on
        once it hears them (to an observer added meanwhile)."""
        local = self.db.local
        state = local.state
        turn = None
        outer = not local.deferring and state.tx is None  # (else part of a call that is running)
        if outer and self.outbox._thread is not None:  # (unobserved: free; nothing listens: begin_call's None)
            turn = self.outbox.begin_call(free=deliver is None)
        if turn is None:  # (SessionStore.run_and_deliver, straight to the part that runs calls)
            if deliver is not None or not outer:
                response, events = (self.optimistic.run_outer(call, state) if outer
                                    else self.optimistic.run_call(call))
                if events and deliver is not None:
                    deliver(events)
                return response, events
            state.sender = self.outbox.unheard  # (its events handed on by a listener that hears them)
            try:
                return self.optimistic.run_outer(call, state)
            finally:
                state.sender = None
        outbox = self.outbox
        try:
            # (its rows and notification name the call, or say nobody here had it: see Outbox.begin_call)
            state.sender = turn.sender if deliver is not None else outbox.unheard
            try:
                response, events = self.run_call(call)
            finally:
                state.sender = None
            if events:
                outbox.await_turn(turn, events)
                if deliver is not None:
                    outbox.queue_own(deliver, events)  # its place in the order, before the listener goes on
        finally:
            outbox.end_call(turn)
        if deliver is not None:
            outbox.drain()
        return response, events

    # -- the seams every append passes, without the facade's second hop ----------------

    def run_call(self, call: Callable[[], tuple[R, list[Event]]]) -> tuple[R, list[Event]]:
        return self.optimistic.run_call(call)

    def mutation(self, session_ids: Collection[str]) -> AbstractContextManager[None]:
        if self.read_only:
            raise ReadOnlyStore()
        return self.optimistic.mutation(session_ids)

    def meta_and_leaf_to_commit(self, session_id: str) -> tuple[Meta | None, str | None]:
        return self.optimistic.meta_and_leaf_to_commit(session_id)

    def commit(self, session_id: str, commit: Commit) -> Commit:
        if self.read_only:
            raise ReadOnlyStore()
        return self.optimistic.commit(session_id, commit)

    # -- what only this adapter has --------------------------------------------------

    def forget(self, session_id: str) -> None:
        """Drop what this instance remembers of a session (it was written some other way)."""
        self.optimistic.forget(session_id)

    def meta_and_leaf_from_root(self, session_id: str) -> tuple[Meta | None, str | None]:
        return self.reads.meta_and_leaf_from_root(session_id)

    def version_left(self, session_id: str, version: Hashable, leaf: str) -> Hashable | None:
        """What this instance's last commit of the session left (``Known.version``: its row's
        ``xmin`` from the commit's answer, leaf and meta text), when it wrote ``leaf`` and checked
        the session was at exactly ``version`` (``Known.since``: plain.LINKED's compare-and-set and
        migration 14's sm_apply compare the row's ``xmin``, leaf and meta text). Any other route
        (sm_append_at, plain.APPEND, sm_apply without a known xmin, the transactional path) names
        none: ``None``."""
        known = self.optimistic._remembered(session_id)
        if known is None or known.since is None or known.version is None or known.since != version \
                or known.leaf != leaf or known.version[1] != key_or_none(leaf):
            return None
        return known.version

    def meta_and_leaf_since(self, session_id: str, version: Hashable | None
                            ) -> tuple[Meta | None, str | None, Hashable | None]:
        """With the session row's version (:meth:`.reads.PgReads.meta_and_leaf_since`);
        none inside a mutation (what its transaction sees may yet roll back)."""
        if self.db.local.state.tx is not None:
            return super().meta_and_leaf_since(session_id, version)
        return self.reads.meta_and_leaf_since(session_id, version)

    def leaf_since(self, session_id: str, version: Hashable | None) -> tuple[bool, str | None, Hashable | None]:
        """:meth:`meta_and_leaf_since`'s read with the meta's text not decoded (whether the
        session is there is all a tail needs of it)."""
        if self.db.local.state.tx is not None:
            return super().leaf_since(session_id, version)
        text, leaf, now = self.reads.text_and_leaf_since(session_id, version)
        return text is not None, leaf, now

    def run_read(self, handler: Callable[[Any, Any], tuple[R, list[Event]]], service: Any, request: Any) -> R:
        """``handler(service, request)``'s answer, for a call that only reads (the host's pure
        reads: it enters no mutation and has no events), outside any other call: what
        :meth:`run_and_deliver` does for it, in one call. The call's deadline set as
        :meth:`.optimistic.Optimistic.run_outer` sets it (and the window read for the call
        dropped after); no outbox turn (nothing to deliver) and no optimistic attempt (no
        plan: its reads are the database's either way). Inside another call (the thread
        defers, holds a transaction or has a deadline): :meth:`run_and_deliver`."""
        local = self.db.local
        state = local.state
        if state.deadline is not None or state.tx is not None or local.deferring:
            return self.run_and_deliver(partial(handler, service, request), None)[0]
        state.deadline = time.monotonic() + self.db.settings.timeout_ms / 1000
        try:
            return handler(service, request)[0]
        finally:
            state.deadline = None
            state.window = None  # read for this call only

    def search(self, query: Query, sessions: Collection[str] | None,
               roles: Collection[str] | None) -> Matches:
        """From the search index (:mod:`.search`), brought up to date first (read-only:
        not brought up to date, its queue read and matched in one snapshot)."""
        if self.read_only:
            with self.db.conn() as conn, conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # one snapshot
                return search.search(conn, query, sessions, roles, queued=search.pending(conn))
        if self.db.local.state.tx is not None:
            # (inside a mutation: what it wrote is not queued for others yet; read what is stored)
            return super().search(query, sessions, roles)
        with self.db.conn() as conn:
            return search.search(conn, query, sessions, roles)

    def entries_on_active_path(self, session_id: str, entry_ids: Sequence[str]) -> list[tuple[Entry | None, bool]]:
        """One statement for the session's hits (:meth:`.reads.PgReads.entries_on_active_path`);
        inside a mutation, what it has read of the session is used (the default)."""
        if self.db.local.state.tx is not None:
            return super().entries_on_active_path(session_id, entry_ids)
        return self.reads.entries_on_active_path(session_id, entry_ids)

    def hits_on_active_paths(self, hits: Sequence[tuple[str, str]]) -> list[tuple[Entry | None, bool]]:
        """Every session of the page in one statement (:meth:`.reads.PgReads.hits_on_active_paths`)."""
        if self.db.local.state.tx is not None:
            return super().hits_on_active_paths(hits)
        return self.reads.hits_on_active_paths(hits)

    def search_page(self, query: Query, sessions: Collection[str] | None, roles: Collection[str] | None,
                    limit: int, after: SortKey | None, stats: Stats | None = None) -> Ranked:
        """Ranked by PostgreSQL (:func:`.search.page`: one round trip when the queue is empty,
        every session's page one call of the server-side ``sm_search_page``);
        read-only or inside a mutation, every candidate of :meth:`search` is ranked here."""
        if self.read_only or self.db.local.state.tx is not None:
            return super().search_page(query, sessions, roles, limit, after, stats)
        with self.db.conn() as conn:
            return search.page(conn, query, sessions, roles, limit, after, stats)

    def search_page_shown(self, query: Query, sessions: Collection[str] | None, roles: Collection[str] | None,
                          limit: int, after: SortKey | None, shown: int,
                          stats: Stats | None = None) -> tuple[Ranked, list[tuple[Entry | None, bool]]]:
        """Every session's page with the entries and active-path flags of its shown hits in
        one call of ``sm_search_page`` (:func:`.search.page_shown`); a hit it did not return
        (a tie ordered otherwise there, a scope) is read by :meth:`hits_on_active_paths`."""
        if self.read_only or self.db.local.state.tx is not None:
            return super().search_page_shown(query, sessions, roles, limit, after, shown, stats)
        with self.db.conn() as conn:
            ranked, found = search.page_shown(conn, query, sessions, roles, limit, after, shown, stats)
        hits = [(c.session_id, c.entry_id) for _, c in ranked[:shown]]
        missing = [h for h in hits if h not in found]
        got: dict[tuple[str, str], tuple[Entry | None, bool]] = dict(found)
        if missing:
            got.update(zip(missing, self.reads.hits_on_active_paths(missing), strict=True))
        return ranked, [got[h] for h in hits]
