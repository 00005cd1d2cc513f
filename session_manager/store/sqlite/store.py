"""The sqlite adapter: any number of processes and threads over one file.

Values are stored as their exact JSON text (the fs store's encoder, as in
the postgres adapter), so big integers round-trip exactly and NaN never
gets in. :class:`SqliteStore` is a facade over its parts, each handed the
datastore (:mod:`.core`: connections, failure mapping, opening checks):
:mod:`.transactions` (one ``BEGIN IMMEDIATE`` transaction per mutation),
the call runner (:mod:`..sql.transactions`: a call's events committed with
it), :mod:`.reads`, :mod:`.writes`, and :mod:`.outbox` (events across
processes).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Hashable, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from ..._wire.events import Event
from ...errors import Conflict, ReadOnlyStore
from ..base import Commit, Entry, EventSink, Meta
from ..search_index import Matches, Ranked, SortKey, Stats
from ..search_text import Query
from ..sql.keys import key
from ..sql.store import SqlStore
from ..sql.transactions import CallRunner
from . import search
from .core import SqliteDatastore
from .outbox import Outbox
from .reads import SqliteReads
from .settings import Durability, SqliteSettings
from .transactions import Mutation, SqliteTransactions
from .writes import SqliteWrites

__all__ = ["SqliteSettings", "SqliteStore"]

_T = TypeVar("_T")
_R = TypeVar("_R")

# A session stored under the key (a deleted one's row may stay, its meta NULL).
_LIVE = "SELECT 1 FROM sessions WHERE session_id = ? AND meta IS NOT NULL"

class SqliteStore(SqlStore):
    """Sessions, entries and attachments in one SQLite database file (WAL mode)."""

    private_paths = True  # each window decoded for its read alone (path.py)
    db: SqliteDatastore
    reads: SqliteReads
    writes: SqliteWrites
    outbox: Outbox

    def __init__(self, settings: SqliteSettings) -> None:
        self.db = SqliteDatastore(settings)  # opens (and checks) the file
        self.settings = settings
        self.read_only = settings.read_only  # every mutation refused (SqlStore.writable)
        self.txs = SqliteTransactions(self.db)
        self.reads = SqliteReads(self.db)
        self.writes = SqliteWrites(self.db, self.txs, self.reads)
        self.outbox = Outbox(self.db, self.reads)
        self.calls: CallRunner[sqlite3.Connection] = CallRunner(self.txs, self.outbox, self.db.local)
        self.calls_part, self.session_reads, self.session_writes = self.calls, self.reads, self.writes
        # The append's read, straight to its part (SqlStore relays it: a Python call more per append).
        self.meta_and_leaf_to_commit = self.reads.meta_and_leaf_to_commit  # type: ignore[method-assign]

    def created_and_leaf(self, session_id: str) -> tuple[Any, str | None] | None:
        """From two columns (:meth:`.reads.SqliteReads.created_and_leaf`)."""
        return self.reads.created_and_leaf(session_id)

    def session_token(self, session_id: str, known: Hashable | None = None
                      ) -> tuple[Any, str | None, Hashable | None] | None:
        """From three columns, the version the row's ``rev`` (:meth:`.reads.SqliteReads.session_token`)."""
        return self.reads.session_token(session_id)

    def version_after(self, version: Hashable | None, commits: int) -> Hashable | None:
        """``rev`` is one more with every commit of the session (writes.py, every commit upserts
        the row once); it starts at random within +-2**61 (schema.py, version 8): no overflow."""
        return version + commits if type(version) is int else None

    def meta_and_leaf_since(self, session_id: str, version: Hashable | None
                            ) -> tuple[Meta | None, str | None, Hashable | None]:
        """With the session's version (:meth:`.reads.SqliteReads.meta_and_leaf_since`)."""
        return self.reads.meta_and_leaf_since(session_id, version)

    def leaf_since(self, session_id: str, version: Hashable | None) -> tuple[bool, str | None, Hashable | None]:
        """:meth:`meta_and_leaf_since`'s statement, the meta's text not decoded."""
        text, leaf, now = self.reads.text_and_leaf_since(session_id)
        return text is not None, leaf, now

    # The append's hot seams, each straight to its part (SqlStore's route passes through the
    # call runner and the transactions: two or three Python calls more per append).

    def mutation(self, session_ids: Collection[str]) -> AbstractContextManager[None]:
        if self.read_only:
            raise ReadOnlyStore()
        return Mutation(self.db)

    def run_call(self, call: Callable[[], tuple[_R, list[Event]]]) -> tuple[_R, list[Event]]:
        # CallRunner.run_call, without the relays: sqlite has no call scope.
        calls = self.calls
        if calls.local.deferring:  # re-entrant: the outer call commits
            return call()
        return calls.run_deferred(call)

    def run_and_deliver(self, call: Callable[[], tuple[_R, list[Event]]],
                        deliver: EventSink | None) -> tuple[_R, list[Event]]:
        """The call's events handed to ``deliver`` by the outbox, in commit order with
        other processes' (:meth:`.outbox.Outbox.committed`)."""
        calls = self.calls
        if calls.local.deferring:  # re-entrant: the outer call commits; these go as they come
            response, events = call()
            if events and deliver is not None:
                deliver(events)
            return response, events
        return calls.run_deferred(call, deliver)

    def commit(self, session_id: str, commit: Commit) -> Commit:
        if self.db.local.state.in_tx:  # inside a mutation (its begin refused a read-only store)
            # Decided in this transaction, which holds the write lock: written as it is. Except a
            # new session's (expect_meta None: a create, a fork), decided on no read of it: a
            # drawn id already stored (a repeating generator; another instance's create or fork
            # first) is a conflict (drawn again), not a meta written over that session's
            # (review 21). One probe, for new sessions alone.
            if commit.expect_meta is None and self.db.rows(_LIVE, (key(session_id),)):
                raise Conflict("the session already exists")
            self.writes.write(session_id, commit)
            return commit
        return super().commit(session_id, commit)

    @property
    def durability(self) -> Durability:
        """``flush`` (``synchronous=NORMAL``) or ``fsync`` (``FULL``); settable
        (a worker's reload): each connection takes it before its next write."""
        return self.db.durability

    @durability.setter
    def durability(self, value: Durability) -> None:
        self.db.durability = value

    def observing(self) -> None:
        """An observer was added: a read-only store's changes are events from now on (:mod:`.watch`)."""
        self.outbox.observing()

    def integrity_check(self) -> list[str]:
        """What ``PRAGMA integrity_check`` finds wrong (empty: the file is sound)."""
        return self.reads.integrity_check()

    def sessions_without_meta(self) -> list[str]:
        """Sessions holding entries but no meta (the contract allows it mid-way; fsck reports it)."""
        return self.reads.sessions_without_meta()

    def search(self, query: Query, sessions: Collection[str] | None,
               roles: Collection[str] | None) -> Matches:
        """From the FTS5 index (:mod:`.search`), caught up first, in one snapshot
        (read-only: not caught up, what it lacks read and matched in the snapshot)."""
        if self.db.read_only:
            return self._in_snapshot(lambda conn: search.search_pending(conn, query, sessions, roles))
        return self._in_snapshot(lambda conn: search.search(conn, query, sessions, roles))

    def search_page(self, query: Query, sessions: Collection[str] | None, roles: Collection[str] | None,
                    limit: int, after: SortKey | None, stats: Stats | None = None) -> Ranked:
        """Ranked inside the FTS5 index (:func:`.search.page`), caught up first, in one snapshot
        (read-only: the index is not caught up, so every candidate of :meth:`search` is ranked)."""
        if self.db.read_only:
            return super().search_page(query, sessions, roles, limit, after, stats)
        return self._in_snapshot(lambda conn: search.page(conn, query, sessions, roles, limit, after, stats))

    def entries_on_active_path(self, session_id: str, entry_ids: Sequence[str]) -> list[tuple[Entry | None, bool]]:
        """One statement per hit (:meth:`.reads.SqliteReads.entries_on_active_path`)."""
        return self.reads.entries_on_active_path(session_id, entry_ids)

    def _in_snapshot(self, read: Callable[[sqlite3.Connection], _T]) -> _T:
        """``read`` in one read snapshot (a deferred transaction: no lock), the index caught
        up first unless the store is read-only."""
        if self.db.local.state.in_tx:  # the mutation's transaction holds the write lock: catch up in it
            conn = self.db.conn()
            while search.catch_up(conn):
                pass
            return read(conn)
        if not self.db.read_only:
            self._catch_up()
        conn = self.db.conn()
        try:
            conn.execute("BEGIN")  # deferred: a read snapshot, no lock
            try:
                return read(conn)
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as e:
            raise self.db.fail(e) from None

    def _catch_up(self) -> None:
        """Index what was written since the last search: short write transactions, each
        re-reading the mark (another process may have caught up meanwhile)."""
        conn = self.db.conn()
        try:
            if not search.behind(conn):
                return  # nothing written since: no write lock taken
            since = search.mark(conn)
        except sqlite3.Error as e:
            raise self.db.fail(e) from None
        more = True
        while more:
            more = self._write(search.catch_up)
        try:
            grown = search.grown(self.db.conn(), since)
        except sqlite3.Error as e:
            raise self.db.fail(e) from None
        if grown:  # a large catch-up left many FTS segments, and a query probes each: one again
            self._write(search.merge)

    def _write(self, step: Callable[[sqlite3.Connection], _T]) -> _T:
        """``step`` in a write transaction of its own."""
        conn = self.db.begin()
        try:
            out = step(conn)
        except sqlite3.Error as e:
            self.db.end(conn, commit=False)
            raise self.db.fail(e) from None
        except BaseException:
            self.db.end(conn, commit=False)
            raise
        self.db.end(conn, commit=True)
        return out
