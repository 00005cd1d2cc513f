"""The sqlite adapter's transaction seam, as the postgres adapter's.

:meth:`SqliteTransactions.mutation` (entered by the service around one
mutation) opens ``BEGIN IMMEDIATE`` on the calling thread's connection: the
database's write lock, taken before the mutation reads, so its
read-check-write is serialized against every writer of every process (SQLite
has one writer at a time; ``busy_timeout_ms`` is how long a writer waits for
it). Inside ``run_call`` (:class:`..sql.transactions.CallRunner`) the commit
waits until the call's events are in the outbox, so writes and events commit
together.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from types import TracebackType

from ...errors import SessionError
from .core import SqliteDatastore

__all__ = ["SqliteTransactions"]


class Mutation:
    """One mutation's transaction, entered once: ``BEGIN IMMEDIATE`` (none when nested in
    another's, e.g. a fork's new session inside its source's); on the way out ROLLBACK
    after a failure, else COMMIT unless a call defers it (run_call commits with the
    call's events). A class, not a generator: it is entered by every mutation."""

    __slots__ = ("_conn", "_db")

    def __init__(self, db: SqliteDatastore) -> None:
        self._db = db
        self._conn: sqlite3.Connection | None = None

    def __enter__(self) -> None:
        if not self._db.local.state.in_tx:
            self._conn = self._db.begin()

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        if kind is not None:
            self._db.end(conn, commit=False)
        elif not self._db.local.deferring:
            self._db.end(conn, commit=True)


class SqliteTransactions:
    """One write transaction per mutation, on the calling thread's connection."""

    driver_error = sqlite3.Error

    def __init__(self, db: SqliteDatastore) -> None:
        self.db = db

    def mutation(self, session_ids: Collection[str]) -> AbstractContextManager[None]:
        """One mutation's transaction (the write lock first); committed here unless a call defers it."""
        del session_ids  # one writer at a time: the database's lock covers every session
        return Mutation(self.db)

    def in_tx(self, session_id: str, run: Callable[[sqlite3.Connection], None]) -> None:
        """``run`` in the open mutation's transaction, else in one of its own."""
        try:
            if self.db.local.state.in_tx:
                run(self.db.conn())
                return
            with self.mutation((session_id,)):
                run(self.db.conn())
        except sqlite3.Error as e:
            raise self.db.fail(e) from None

    # -- what the call runner needs (sql.transactions.Transactions) ----------------

    def open_tx(self) -> sqlite3.Connection | None:
        state = self.db.local.state
        return state.conn if state.in_tx else None

    def begin(self, session_ids: Collection[str] = ()) -> sqlite3.Connection:
        return self.db.begin()

    def end(self, tx: sqlite3.Connection, *, commit: bool) -> None:
        self.db.end(tx, commit=commit)

    def call_scope(self) -> None:
        return None  # no deadline around a call: busy_timeout_ms bounds the wait for the lock

    def storage_error(self, e: BaseException) -> SessionError:
        return self.db.storage_error(e)
