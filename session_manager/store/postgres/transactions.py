"""The postgres adapter's transaction seam.

:meth:`Transactions.mutation` (entered by the service around one mutation)
takes a pooled connection, opens a transaction and takes a
transaction-scoped advisory lock per session, then binds the connection to
the calling thread: every store call the mutation makes (its reads, checks
and its commit) runs in that transaction, serialized against every other
process on the same schema. Inside :meth:`Transactions.run_call` the commit
waits until the call's events are in the outbox, so writes and events
commit together.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import TypeVar

import psycopg

from ..._wire.events import Event
from ...errors import StoreError
from ..base import EventSink
from .core import PgCore, Tx
from .in_doubt import settle
from .keys import key

log = logging.getLogger("session_manager.store.postgres")

R = TypeVar("R")


def lock_key_sql() -> str:
    """The advisory-lock key of one session (per schema, so schemas never contend)."""
    return "hashtextextended(current_schema() || ':' || %s, 0)"


class Transactions(PgCore):
    @contextmanager
    def mutation(self, session_ids: Collection[str]) -> Iterator[None]:
        tx = self._local.tx
        if tx is not None:  # nested (fork locks its new session inside the source's)
            self._lock(tx, session_ids)
            yield
            return
        with self.deadline():  # outside run_call, the mutation is the call
            tx = self._begin(session_ids)
            try:
                self._local.tx = tx
                yield
            except BaseException:
                self._end(tx, commit=False)
                raise
            if self._local.deferring:
                return  # run_call commits with the call's events
            self._end(tx, commit=True)

    def _begin(self, session_ids: Collection[str] = ()) -> Tx:
        """A pooled connection in a fresh transaction holding the sessions' locks."""
        deadline = self._deadline()
        for attempt in (1, 2):
            conn = self._getconn(deadline)
            tx = Tx(conn, pid=conn.info.backend_pid)
            try:
                ids = sorted(set(session_ids))
                with conn.pipeline():  # BEGIN, the transaction's id, the locks, the sessions: one round trip
                    conn.execute("BEGIN")
                    xid = conn.execute("SELECT txid_current()")
                    self._lock(tx, session_ids)
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
                failure = self._fail(e) if isinstance(e, psycopg.Error) else None
                self._putconn(conn)
                armed = self._local.armed
                if attempt == 1 and not (armed is not None and armed.fired) and self._stale(conn):
                    continue  # nothing ran: begin again on a live connection
                if failure is not None:
                    raise failure from None
                raise
            return tx
        raise AssertionError("unreachable")

    def _lock(self, tx: Tx, session_ids: Collection[str]) -> None:
        # Sorted, so two mutations taking several locks never deadlock.
        for sid in sorted(set(session_ids) - tx.locked):
            try:
                tx.conn.execute(f"SELECT pg_advisory_xact_lock({lock_key_sql()})", (key(sid),))
            except psycopg.Error as e:
                raise self._fail(e) from None
            tx.locked.add(sid)

    def _end(self, tx: Tx, *, commit: bool) -> None:
        """COMMIT (or ROLLBACK) and give the connection back. A COMMIT whose
        answer was lost with its connection is settled before this returns
        (:mod:`.in_doubt`): committed returns as applied, else the failure."""
        self._local.tx = None
        try:
            tx.conn.execute("COMMIT" if commit else "ROLLBACK")
        except psycopg.Error as e:
            failure = self._fail(e)
            lost = tx.conn.broken or tx.conn.closed
            self._putconn(tx.conn)
            if not commit:
                log.warning("%s", self._say(f"postgres: rollback failed: {e}"))
                return
            if lost and tx.xid is not None and settle(self, tx, failure):
                return  # it landed: the caller answers as applied
            raise failure from None
        self._putconn(tx.conn)

    def run_call(self, call: Callable[[], tuple[R, list[Event]]]) -> tuple[R, list[Event]]:
        """Run one call; its mutation commits together with its outbox rows."""
        if self._local.deferring:  # re-entrant: the outer call commits
            return call()
        with self.deadline():  # the whole call answers within timeout_ms
            return self._run_call(call)

    def _run_call(self, call: Callable[[], tuple[R, list[Event]]]) -> tuple[R, list[Event]]:
        self._local.deferring = True
        try:
            response, events = call()
        except BaseException:
            self._local.deferring = False
            tx = self._local.tx
            if tx is not None:
                self._end(tx, commit=False)
            raise
        self._local.deferring = False
        return self._finish(response, events)

    def _finish(self, response: R, events: list[Event]) -> tuple[R, list[Event]]:
        """Commit the call's transaction (if any) with its events in the outbox."""
        tx = self._local.tx
        if tx is None:
            if not events:
                return response, events
            try:
                tx = self._begin()  # events without a mutation (none today): a transaction of their own
            except StoreError as e:
                raise self.storage_error(e) from None
        # Past the service's error mapping: failures here are the caller's session/storage.
        try:
            self.outbox.record(tx.conn, events)
        except psycopg.Error as e:
            self._end(tx, commit=False)
            raise self.storage_error(e) from None
        except BaseException:
            self._end(tx, commit=False)
            raise
        try:
            self._end(tx, commit=True)
        except StoreError as e:
            raise self.storage_error(e) from None
        self.outbox.committed(events)
        return response, events

    def subscribe(self, sink: EventSink, wants: Callable[[str], bool] | None = None) -> Callable[[], None]:
        return self.outbox.subscribe(sink, wants)
