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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from ...errors import StoreError, Unavailable
from .._core.codec import loads

if TYPE_CHECKING:
    from .core import PgDatastore, Tx

__all__ = ["SETTLE_MIN_S", "settle", "settle_apply", "settle_placed"]

T = TypeVar("T")

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


# An append the server placed (sm_append_at, sm_append_call): landed only if its first entry is
# stored as this call wrote it, its body the one sent with the hole filled by the stored parent as
# the procedure fills it; an entry with its id alone may be another writer's (a replayed id, ids
# drawn twice, a session deleted and created again), whose answer and events are not this call's.
# Answers that parent and the session's count now (read with it: the entry may go between two
# reads), and the stored text when it is not the one sent (see _revised).
_PLACED = ("SELECT e.parent_id, (SELECT (s.meta::json ->> 'message_count')::bigint FROM sessions s"
           " WHERE s.session_id = e.session_id), NULLIF(e.body, replace(%(body)s, %(hole)s,"
           " CASE WHEN e.parent_id IS NULL THEN 'null' ELSE '\"' || e.parent_id || '\"' END))"
           " FROM entries e WHERE e.session_id = %(sid)s AND e.entry_id = %(id)s")
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
                 sender: str | None = None, written: tuple[str, str, str | None, str] | None = None) -> bool:
    """Whether an ``sm_apply`` (one autocommit statement, whose first event's
    payload is ``payload``, its rows recorded as ``sender``, the instance by default; or a
    plain append's, that wrote ``written``: session, id, parent, text) whose answer was lost
    committed; raises :class:`Unavailable` when the database cannot tell before the deadline."""
    landed = {"instance": sender or db.instance, "payload": payload}

    def ask(conn: psycopg.Connection[Any]) -> bool:
        row = (conn.execute(_LANDED_AS, written) if written is not None else conn.execute(_LANDED, landed)).fetchone()
        return bool(row is not None and row[0])

    return _once_gone(db, pid, started, failure, ask)


def settle_placed(db: PgDatastore, pid: int, started: Any, failure: StoreError, first: dict[str, Any]
                  ) -> tuple[str | None, int | None] | None:
    """For an append the server placed (``sm_append_at``; ``first``: its ``sid``, first
    entry's ``id``, that entry's ``body`` with the ``hole`` for its parent) whose answer was
    lost: its first entry's stored parent key and the session's count now if it landed (that
    entry stored as sent, or revised since), else ``None``; raises :class:`Unavailable` when
    the database cannot tell before the deadline."""

    def ask(conn: psycopg.Connection[Any]) -> tuple[str | None, int | None] | None:
        row = conn.execute(_PLACED, first).fetchone()
        if row is None:
            return None
        parent, count, other = row
        if other is not None and not _revised(other, first["body"].replace(first["hole"], _parent_json(parent))):
            return None
        return parent, count

    return _once_gone(db, pid, started, failure, ask)


def _parent_json(parent: str | None) -> str:
    """The parent's JSON text as ``sm_append_at`` fills the hole (any other leaf: nothing written)."""
    return "null" if parent is None else '"' + parent + '"'


def _revised(stored: str, sent: str) -> bool:
    """Whether ``stored`` is ``sent`` revised since (update-message by another writer before the
    settle looked: its message and revision alone change); everything else the same (its id,
    parent, timestamp to the millisecond, origin), it is this call's write, not another's."""
    try:
        now, then = loads(stored.encode("utf-8")), loads(sent.encode("utf-8"))
    except ValueError:
        return False
    if not isinstance(now, dict) or not isinstance(then, dict) or then.get("kind") != "message":
        return False
    revision, was = now.get("revision"), then.get("revision")
    if type(revision) is not int or type(was) is not int or revision <= was:
        return False
    return {k: v for k, v in now.items() if k not in _REVISED} == {k: v for k, v in then.items() if k not in _REVISED}


_REVISED = frozenset({"message", "revision"})  # what update-message changes of an entry


def _once_gone(db: PgDatastore, pid: int, started: Any, failure: StoreError,
               ask: Callable[[psycopg.Connection[Any]], T]) -> T:
    """``ask`` on another connection once the statement's old backend is gone (ended now, or
    before), trying until the deadline."""
    until = _until(db)
    old = {"pid": pid, "started": started}
    while True:
        try:
            conn = db.getconn(until)
            try:
                if _old_gone(conn, old):
                    return ask(conn)
            finally:
                db.putconn(conn)
        except (psycopg.Error, StoreError):
            pass  # unreachable yet: try again until the deadline
        if time.monotonic() + _POLL_S >= until:
            raise _in_doubt(failure) from None
        time.sleep(_POLL_S)
