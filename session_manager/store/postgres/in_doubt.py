"""Settling a COMMIT whose answer was lost with its connection.

The connection can drop (or the call's deadline end it) after ``COMMIT`` left
the client and before its answer came back: the transaction may have
committed or not, and answering ``session/storage`` for a write that landed
would make a retry store it twice (an append without ``entry_id``, a
``create``). So every transaction records its id when it begins
(``txid_current()``, in the ``BEGIN`` round trip) and, after such a loss,
:func:`settle` asks the server on another connection: ``txid_status`` says
``committed`` or ``aborted``. While the old backend still runs the
transaction (the COMMIT never reached it: a silent network; or it has not yet
read one that did: it gets a quarter second first), it is ended
first (``pg_terminate_backend``, only while it still holds that transaction
and runs no statement: one that arrived is left to finish), so the answer
is final: a backend ends a transaction by aborting it.

It keeps trying until the call's deadline, and at least :data:`SETTLE_MIN_S`
(a COMMIT cut by the deadline itself still gets its chance); a database
unreachable for all that time leaves the write in doubt, answered as
``session/storage`` (it may have landed).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import psycopg

from ...errors import StoreError, Unavailable

if TYPE_CHECKING:
    from .core import PgDatastore, Tx

__all__ = ["SETTLE_MIN_S", "settle", "settle_apply"]

SETTLE_MIN_S = 1.0
_POLL_S = 0.02
# How long a lost COMMIT's backend, idle in its transaction, is left to read a COMMIT that
# reached it before it is ended: on a loaded machine it may not have run yet, and ending it
# then aborts a commit that was on its way (answered as a failure though it was sent whole).
_GRACE_S = 0.25

# The old backend, only while it still holds this very transaction (its pid
# could have been reused by then; backend_xid is the 32-bit form of the id)
# and is not running a statement (a COMMIT it received is left to finish).
_END_OLD = ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE pid = %(pid)s AND backend_xid::text = %(xid32)s AND state <> 'active'")
_STATUS = "SELECT txid_status(%(xid)s)"

# An sm_apply statement's old backend (pid and start time: a pid may be reused):
# 'active' while it still runs the statement (left to finish), else ended
# (waiting 1 s at most); once it is gone, the call's first outbox row says if it landed.
# Asking before it is gone raced: idle when looked at, it read the statement just after,
# was not ended (it was active by then), and the row was looked for before its commit: a
# landed append was answered "not applied" and retried into a duplicate (a CI run saw it).
_OLD_STATE = "SELECT state FROM pg_stat_activity WHERE pid = %(pid)s AND backend_start = %(started)s"
_END_OLD_STATEMENT = ("SELECT pg_terminate_backend(pid, 1000) FROM pg_stat_activity"
                      " WHERE pid = %(pid)s AND backend_start = %(started)s AND state <> 'active'")
_LANDED = "SELECT EXISTS (SELECT 1 FROM outbox WHERE instance = %(instance)s AND payload = %(payload)s)"


_LANDED_ENTRY = "SELECT EXISTS (SELECT 1 FROM entries WHERE session_id = %s AND entry_id = %s)"
# A plain append's (plain.py), which assumed its id unused without checking it: the id stored
# by another instance meanwhile (a retry of the same append, on top of entries this one never
# saw) is not this write landing; only the entry as this one wrote it (its parent and text) is.
_LANDED_AS = ("SELECT EXISTS (SELECT 1 FROM entries WHERE session_id = %s AND entry_id = %s"
              " AND parent_id IS NOT DISTINCT FROM %s AND body = %s)")


def settle(db: PgDatastore, tx: Tx, failure: StoreError) -> bool:
    """Whether ``tx`` (its COMMIT sent, its answer lost) committed; raises
    :class:`Unavailable` when the database cannot tell before the deadline."""
    assert tx.xid is not None
    until = _until(db)
    params = {"pid": tx.pid, "xid32": str(tx.xid % 2**32), "xid": tx.xid}
    grace = time.monotonic() + min(_GRACE_S, (until - time.monotonic()) / 2)
    while True:
        status: str | None = "unknown"
        try:
            conn = db.getconn(until)
            try:
                if time.monotonic() >= grace:
                    conn.execute(_END_OLD, params)
                row = conn.execute(_STATUS, params).fetchone()
                status = row[0] if row else None
            finally:
                db.putconn(conn)
        except (psycopg.Error, StoreError):
            pass  # unreachable yet: try again until the deadline
        if status == "committed":
            return True
        if status == "aborted":
            return False
        # None: too old to know (never for one just sent); else unreachable, or still running.
        if status is None or time.monotonic() + _POLL_S >= until:
            raise _in_doubt(failure) from None
        time.sleep(_POLL_S)


def _old_gone(conn: psycopg.Connection[Any], old: dict[str, Any]) -> bool:
    """Whether the old backend is gone (ended now, or before): only then can its
    statement no longer land. One that turned active between the two queries (it read the
    statement just now) is not ended, nor is one still ending after a second: asked again."""
    if conn.execute(_OLD_STATE, old).fetchone() is None:
        return True
    ended = conn.execute(_END_OLD_STATEMENT, old).fetchone()
    if ended is not None and ended[0]:
        return True
    return conn.execute(_OLD_STATE, old).fetchone() is None


def _until(db: PgDatastore) -> float:
    return max(db.deadline_at(), time.monotonic() + min(SETTLE_MIN_S, db.settings.timeout_ms / 1000))


def _in_doubt(failure: StoreError) -> Unavailable:
    return Unavailable(f"{failure}; whether the write was applied is unknown (the database did not"
                       " answer before the deadline): it may have landed")


def settle_apply(db: PgDatastore, pid: int, started: Any, payload: str, failure: StoreError, *,
                 entry: tuple[str, str] | None = None, sender: str | None = None,
                 written: tuple[str, str, str | None, str] | None = None) -> bool:
    """Whether an ``sm_apply`` (one autocommit statement, whose first event's
    payload is ``payload``; or, for an ``sm_append_call``, whose payloads the server
    completed, that wrote ``entry``, a new id checked absent; its rows recorded as ``sender``, the
    instance by default; or a plain append's, that wrote ``written``: session, id, parent, text)
    whose answer was lost committed; raises
    :class:`Unavailable` when the database cannot tell before the deadline."""
    until = _until(db)
    old = {"pid": pid, "started": started}
    landed = {"instance": sender or db.instance, "payload": payload}
    while True:
        row: tuple[Any, ...] | None = None
        try:
            conn = db.getconn(until)
            try:
                if _old_gone(conn, old):
                    if written is not None:
                        row = conn.execute(_LANDED_AS, written).fetchone()
                    else:
                        row = (conn.execute(_LANDED, landed) if entry is None
                               else conn.execute(_LANDED_ENTRY, entry)).fetchone()
            finally:
                db.putconn(conn)
            if row is not None:
                return bool(row[0])
        except (psycopg.Error, StoreError):
            pass  # unreachable yet: try again until the deadline
        if time.monotonic() + _POLL_S >= until:
            raise _in_doubt(failure) from None
        time.sleep(_POLL_S)
