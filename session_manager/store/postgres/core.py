"""What every part of the postgres adapter shares: the settings, the pool,
the connection a mutation has bound to the calling thread, and the mapping
of database failures to :class:`StoreError` (password masked)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from ...errors import STORAGE, SessionError, StoreError, Unavailable
from ..base import SessionStore
from . import schema
from .secrets import redact, safe_dsn
from .settings import PostgresSettings


@dataclass
class Tx:
    """One mutation's transaction: its connection and the sessions it has locked."""

    conn: psycopg.Connection[Any]
    locked: set[str] = field(default_factory=set)


class _Local(threading.local):
    tx: Tx | None = None
    deferring: bool = False


class PgCore(SessionStore):
    """The adapter's shared state and plumbing (its capabilities subclass it)."""

    shared = True

    def __init__(self, settings: PostgresSettings) -> None:
        self.settings = settings
        self.instance = uuid.uuid4().hex
        self._local = _Local()
        self._closed = False
        problem = schema.name_problem(settings.schema)
        if problem is not None:
            raise StoreError(f"postgres: {problem}")
        try:
            conninfo = settings.conninfo()
            self._conninfo = conninfo
            with psycopg.connect(conninfo, autocommit=True) as conn:
                schema.migrate(conn, settings.schema)
        except psycopg.Error as e:
            raise StoreError(self._say(f"cannot open the database {safe_dsn(settings.dsn)}: {e}")) from None
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=max(1, settings.pool_size),
            kwargs={"autocommit": True},
            timeout=settings.pool_timeout_ms / 1000,
            reconnect_timeout=10.0**9,  # keep trying: the server may come back at any time
            name="session-manager",
            open=False,
        )
        self._pool.open(wait=False)
        from .outbox import Outbox  # the outbox needs a built store

        self.outbox = Outbox(self, settings.outbox_retention_s)

    def _say(self, text: str) -> str:
        return redact(text, self.settings.dsn)

    def _fail(self, e: BaseException) -> StoreError:
        # OperationalError: the server is unreachable, went away, or no
        # connection freed up in time (PoolTimeout): retrying may succeed.
        kind = Unavailable if isinstance(e, psycopg.OperationalError) else StoreError
        return kind(self._say(f"postgres: {type(e).__name__}: {e}".strip()))

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        """The mutation's connection on this thread, else a pooled autocommit one."""
        tx = self._local.tx
        if tx is not None:
            try:
                yield tx.conn
            except psycopg.Error as e:
                raise self._fail(e) from None
            return
        if self._closed:
            raise StoreError("postgres: the store is closed")
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.Error as e:
            raise self._fail(e) from None

    def _rows(self, query: str | sql.Composed, params: Any = None) -> list[tuple[Any, ...]]:
        if self._local.tx is not None or self._closed:
            with self._conn() as conn:
                return conn.execute(query, params).fetchall()
        for attempt in (1, 2):
            used: psycopg.Connection[Any] | None = None
            try:
                with self._pool.connection() as conn:
                    used = conn
                    return conn.execute(query, params).fetchall()
            except psycopg.Error as e:
                if attempt == 1 and used is not None and self._stale(used):
                    continue  # a read: run it again on a live connection
                raise self._fail(e) from None
        raise AssertionError("unreachable")

    def _stale(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether a statement failed because ``conn`` was lost (the server ended
        it, or it went away, while it sat idle in the pool). Then every idle
        connection is checked, so the pool drops those lost with it (a restart
        or failover ends them all) and the retry gets a live one, instead of
        the next pool_size calls failing one by one on the dead ones."""
        if not conn.broken:
            return False
        self._pool.check()
        return True

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.outbox.close()
        self._pool.close(timeout=5.0)

    def storage_error(self, e: BaseException) -> SessionError:
        """A lazy read's failure, as callers see it (it happens outside the service's mapping)."""
        return SessionError(STORAGE, str(self._fail(e)) if isinstance(e, psycopg.Error) else str(e))
