"""One round trip per mutation in the common case: optimistic commits.

The transactional path (:mod:`.transactions`, with the call runner) takes a connection, ``BEGIN``,
the session's advisory lock, reads the meta and leaf, writes, records the
events and commits: about seven round trips per append. Here a call runs
first *optimistically*: the mutation's reads are served from what this
instance knows of the session (:class:`Known`: its meta text, leaf and the
bodies of entries it wrote last; read from the database once when unknown),
its commit is resolved against that knowledge and deferred, and when the call
has returned its events, one statement sends everything: ``SELECT
sm_apply(...)`` (the server-side function of migration 2, see
:mod:`.schema`). Under the session's advisory lock it checks that the state
the decision read is still the database's (the exact meta text and leaf,
each entry read by its exact text or its absence), then writes the entries,
the session row, the outbox rows and their ``NOTIFY``, atomically (an
autocommit statement is its own transaction).

- A difference (another instance wrote the session) raises SQLSTATE
  ``SM409``: nothing was written, this instance forgets the session, and the
  call runs again from fresh knowledge; a second conflict runs it on the
  transactional path, which serializes on the lock instead of retrying.
- Whatever the optimistic run cannot serve exactly (a second session, a
  path or attachment read inside the mutation, a commit without events, a
  decision that ended without a commit but read cached state) raises
  :class:`Fallback`, and the call runs on the transactional path: nothing
  was sent, so nothing is done twice.
- A lost answer is settled like a lost ``COMMIT`` (:mod:`.in_doubt`): the old
  backend is ended if still there (by pid and start time), then the call's
  first outbox row (this instance, that payload) says whether it committed; for
  an append the server placed, its first entry stored exactly as it was sent.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from functools import partial
from types import TracebackType
from typing import Any, TypeVar

import orjson
import psycopg

from ..._wire.events import Event
from ...errors import StoreError
from .._core.append import UNSET
from .._core.cas import resolve
from .._core.codec import loads
from ..base import Commit, Entry, Meta
from ..sql.keys import ID_BYTES, check_id, key, key_or_none, unkey
from ..sql.transactions import CallRunner
from ..sql.values import json_text
from . import plain
from .at_leaf import APPEND_AT, HOLE_JSON, choose_at_leaf, fill, fill_known, hold_off, resolve_at_leaf
from .core import _UNREAD, PgDatastore, Statement, Tx, _Conn
from .in_doubt import settle_apply, settle_placed
from .outbox import NOTIFY_BATCH, Outbox
from .plan import Known, Plan, append_call_params, apply_params
from .reads import PgReads
from .schema import APPLY_AT_ROW
from .transactions import PgTransactions
from .writes import CONFLICT, PgWrites

__all__ = ["CONFLICT", "Fallback", "Known", "Optimistic"]

R = TypeVar("R")

KNOWN_SESSIONS = 10_000  # sessions this instance remembers (least recently used dropped)
KNOWN_BODIES = 16  # entries per session whose text it remembers (a stream updates the last ones)
CONTENDED_S = 1.0  # after a conflict, the session's calls take the transactional path this long
_APPEND_AT = Statement(APPEND_AT)  # a plain append's one statement: sent directly
# The warm unobserved append's two statements, one round trip (plain.py); PLAIN off: always
# sm_append_at (the bench's A/B).
_PLAIN_LOCK, _PLAIN, _PLAIN_LINKED = Statement(plain.LOCK), Statement(plain.APPEND), Statement(plain.LINKED)
PLAIN = True
# A warm linked append learns the session as it will be while the server writes it (see
# _apply_plain); off: after the answer, as every other path (the bench's A/B).
AHEAD = True



class Fallback(BaseException):
    """This call needs the transactional path (a BaseException: no domain handler catches it)."""


def _interrupted(db: Any, conn: psycopg.Connection[Any], state: Any) -> None:
    """A connection whose statement something other than psycopg's errors ended (a
    KeyboardInterrupt: psycopg cancels the query and re-raises it; any BaseException) closed and
    given back, so the pool discards it and is not short of it for good (review 19: it was kept,
    still armed). Whether the write landed is unknown: the caller's exception goes on as it is.
    ``state``: the thread's, when taken by :meth:`~.core.PgDatastore.take` (else ``putconn``'s)."""
    with contextlib.suppress(Exception):
        conn.close()
    if state is not None:
        db.give(conn, state)
    else:
        db.putconn(conn)


class _Conflicted(Exception):
    """sm_apply found the state changed: nothing was written."""


class _Mutation:
    """:meth:`Optimistic.mutation`'s context: a class, not a generator, as every append
    enters one (a ``contextmanager``'s generator and wrapper are six Python calls more).
    What it is (planned, or a transaction) is decided when it is entered, under the
    session's lock the service takes first."""

    __slots__ = ("_ids", "_inner", "_owner", "exit_needed")

    def __init__(self, owner: Optimistic, session_ids: Collection[str]) -> None:
        self._owner = owner
        self._ids = session_ids
        self._inner: AbstractContextManager[None] | None = None
        # False once entered planned: its exit does nothing, and the service's mutation context
        # (storage_errors.locked_storage_errors) skips the call.
        self.exit_needed = True

    def __enter__(self) -> None:
        # Planned (nothing entered: ``_inner`` stays None), else the transaction entered.
        owner, session_ids = self._owner, self._ids
        opt = owner._opt.state
        if (opt.optimistic and opt.plan is None and (len(session_ids) == 1 or len(set(session_ids)) == 1)
                and not (owner._contended and owner._is_contended(next(iter(session_ids))))):
            opt.plan = Plan(next(iter(session_ids)))
            self.exit_needed = False
            return
        if opt.optimistic:  # a second mutation in the call, or several sessions at once
            owner._upgrade_or_begin()
        inner = owner.txs.mutation(session_ids)
        inner.__enter__()
        self._inner = inner

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> bool | None:
        inner, self._inner = self._inner, None
        if inner is None:  # planned: nothing to end here (the call sends it, or falls back)
            return None
        return inner.__exit__(kind, e, tb)


class Optimistic:
    """The store's calls, tried optimistically first, over its transactional parts."""

    def __init__(self, db: PgDatastore, txs: PgTransactions, calls: CallRunner[Tx], reads: PgReads,
                 writes: PgWrites, outbox: Outbox) -> None:
        self.db, self.txs, self.calls = db, txs, calls
        self.reads, self.writes, self.outbox = reads, writes, outbox
        db.guard = self._guard  # a statement the plan cannot serve upgrades it to a transaction
        # The thread's state (the datastore's: its tx, deadline and armed connection beside the
        # optimistic fields: optimistic, plan, reading, fresh), one thread-local read for both.
        self._opt = db.local
        self._known: OrderedDict[str, Known] = OrderedDict()
        self._known_lock = threading.Lock()
        self._contended: dict[str, float] = {}  # session -> until when it skips the optimistic attempt
        self._unplain: dict[str, float] = {}  # session -> until when its appends skip the plain statement
        self._observed_until = 0.0  # until then appends skip the plain statement (someone observes)
        self._pipelines = db.pipelines  # (libpq's, fixed: read once)

    # -- the call -----------------------------------------------------------------------

    def run_call(self, call: Callable[[], tuple[R, list[Event]]]) -> tuple[R, list[Event]]:
        local = self.db.local
        state = local.state
        if local.deferring or state.tx is not None:
            return self.calls.run_call(call)
        return self.run_outer(call, state)

    def run_outer(self, call: Callable[[], tuple[R, list[Event]]], state: Any) -> tuple[R, list[Event]]:
        """:meth:`run_call` of a call its caller knows runs in no other's mutation (the thread
        neither defers nor holds a transaction), ``state`` the thread's (``db.local.state``,
        read once by the caller: each read of a thread-local costs ~600 instructions)."""
        if state.deadline is not None:  # (a call inside a call: the outer one's deadline holds)
            return self._run(call, state)
        # db.deadline(), inline: every call passes here (its context manager is four Python calls more).
        state.deadline = time.monotonic() + self.db.settings.timeout_ms / 1000
        try:
            try:  # (_run's attempts, written out: every call passes here)
                for attempt in (1, 2):
                    state.fresh = attempt == 2
                    try:
                        return self._run_optimistic(call, state, state)
                    except _Conflicted:
                        continue  # the session was forgotten: decide again from the database's state
                    except Fallback:
                        break
            finally:
                state.fresh = False
            return self.calls.run_call(call)
        finally:
            state.deadline = None
            state.window = None  # read for this call only

    def _run(self, call: Callable[[], tuple[R, list[Event]]], state: Any) -> tuple[R, list[Event]]:
        opt = state  # (the thread's state holds the optimistic fields too)
        try:
            for attempt in (1, 2):
                opt.fresh = attempt == 2
                try:
                    return self._run_optimistic(call, opt, state)
                except _Conflicted:
                    continue  # the session was forgotten: decide again from the database's state
                except Fallback:
                    break
        finally:
            opt.fresh = False
        return self.calls.run_call(call)

    def _run_optimistic(self, call: Callable[[], tuple[R, list[Event]]], opt: Any,
                        state: Any) -> tuple[R, list[Event]]:
        """One optimistic run of ``call``: ``opt`` and ``state`` the thread's (see :meth:`run_outer`)."""
        opt.optimistic = True
        local = self.db.local
        try:
            response, events = call()
        except BaseException as e:
            plan = opt.plan
            local.deferring = False
            tx = state.tx
            if tx is not None:  # upgraded mid-call
                self.txs.end(tx, commit=False)
            if isinstance(e, Exception) and tx is None and plan is not None and plan.cached:
                raise Fallback from None  # decided on remembered state: only the database may say no
            raise
        finally:
            plan, opt.plan, opt.optimistic = opt.plan, None, False
        if state.tx is not None:  # upgraded to a transaction mid-call
            local.deferring = False
            return self.calls.finish(response, events)
        if plan is None:
            return response, events
        if plan.commit is None:
            if plan.cached or events:
                raise Fallback  # an answer without a write, decided on remembered state
            return response, events
        if not events or len(events) > NOTIFY_BATCH:
            # A landed sm_apply is recognized by its first event's row: this one commits in a transaction.
            opt.plan = plan
            try:
                self._upgrade()
            finally:
                opt.plan = None
            fill_known(plan, response, events)
            local.deferring = False
            return self.calls.finish(response, events)
        try:
            self._apply(plan, events, response, state)
        except StoreError as e:  # (a commit left in doubt, no connection: as the transactional path's finish maps them)
            raise self.db.storage_error(e) from None
        outbox = self.outbox
        if outbox.after_commit is not None or outbox._thread is not None or not outbox._pruner_runs:
            outbox.committed(None, events)  # (else it has nothing to do: no call)
        return response, events

    def _upgrade(self) -> None:
        """Turn the optimistic mutation in progress into a transaction: lock the
        session, check that what the plan read still holds (else :class:`Fallback`),
        write its commit if it made one; the rest of the call runs in the
        transaction, committed with the call's events. (A fork, an attachment, a
        path read inside a mutation: served without running the call again.)"""
        plan = self._opt.state.plan
        assert plan is not None
        tx = self.txs.begin((plan.session_id,))
        try:
            holds = self._holds(tx.conn, plan)
            if holds and plan.commit is not None:
                fill_known(plan)
                self.writes.encode_and_write(tx.conn, plan.session_id, plan.commit)
        except BaseException:
            self.txs.end(tx, commit=False)
            raise
        if not holds:
            self.txs.end(tx, commit=False)
            self.forget(plan.session_id)
            raise Fallback
        self.forget(plan.session_id)
        opt = self._opt.state
        opt.optimistic, opt.plan = False, None
        tx.shared = True  # (the mutation under way did not begin it: its conflict must not abort it)
        local = self.db.local
        local.state.tx, local.deferring = tx, True

    def _holds(self, conn: psycopg.Connection[Any], plan: Plan) -> bool:
        """Whether the database still has what ``plan`` read (under the session's lock)."""
        sid = key(plan.session_id)
        if plan.check:
            row = conn.execute("SELECT meta, leaf FROM sessions WHERE session_id = %s AND meta IS NOT NULL",
                               (sid,)).fetchone()
            if plan.check == 2 and row is not None:
                return False
            known = plan.known
            if plan.check == 1 and (row is None or known is None or row[0] != known.text
                                    or row[1] != key_or_none(known.leaf)):
                return False
        if plan.reads:
            rows = conn.execute("SELECT entry_id, body FROM entries WHERE session_id = %s AND entry_id = ANY(%s)",
                                (sid, [key(i) for i in plan.reads])).fetchall()
            found = {unkey(i): b for i, b in rows}
            return all(found.get(i) == body for i, body in plan.reads.items())
        return True

    def mutation(self, session_ids: Collection[str]) -> AbstractContextManager[None]:
        """A mutation: planned (nothing sent yet) in an optimistic call, else a transaction
        (decided as it is entered: see :class:`_Mutation`)."""
        return _Mutation(self, session_ids)

    def _is_contended(self, session_id: str) -> bool:
        """Whether another writer beat this instance to the session a moment ago: then
        its calls wait on the session's lock instead of guessing and retrying."""
        until = self._contended.get(session_id)
        return until is not None and until > time.monotonic()

    def _contend(self, session_id: str) -> None:
        now = time.monotonic()
        with self._known_lock:
            if len(self._contended) > KNOWN_SESSIONS:
                self._contended = {s: t for s, t in self._contended.items() if t > now}
            self._contended[session_id] = now + CONTENDED_S

    def _upgrade_or_begin(self) -> None:
        if self._opt.state.plan is not None:
            self._upgrade()
        else:  # nothing optimistic yet: the transactional path from here, committed with the events
            self._opt.state.optimistic = False
            self.db.local.deferring = True

    # -- the plan's reads -----------------------------------------------------------------

    def _plan(self, session_id: str) -> Plan | None:
        opt = self._opt.state
        if not opt.optimistic:
            return None
        plan = opt.plan
        if plan is None:
            return None  # a read outside any mutation: the database's
        if plan.session_id != session_id or plan.commit is not None:
            # Another session, or a read after the pending write: one transaction serves
            # both, the read seeing the write.
            self._upgrade()
            return None
        return plan

    def _guard(self) -> None:
        opt = self._opt.state
        if opt.optimistic and opt.plan is not None and not opt.reading:
            self._upgrade()  # anything else the plan cannot serve: a transaction from here

    def _state(self, plan: Plan) -> Known | None:
        """The session as the plan decides on it (remembered, else read once)."""
        if plan.check == 0:
            known = self._remembered(plan.session_id)
            plan.cached = known is not None
            if known is None:
                known = self._read_known(plan.session_id)
            if known is None:
                raise Fallback  # no such session here: the transactional path answers it
            plan.known, plan.check = known, 1
        return plan.known

    def get_meta(self, session_id: str) -> Meta | None:
        plan = self._plan(session_id)
        if plan is None:
            return self.reads.get_meta(session_id)
        known = self._state(plan)
        return known.meta if known is not None else None

    def get_leaf(self, session_id: str) -> str | None:
        plan = self._plan(session_id)
        if plan is None:
            return self.reads.get_leaf(session_id)
        known = self._state(plan)
        return known.leaf if known is not None else None

    def meta_and_leaf_to_commit(self, session_id: str) -> tuple[Meta | None, str | None]:
        # Two reads a plan serves at once (the store's meta_and_entry_to_commit is the default's, over these).
        # (_plan, then _state and _remembered for a plan that has read nothing yet, inline: every append)
        opt = self._opt.state
        plan = opt.plan if opt.optimistic else None
        if plan is not None and plan.check == 0 and plan.session_id == session_id and plan.commit is None:
            with self._known_lock:
                known = self._known.get(session_id)
                if known is not None:
                    self._known.move_to_end(session_id)
            plan.cached = known is not None
            if known is None:
                known = self._read_known(session_id)
                if known is None:
                    raise Fallback  # no such session here: the transactional path answers it
            plan.known, plan.check = known, 1
            return known.meta, known.leaf
        plan = self._plan(session_id)
        if plan is None:
            return self.reads.get_meta(session_id), self.reads.get_leaf(session_id)
        known = self._state(plan)
        return (known.meta, known.leaf) if known is not None else (None, None)

    def get_entry(self, session_id: str, entry_id: str) -> Entry | None:
        plan = self._plan(session_id)
        if plan is None:
            return self.reads.get_entry(session_id, entry_id)
        return self._entry(plan, entry_id, assume_absent=False)

    def _entry(self, plan: Plan, entry_id: str, *, assume_absent: bool) -> Entry | None:
        if entry_id in plan.reads:
            text = plan.reads[entry_id]
            return loads(text.encode("utf-8")) if text is not None else None
        known = plan.known if plan.check else self._state(plan)  # (_state's answer once decided, without the call)
        held = known.bodies.get(entry_id) if known is not None else None
        if held is not None:
            plan.cached = True
            plan.reads[entry_id] = held[1]
            return held[0]
        if assume_absent or not self._opt.state.fresh:
            # A new entry's id, or one asked about (an idempotent append's): assumed
            # unused, which sm_apply checks; an answer that relied on it is rechecked.
            plan.cached = plan.cached or not assume_absent
            plan.reads[entry_id] = None
            return None
        self._opt.state.reading = True
        try:
            rows = self.db.rows("SELECT body FROM entries WHERE session_id = %s AND entry_id = %s",
                                 (key(plan.session_id), key(entry_id)))
        finally:
            self._opt.state.reading = False
        plan.reads[entry_id] = rows[0][0] if rows else None
        return loads(rows[0][0].encode("utf-8")) if rows else None

    # -- what this instance remembers ------------------------------------------------------

    def _remembered(self, session_id: str) -> Known | None:
        with self._known_lock:
            known = self._known.get(session_id)
            if known is not None:
                self._known.move_to_end(session_id)
            return known

    def _remember(self, session_id: str, known: Known) -> None:
        with self._known_lock:
            self._known[session_id] = known
            self._known.move_to_end(session_id)
            while len(self._known) > KNOWN_SESSIONS:
                self._known.popitem(last=False)

    def forget(self, session_id: str) -> None:
        """Drop what this instance remembers of a session (it was written some other way)."""
        with self._known_lock:
            self._known.pop(session_id, None)

    def _read_known(self, session_id: str) -> Known | None:
        self._opt.state.reading = True
        try:
            rows = self.db.rows("SELECT meta, leaf FROM sessions WHERE session_id = %s AND meta IS NOT NULL",
                                 (key(session_id),))
        finally:
            self._opt.state.reading = False
        if not rows:
            return None
        text, leaf = rows[0]
        known = Known(loads(text.encode("utf-8")), text, unkey(leaf) if leaf is not None else None)
        self._remember(session_id, known)
        return known

    # -- the commit ------------------------------------------------------------------------

    def commit(self, session_id: str, commit: Commit) -> Commit:
        # (_plan inline, its state read once for the transaction and the plan: every append passes here)
        state = self._opt.state
        plan = state.plan if state.tx is None and state.optimistic else None
        if plan is not None and (plan.session_id != session_id or plan.commit is not None):
            self._upgrade()  # (as _plan: another session, or a second commit: one transaction)
            plan = None
        if plan is None:
            self.forget(session_id)  # written on the transactional path: re-read next time
            return self.writes.commit(session_id, commit)
        if plan.check == 0 and commit.expect_meta is None and not commit.append:
            plan.check = 2  # a new session: sm_apply checks none exists
            meta, leaf = None, None
        else:
            known = plan.known if plan.check else self._state(plan)  # (as in _entry)
            meta, leaf = (known.meta, known.leaf) if known is not None else (None, None)
            # The common append (one new entry, chained, derived from the known meta on the known leaf,
            # which will try the plain statement: see _plain_now, inline) with what resolve_at_leaf,
            # resolve and _entry check written out: nothing to resolve, taken as it is (plan.plain).
            # Anything else is decided below, as before.
            entries = commit.entries
            if (known is not None and commit.chain and commit.derived_from is meta and len(entries) == 1
                    and commit.append and commit.expect_meta is UNSET and not commit.expect_revisions
                    and commit.meta is not None and PLAIN and self.outbox._thread is None and self._pipelines):
                new = entries[0]
                entry_id = new["id"]
                now = time.monotonic()
                until = self._unplain.get(session_id)
                if (now >= self._observed_until and (until is None or until <= now) and commit.leaf == entry_id
                        and new.get("parent_id") == leaf and plan.reads.get(entry_id) is None
                        and entry_id not in known.bodies and len(entry_id) <= ID_BYTES // 4):
                    # (a new entry's id, read as absent or assumed unused, as _entry: the insert checks)
                    plan.reads[entry_id] = None
                    plan.plain, plan.holed = True, False
                    try:  # (json_text, inline)
                        body, text = orjson.dumps(new).decode(), orjson.dumps(commit.meta).decode()
                    except TypeError:
                        body, text = json_text(new), json_text(commit.meta)
                    plan.bodies, plan.meta_text = [body], text
                    plan.commit = commit
                    return commit
        entry = lambda eid: self._entry(plan, eid, assume_absent=True)  # noqa: E731
        # An append that will try the plain statement (one entry) is resolved on the known leaf
        # (the statement's parent, checked there): nothing held off, nothing to fill in after;
        # held off for the server only if it does not write it (at_leaf.hold_off).
        plain_next = commit.chain and len(commit.entries) == 1 and self._plain_ok(plan)
        resolved = resolve_at_leaf(plan, commit, meta, leaf, entry, plain_next)
        if plan.known is None:  # (a known session is stored: its id fits)
            check_id("session_id", session_id)
        for e in resolved.entries:
            check_id("entry_id", e["id"])
        bodies = [json_text(e) for e in resolved.entries]
        # (an append left to the server: its meta's text is its cut's, see at_leaf.segments)
        holed = plan.holed
        meta_text = choose_at_leaf(plan, resolved, bodies) if holed else None
        if meta_text is None:
            if holed:  # (not left to the server after all)
                resolved = resolve(commit, meta, leaf, entry)  # the known leaf, checked by sm_apply
                bodies = [json_text(e) for e in resolved.entries]
            meta_text = json_text(resolved.meta) if resolved.meta is not None else None
        plan.bodies, plan.meta_text = bodies, meta_text
        plan.commit = resolved
        return resolved

    def delete_session(self, session_id: str) -> bool:
        self.forget(session_id)
        return self.writes.delete_session(session_id)

    def _apply(self, plan: Plan, events: list[Event], response: Any, state: Any) -> None:
        """Send the plan and its events: one statement, one round trip (``state``: the thread's)."""
        commit, cut = plan.commit, plan.at_leaf
        assert commit is not None
        db = self.db
        if cut is not None or plan.plain:
            now = time.monotonic()  # (_plain_now, inline: someone may have started observing meanwhile)
            until = self._unplain.get(plan.session_id)
            if (PLAIN and self.outbox._thread is None and self._pipelines and now >= self._observed_until
                    and (until is None or until <= now) and self._apply_plain(plan, events, response, state)):
                return
            if plan.plain:  # (nothing written) the same append held off for the server after all
                cut = plan.at_leaf if hold_off(plan, response, events) else None
        sender = db.local.state.sender or db.instance  # (an observed call's: see Outbox.begin_call)
        if cut is not None:
            params = append_call_params(plan.session_id, commit, plan.bodies, cut, instance=sender,
                                        schema=db.settings.schema, events=events, plan=plan)
        else:
            params = apply_params(plan.session_id, commit, plan.bodies, plan.meta_text, instance=sender,
                                  schema=db.settings.schema, events=events, plan=plan)
        conn = db.getconn(db.deadline_at())
        try:
            pid, started = conn.pgconn.backend_pid, db.started_at(conn)  # (a query on its first use)
        except BaseException:
            _interrupted(db, conn, None)
            raise
        row: tuple[Any, ...] | None = None
        try:
            row = (db.run(conn, _APPEND_AT, params)[0] if cut is not None
                   else db.execute(conn, APPLY_AT_ROW, params).fetchone())
        except BaseException as e:
            if not isinstance(e, psycopg.Error):
                _interrupted(db, conn, None)
                self.forget(plan.session_id)
                raise
            failure = db.fail(e)
            if e.sqlstate == CONFLICT:  # raised before anything was written or locked past the call
                db.putconn(conn)
                self.forget(plan.session_id)
                self._contend(plan.session_id)
                raise _Conflicted from None
            if cut is not None and not (conn.broken or conn.closed):
                # sm_append_call commits its write before its notification: an error may come
                # after the write landed (a statement timeout), and may leave the session's
                # ordering lock held by this backend. Ending the connection frees it; the
                # write is then settled like a lost answer (its notification sent again if it landed).
                conn.close()
            lost = conn.broken or conn.closed
            armed = db.local.state.armed  # (this connection's: the settlement's take the thread's slot)
            db.putconn(conn)
            ended = armed is not None and armed.fired  # (the deadline ended it; disarmed, it stays so)
            self.forget(plan.session_id)
            if not lost or started is None:
                raise db.storage_error(failure) from None
            placed: tuple[str | None, int | None] | None = None
            if cut is not None:  # (its payload had the hole: its first entry, as it sent it, says)
                first = {"sid": params["sid"], "id": params["ids"][0], "body": plan.bodies[0], "hole": HOLE_JSON}
                placed = settle_placed(db, pid, started, failure, first)
                landed = placed is not None
            else:
                landed = settle_apply(db, pid, started, params["payloads"][0], failure, sender=sender)
            if not landed:
                if ended:
                    raise db.storage_error(failure) from None  # the deadline: no time to apply it again
                db.stale(conn)
                raise Fallback from None  # it did not land (a connection lost while idle): apply it again
            if placed is not None:  # it landed: the parent the server chose is the entry's
                parent, count = placed
                self.outbox.renotify()  # its notification may not have been sent
                if count is None:  # (no meta to read the count from: the one this call computed)
                    count = commit.meta["message_count"] if commit.meta is not None else 0
                fill(commit, plan.bodies, unkey(parent) if parent is not None else None, count, response, events)
                return  # the session was forgotten: its meta is read afresh next time
        else:
            db.putconn(conn)
        if cut is not None and row is not None:
            chosen = unkey(row[0]) if row[0] is not None else None
            if plan.plain_missed and plan.known is not None:
                # plain.LINKED wrote nothing: placed at the leaf it knew, the session was as known
                # (its meta at most in the two numbers sm_append_at rewrites): someone observes;
                # unless it checked a row version (another write may have left the meta text and
                # leaf alike): then nothing is concluded, the session's next append, its version
                # now unknown, takes plain.APPEND, which says whether someone observes.
                at_known = chosen == plan.known.leaf
                if not (at_known and plan.plain_missed == 2):
                    self._plain_missed(plan.session_id, at_known)
            fill(commit, plan.bodies, chosen, row[1], response, events)
            plan.meta_text = cut.text(commit.meta["updated_at"] if commit.meta else 0, row[1])
        elif cut is None and row is not None and row[0] is not None:
            # (sm_apply's answer: the row's xmin it left; its leaf and meta text are the ones
            # sent, or, not sent, the ones it checked: known only then)
            checked_meta = params["expect_meta"] if params["check"] == 1 else None
            after_meta = params["meta"] if params["has_meta"] else checked_meta
            after_leaf = params["leaf"] if params["has_leaf"] else params["expect_leaf"]
            if after_meta is not None and (params["has_leaf"] or params["check"] == 1):
                plan.version = (row[0], after_leaf, after_meta)
                if params["row"] is not None:  # (checked at exactly that version: the xmin, leaf, meta text)
                    plan.since = (params["row"], params["expect_leaf"], params["expect_meta"])
        self._learn(plan)

    def _plain_ok(self, plan: Plan) -> bool:
        """Whether a plain append may try the plain statement (plain.py): nobody observes as
        far as this instance knows, and its session's last one did not miss."""
        return self._plain_now(plan.session_id)

    def _plain_now(self, session_id: str) -> bool:
        """:meth:`_plain_ok` for ``session_id``."""
        if not PLAIN or self.outbox._thread is not None or not self._pipelines:  # (outbox.observing, inline)
            return False
        now = time.monotonic()
        if now < self._observed_until:
            return False
        until = self._unplain.get(session_id)
        return until is None or until <= now

    def _apply_plain(self, plan: Plan, events: list[Event], response: Any, state: Any) -> bool:
        """The plain statement (plain.py): ``True`` when it wrote the append, ``False`` when
        ``sm_append_at`` must (nothing was written: someone observes, the session changed, or
        the append is not a plain one). ``state``: the thread's (its deadline set)."""
        db = self.db
        params = plain.params(plan, db.settings.schema)
        if params is None:
            return False
        commit, known = plan.commit, plan.known
        assert commit is not None and known is not None and commit.meta is not None
        conn = db.take(state)
        started = conn.backend_start if type(conn) is _Conn else _UNREAD  # (db.started_at's, known)
        if started is _UNREAD:
            try:
                started = db.started_at(conn)  # (a query on the connection's first use)
            except BaseException:
                _interrupted(db, conn, state)
                raise
        pid = conn.pgconn.backend_pid
        linked = "depth" in params
        # A linked append's answer says only whether it wrote: what the session then is (its
        # Known, but for the row version the answer gives) is built while the server writes
        # and commits, and used only if it did (unpublished, it is simply dropped otherwise).
        ahead: list[Known] = []
        try:
            rows = db.run_pair(conn, _PLAIN_LOCK, _PLAIN_LINKED if linked else _PLAIN, params,
                               partial(self._learn_ahead, plan, params, ahead) if linked and AHEAD else None)
            # (LINKED: a row when it wrote, none otherwise, not saying why; APPEND: seen, wrote, ...)
            row: tuple[Any, ...] = () if linked else rows[0][:6]
            version = (rows[0][0] if rows else None) if linked else rows[0][6]
            seen, wrote = (None, bool(rows)) if linked else (row[0], row[1])
        except BaseException as e:
            if not isinstance(e, psycopg.Error):
                _interrupted(db, conn, state)
                self.forget(plan.session_id)
                raise
            failure = db.fail(e)
            lost = conn.broken or conn.closed
            armed = state.armed  # (this connection's: the settlement's take the thread's slot)
            db.give(conn, state)
            ended = armed is not None and armed.fired  # (the deadline ended it; disarmed, it stays so)
            self.forget(plan.session_id)
            if e.sqlstate == plain.UNIQUE_VIOLATION:  # a new entry's id in use: nothing written
                self._contend(plan.session_id)
                raise _Conflicted from None
            if not lost or started is None:
                raise db.storage_error(failure) from None  # (one transaction: nothing written)
            written = (params["sid"], params["id"], params["parent"], params["body"])
            if not settle_apply(db, pid, started, "", failure, written=written):
                if ended:
                    raise db.storage_error(failure) from None  # the deadline: no time to apply it again
                db.stale(conn)
                raise Fallback from None  # it did not land (the id may be another's: a replay then)
            fill(commit, plan.bodies, known.leaf, commit.meta["message_count"], response, events)
            return True  # it landed (the session was forgotten: its meta is read afresh next time)
        db.give(conn, state)
        if not wrote:
            if seen is None:
                # (why: told by where sm_append_at places it, see _apply; 2: a row version checked)
                plan.plain_missed = 2 if params.get("row") is not None else 1
            else:
                self._plain_missed(plan.session_id, seen)
            return False
        if not plan.plain:  # (held off: its text as sent, the hole filled with the known leaf)
            fill(commit, plan.bodies, known.leaf, commit.meta["message_count"], response, events, params["body"])
        # (LINKED compared the row's xmin, leaf and meta text: the version it wrote after, exactly)
        since = (params["row"], params["parent"], params["expect_meta"]) \
            if linked and params["row"] is not None else None
        after = (version, params["leaf"], params["meta"]) if version is not None else None
        if ahead:  # (its entry is commit's first, filled in place just now; its body the one sent)
            learned = ahead[0]
            learned.row, learned.version, learned.since = version, after, since
            session_id, remembered = plan.session_id, self._known
            with self._known_lock:  # (_remember, inline)
                remembered[session_id] = learned
                remembered.move_to_end(session_id)
                while len(remembered) > KNOWN_SESSIONS:
                    remembered.popitem(last=False)
            return True
        plan.links, plan.row, plan.version, plan.since = plain.learn(known.links, params, row), version, after, since
        self._learn(plan)
        return True

    def _learn_ahead(self, plan: Plan, params: dict[str, Any], out: list[Known]) -> None:
        """What :meth:`_learn` will know after ``plan``'s linked plain append wrote (its
        ``params``; the row version left to fill in), into ``out``: run while the server
        executes it, so it must not raise: a failure leaves ``out`` empty, and
        :meth:`_learn` runs after the answer as on every other path (failing there as it would)."""
        try:
            links = plan.known.links if plan.known else {}
            # (plain.learn's first step, without its frame: a linked append grown from its parent's chain)
            grown = plain.grown(links, params) if links else None
            known = self._learned(plan, [params["body"]], grown if grown is not None else
                                  plain.learn(links, params, ()), None)
        except Exception:  # (see above: the same work runs again after the answer)
            return
        if known is not None:
            out.append(known)

    def _plain_missed(self, session_id: str, observed: bool) -> None:
        """The plain statement wrote nothing: someone observes (every append takes sm_append_at
        for a while), or the session changed (its appends take it for a while)."""
        now = time.monotonic()
        if observed:
            self._observed_until = now + plain.OBSERVED_S
            return
        with self._known_lock:
            if len(self._unplain) > KNOWN_SESSIONS:
                self._unplain = {s: t for s, t in self._unplain.items() if t > now}
            self._unplain[session_id] = now + CONTENDED_S

    def _learn(self, plan: Plan) -> None:
        """After sm_apply: the session as written (this instance wrote it last)."""
        commit = plan.commit
        assert commit is not None
        if commit.meta is None and plan.known is None:
            self.forget(plan.session_id)
            return
        known = self._learned(plan, plan.bodies, plan.links, plan.row)
        if known is not None:
            self._remember(plan.session_id, known)

    @staticmethod
    def _learned(plan: Plan, texts: list[str], links: dict[str, plain.Link] | None,
                 row: str | None) -> Known | None:
        """The session as ``plan``'s commit leaves it (its entries stored as ``texts``), or
        ``None`` when that is not known (neither the commit nor the plan knows its meta)."""
        commit = plan.commit
        assert commit is not None
        old = plan.known
        meta, text, entries = commit.meta, plan.meta_text, commit.entries
        if (old is not None and meta is not None and text is not None and links is not None
                and len(entries) == 1 and commit.leaf is not None):
            # (a plain append's: the same steps as below for one entry, known meta and links)
            entry = entries[0]
            entry_id = entry["id"]
            bodies = old.bodies.copy()
            bodies.pop(entry_id, None)  # (re-inserted last: the newest)
            bodies[entry_id] = (entry, texts[0])
            while len(bodies) > KNOWN_BODIES:
                del bodies[next(iter(bodies))]  # the oldest
            return Known(meta, text, commit.leaf, bodies, plan.at_leaf, links, row, plan.version, plan.since)
        meta = commit.meta if commit.meta is not None else old.meta if old is not None else None
        text = plan.meta_text if plan.meta_text is not None else old.text if old is not None else None
        if meta is None or text is None:
            return None
        leaf = commit.leaf if commit.leaf is not None else old.leaf if old is not None else None
        bodies = old.bodies.copy() if old is not None else {}
        for entry, body in zip(commit.entries, texts, strict=True):
            bodies.pop(entry["id"], None)  # (re-inserted last: the newest)
            bodies[entry["id"]] = (entry, body)
        while len(bodies) > KNOWN_BODIES:
            del bodies[next(iter(bodies))]  # the oldest
        if links is None:  # written by sm_apply / sm_append_at: the known links of the new leaf's chain
            links = old.links if old is not None else {}
            if links:  # (an entry it rewrote forgotten: its links are the server's)
                rewritten = {key(e["id"]) for e in commit.entries}
                links = plain.chain({k: v for k, v in links.items() if k not in rewritten}, key_or_none(leaf))
        # An append the server placed left the text its cut describes (see at_leaf.segments).
        return Known(meta, text, leaf, bodies, plan.at_leaf, links, row, plan.version, plan.since)
