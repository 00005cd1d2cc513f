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
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from ...errors import SessionError
from .core import SqliteDatastore

__all__ = ["SqliteTransactions"]


class SqliteTransactions:
    """One write transaction per mutation, on the calling thread's connection."""

    driver_error = sqlite3.Error

    def __init__(self, db: SqliteDatastore) -> None:
        self.db = db

    @contextmanager
    def mutation(self, session_ids: Collection[str]) -> Iterator[None]:
        """One mutation's transaction (the write lock first); committed here unless a call defers it."""
        del session_ids  # one writer at a time: the database's lock covers every session
        if self.db.local.in_tx:  # nested (fork's new session inside the source's): one transaction
            yield
            return
        conn = self.db.begin()
        try:
            yield
        except BaseException:
            self.db.end(conn, commit=False)
            raise
        if self.db.local.deferring:
            return  # run_call commits with the call's events
        self.db.end(conn, commit=True)

    def in_tx(self, session_id: str, run: Callable[[sqlite3.Connection], None]) -> None:
        """``run`` in the open mutation's transaction, else in one of its own."""
        try:
            if self.db.local.in_tx:
                run(self.db.conn())
                return
            with self.mutation((session_id,)):
                run(self.db.conn())
        except sqlite3.Error as e:
            raise self.db.fail(e) from None

    # -- what the call runner needs (sql.transactions.Transactions) ----------------

    def open_tx(self) -> sqlite3.Connection | None:
        return self.db.conn() if self.db.local.in_tx else None

    def begin(self, session_ids: Collection[str] = ()) -> sqlite3.Connection:
        return self.db.begin()

    def end(self, tx: sqlite3.Connection, *, commit: bool) -> None:
        self.db.end(tx, commit=commit)

    def call_scope(self) -> AbstractContextManager[None]:
        return nullcontext()

    def storage_error(self, e: BaseException) -> SessionError:
        return self.db.storage_error(e)
