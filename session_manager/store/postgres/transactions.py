"""The postgres adapter's transaction seam.

:meth:`PgTransactions.mutation` (entered by the service around one mutation)
takes a pooled connection, opens a transaction and takes a
transaction-scoped advisory lock per session, then binds the connection to
the calling thread: every store call the mutation makes (its reads, checks
and its commit) runs in that transaction, serialized against every other
process on the same schema. Inside ``run_call`` (:class:`..sql.transactions.CallRunner`)
the commit waits until the call's events are in the outbox, so writes and
events commit together.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Collection, Iterator
from contextlib import AbstractContextManager, contextmanager

import psycopg

from ...errors import SessionError
from ..sql.keys import key
from .core import PgDatastore, Tx
from .in_doubt import settle

__all__ = ["PgTransactions", "lock_key_sql"]

log = logging.getLogger("session_manager.store.postgres")


def lock_key_sql() -> str:
    """The advisory-lock key of one session (per schema, so schemas never contend)."""
    return "hashtextextended(current_schema() || ':' || %s, 0)"


class PgTransactions:
    """One transaction per mutation, holding its sessions' advisory locks."""

    driver_error = psycopg.Error

    def __init__(self, db: PgDatastore) -> None:
        self.db = db

    @contextmanager
    def mutation(self, session_ids: Collection[str]) -> Iterator[None]:
        """One mutation's transaction, bound to this thread; committed here unless a call defers it."""
        local = self.db.local
        state = local.state
        tx = state.tx
        if tx is not None:  # nested (fork locks its new session inside the source's)
            tx.shared = True  # (its conflict does not end the transaction: see Tx.shared)
            self.lock(tx, session_ids)
            yield
            return
        with self.db.deadline():  # outside run_call, the mutation is the call
            tx = self.begin(session_ids)
            try:
                state.tx = tx
                yield
            except BaseException:
                self.end(tx, commit=False)
                raise
            if local.deferring:
                return  # run_call commits with the call's events
            self.end(tx, commit=True)

    def begin(self, session_ids: Collection[str] = ()) -> Tx:
        """A pooled connection in a fresh transaction holding the sessions' locks."""
        db = self.db
        deadline = db.deadline_at()
        for attempt in (1, 2):
            conn = db.getconn(deadline)
            tx = Tx(conn, pid=conn.info.backend_pid)
            try:
                ids = sorted(set(session_ids))
                with conn.pipeline():  # BEGIN, the transaction's id, the locks, the sessions: one round trip
                    conn.execute("BEGIN")
                    xid = conn.execute("SELECT txid_current()")
                    self.lock(tx, session_ids)
                    rows = conn.execute("SELECT session_id, meta, leaf FROM sessions WHERE session_id = ANY(%s)",
                                        ([key(i) for i in ids],))
                row = xid.fetchone()
                tx.xid = int(row[0]) if row else None
                found = {sid: (meta, leaf) for sid, meta, leaf in rows.fetchall()}
                tx.seen = {i: found.get(key(i), (None, None)) for i in ids}
            except BaseException as e:
                with contextlib.suppress(psycopg.Error):
                    if not conn.closed:
                        conn.execute("ROLLBACK")
                failure = db.fail(e) if isinstance(e, psycopg.Error) else None
                db.putconn(conn)
                armed = db.local.state.armed
                if attempt == 1 and not (armed is not None and armed.fired) and db.stale(conn):
                    continue  # nothing ran: begin again on a live connection
                if failure is not None:
                    raise failure from None
                raise
            return tx
        raise AssertionError("unreachable")

    def lock(self, tx: Tx, session_ids: Collection[str]) -> None:
        """Take the sessions' advisory locks ``tx`` does not hold yet."""
        # Sorted, so two mutations taking several locks never deadlock.
        for sid in sorted(set(session_ids) - tx.locked):
            try:
                tx.conn.execute(f"SELECT pg_advisory_xact_lock({lock_key_sql()})", (key(sid),))
            except psycopg.Error as e:
                raise self.db.fail(e) from None
            tx.locked.add(sid)

    def end(self, tx: Tx, *, commit: bool) -> None:
        """COMMIT (or ROLLBACK) and give the connection back. A COMMIT whose
        answer was lost with its connection is settled before this returns
        (:mod:`.in_doubt`): committed returns as applied, else the failure."""
        db = self.db
        state = db.local.state
        state.tx = None
        deadline = state.deadline
        if commit and deadline is not None and time.monotonic() >= deadline:
            # Past the call's deadline the watchdog ends the connection when its thread next runs
            # (later on a loaded machine); the rule must not depend on that race: never committed.
            self.end(tx, commit=False)
            raise db.late("no COMMIT")
        try:
            tx.conn.execute("COMMIT" if commit else "ROLLBACK")
        except psycopg.Error as e:
            failure = db.fail(e)
            lost = tx.conn.broken or tx.conn.closed
            db.putconn(tx.conn)
            if not commit:
                log.warning("%s", db.say(f"postgres: rollback failed: {e}"))
                return
            if lost and tx.xid is not None and settle(db, tx, failure):
                return  # it landed: the caller answers as applied
            raise failure from None
        db.putconn(tx.conn)

    # -- what the call runner needs (sql.transactions.Transactions) ----------------

    def open_tx(self) -> Tx | None:
        return self.db.local.state.tx

    def call_scope(self) -> AbstractContextManager[None]:
        return self.db.deadline()  # the whole call answers within timeout_ms

    def storage_error(self, e: BaseException) -> SessionError:
        return self.db.storage_error(e)
