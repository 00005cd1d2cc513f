"""Events across instances: an outbox table plus ``LISTEN``/``NOTIFY``.

Each call's events are inserted as outbox rows in the call's own
transaction (:meth:`Outbox.record`, from ``run_call``), together with one
``pg_notify`` per batch of ids. ``NOTIFY`` is delivered at commit, so a
rolled-back mutation notifies nobody, and it carries only ids: a payload of
any size is read whole from its row (NOTIFY's own limit is 8000 bytes).

Every instance with observers runs one listener thread (two connections of its own, opened
at once: one listens, one reads rows) that hands other instances' events to its
subscribers; the instance that made a mutation delivers it itself, so it
skips its own rows. It does so at its own notification's place in the stream
(NOTIFY order is commit order): an observed call is noted in flight before it
sends anything (:meth:`Outbox.begin_call`) and records its rows and its
notification under a name of its own (``"<instance>.<n>"``, sent as the instance
parameter every write sends already); at an own notification the listener hands
on what came before it, then waits while the call it names hands its events on
(:meth:`Outbox.await_turn`), so a session's commits reach observers in commit
order, each once. An own notification naming no call in flight (a call begun
before the listener listened) is passed over: never taken for another call's. A
call nobody here observed as it began records as ``"<instance>+"``, which the
listener hands on as another instance's (an observer added meanwhile is owed it).
Ids already delivered are remembered (bounded), so a replay never repeats what
this instance saw (nor what was committed before it first listened).

After a lost connection the listener reconnects and replays the rows it
may have missed (ids above its high-water mark, less a slack for
transactions that took an id before others but committed after them). When
it was away longer than the retention (counted from its last confirmed
exchange with the server), those rows may be pruned: it resyncs
instead (every session's state as events, as after an adapter swap), so
observers may see duplicates then, never a gap. The resync also announces
the deletions it missed: the listener remembers the sessions its observers
know of (:class:`~session_manager.store._known.KnownSessions`: those that
existed when it first connected, then every event it or its own instance
handed on), and each one gone from the database gets one
``session::on-deleted``. Rows older than the
retention are pruned by every listener once a minute (or once per
retention, when that is shorter).

The listener runs only where there is something to deliver to (issue 24: each
listening process pays for every append's notification): it starts when a
subscriber wants some event function as it subscribes, or when a host calls
:meth:`Outbox.ready` (the embedded host as its first observer is added, the iii
worker once subscribed); from then on it gets every later event of other
instances. An instance that writes without listening prunes instead, at the
same pace, on a thread and a short connection of its own (a cheap ``DELETE`` on
``outbox_created``): the rows never pile up when nobody listens, and, pruned by
age alone, a killed process never pins them.

Who is owed events (issue 24): an append (``sm_append_at``) records its events
(outbox rows, the NOTIFY) only while some instance observes, so an unobserved
deployment's append is one transaction with no outbox row. A listener registers
before it counts on anything: a writable one upserts its row in ``observers``
(renewed while it listens, every quarter of the retention at most 15 s, behind the gate too; it
expires after the retention plus a margin, so a killed process pins nothing for
long), a read-only one holds a shared session lock on its listening connection
(it writes nothing; the lock goes with the connection). Both first take, alone,
the schema's gate, which every such append holds shared from its check for
observers to its commit: the registration waits for every append that checked
without seeing it. The rule: an observer is owed the events of the mutations
that commit after its registration committed, and gets each once, a session's
in commit order (rows are recorded for every one of them: any append that did
not see the registration committed before it). An append to a session just
before that may be delivered or not, as before. A listener whose registration
may have lapsed meanwhile (its renewal came later than the row's expiry; a
read-only one's connection was lost) registers again and resyncs instead of
replaying. The other writes (``sm_apply``, the transactional path) record
every mutation, observed or not.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from ..._wire.events import EVENT_FUNCTIONS, Event
from .._core.codec import encode_line as encode_json
from .._core.codec import loads
from ..base import EventSink
from ..serial import Serial
from ..sql.outbox import Subscribers

if TYPE_CHECKING:
    from ..resync import KnownSessions, StateSource
    from .core import PgDatastore, Tx

__all__ = ["NOTIFY_BATCH", "TURN_WAIT_S", "Outbox", "Turn", "channel_of", "registration"]

log = logging.getLogger("session_manager.store.postgres.outbox")

NOTIFY_BATCH = 300  # events per NOTIFY: 300 "<id>:<n>" of up to 19 digits fit the 8000-byte payload limit
REPLAY_SLACK = 1000  # ids below the high-water mark replayed after a reconnect
SEEN_MAX = 100_000
PRUNE_EVERY_S = 60.0
POLL_S = 0.5
# (index outbox_created); observers' rows past their expiry go too (a killed process's).
PRUNE = ("WITH gone AS (DELETE FROM observers WHERE expires < now())"
         " DELETE FROM outbox WHERE created_at < now() - make_interval(secs => %s)")
# The registration (see "Who is owed events"): the gate taken alone waits for every append
# that checked for observers without seeing this one; the row or the read-only lock follows.
# Each is sent as one query string (one implicit transaction, no parameters): the server never
# holds the gate while it waits on this process (a stopped or cut-off listener would stall every
# append behind its registration until its connection died).
_GATE = "SELECT pg_advisory_xact_lock(hashtext(current_schema()), 1)"
# It answers whether its previous row was still live once the gate was held (by the server's
# clock: the listener's own may not tell an expiry the server saw, e.g. after a clock step).
_REGISTER = (_GATE + "; WITH old AS (SELECT expires > clock_timestamp() AS live FROM observers"
             " WHERE instance = {instance})"
             " INSERT INTO observers (instance, expires) VALUES ({instance}, now() + make_interval(secs => {life}))"
             " ON CONFLICT (instance) DO UPDATE SET expires = EXCLUDED.expires"
             " RETURNING coalesce((SELECT live FROM old), false)")
# A renewal is a registration too (behind the gate, the expiry checked by the clock once it is
# held): else one whose transaction began before the row's expiry could renew it after an
# append that began past that expiry had checked and recorded nothing (an unnoticed gap).
_RENEW = (_GATE + "; UPDATE observers SET expires = now() + make_interval(secs => {life})"
          " WHERE instance = {instance} AND expires > clock_timestamp()")
_READ_ONLY_OBSERVER = "SELECT pg_advisory_lock_shared(hashtext(current_schema()), 2)"
# A first listener's starting point, one statement, one snapshot: the high-water mark; the
# rows already committed within a later replay's reach, which happened before it listened:
# never its to deliver (rows still in flight are not visible yet, so they stay deliverable);
# and the sessions, listed with that mark: a session created or deleted since is either in
# this listing or in a row still to deliver.
_START = sql.SQL(
    "WITH h AS (SELECT coalesce(max(id), 0) AS high FROM outbox)"
    " SELECT h.high, ARRAY(SELECT id FROM outbox WHERE id > h.high - {slack} AND id <= h.high),"
    " ARRAY(SELECT meta FROM sessions WHERE meta IS NOT NULL) FROM h"
).format(slack=sql.Literal(REPLAY_SLACK))
BEAT_MAX_S = 15.0  # a listener renews its row at least this often
START_DELAY_S = 1.0  # the listener's first connection, when no host waits for it (see _run)


TURN_WAIT_S = 5.0  # a call waits this long at most for the listener to reach its notification


class Turn:
    """An observed call in flight (:meth:`Outbox.begin_call`); guarded by the outbox's condition."""

    __slots__ = ("done", "free", "generation", "given", "ready", "sender")

    def __init__(self, generation: int, sender: str, free: bool = False) -> None:
        self.generation = generation
        self.sender = sender  # what its rows and notification name as their instance: "<instance>.<call>"
        self.free = free  # an observer's own call: waits for no turn (see Outbox.begin_call)
        self.given = False  # the listener reached its notification
        self.ready = False  # it knows its events and waits for its turn (Outbox.await_turn)
        self.done = False  # its events handed on (or it failed)


def registration(statement: str, instance: str, life_s: float) -> sql.Composed:
    """:data:`_REGISTER` or :data:`_RENEW` for ``instance``, valid ``life_s`` seconds: values
    inlined (several statements in one query string take no parameters)."""
    return sql.SQL(statement).format(instance=sql.Literal(instance), life=sql.Literal(float(life_s)))


@functools.lru_cache(maxsize=64)
def channel_of(schema: str) -> str:
    """The NOTIFY channel of one schema (an identifier under 63 bytes; hashed once, not per write)."""
    return "session_manager_" + hashlib.sha256(schema.encode("utf-8")).hexdigest()[:24]


class Outbox:
    """One instance's side of the outbox: record its events, listen for the others'."""

    def __init__(self, db: PgDatastore, retention_s: float, state: StateSource) -> None:
        self._db = db
        self._state = state  # what a resync lists (the store's reads)
        self._retention_s = retention_s
        self._channel = channel_of(db.settings.schema)
        self.subscribers = Subscribers()
        self._seen: OrderedDict[int, None] = OrderedDict()
        self._high = -1  # highest id delivered or skipped; -1 until the first connect
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._wanted_now = threading.Event()  # ready() was called (or close()): connect without delay
        self._idle = False  # idle() asked the listener to stop (nobody wants events): it leaves at its next poll
        self._thread: threading.Thread | None = None
        self._last_prune = 0.0
        self._pruning: threading.Thread | None = None  # the pruner of an instance that writes, not listening
        # Whether that pruner runs (set as it starts, cleared as it leaves): read on every commit of
        # such an instance, where Thread.is_alive() is three Python calls.
        self._pruner_runs = False
        # Tests only: called on the calling thread right after a call's COMMIT, before its own
        # events are handed on (another instance's commit can be made to land in that window).
        self.after_commit: Callable[[], None] | None = None
        # This instance's observed calls in flight (see begin_call), by sender; the condition
        # guards them and wakes whoever waits on a turn given or a call over.
        self._calls: dict[str, Turn] = {}
        self._count = 0  # calls noted so far (each one's sender: "<instance>.<count in hex>")
        self.unheard = db.instance + "+"  # the sender of a call nobody here observed as it began (begin_call)
        self._turns = threading.Condition()
        self._generation = 0  # counts the listener's disconnections (a waiting call's note may be lost)
        # Its registration (see "Who is owed events"): renewed every _beat_s, valid for _life_s
        # from when it was sent (the server counts from later); the last one sent, in monotonic time.
        self._beat_s = min(BEAT_MAX_S, max(POLL_S, retention_s / 4))
        self._life_s = retention_s + max(4 * self._beat_s, 10 * POLL_S)
        self._beat_ok: float | None = None
        # Deliveries, one at a time in stream order. The listener only queues them (a background
        # thread of the serial runs them): calls wait on the listener, so it never waits on an
        # observer (one may make a call, or wait for a thread that does).
        self._serial = Serial("session-manager-outbox-delivery")

    @property
    def known(self) -> KnownSessions:
        """What this instance's observers were told exists."""
        return self.subscribers.known

    # -- the writing side (inside the mutation's transaction) -----------------

    def record(self, tx: Tx, events: list[Event]) -> None:
        """Insert the events' rows and notify their ids: one statement per batch."""
        conn = tx.conn
        sender = self._db.local.state.sender or self._db.instance  # (see begin_call)
        for at in range(0, len(events), NOTIFY_BATCH):
            batch = events[at : at + NOTIFY_BATCH]
            # The payload "<instance>[.<call>]|<id>:<n>,...": listeners skip their own
            # rows and fetch only rows of event functions someone observes.
            conn.execute(
                "WITH ins AS (INSERT INTO outbox (instance, function_id, payload)"
                " SELECT %(instance)s, f, p FROM unnest(%(fids)s::text[], %(payloads)s::text[]) AS u(f, p)"
                " RETURNING id, function_id)"
                " SELECT pg_notify(%(channel)s, %(instance)s || '|' || string_agg("
                "id::text || ':' || array_position(%(all)s::text[], function_id)::text, ',' ORDER BY id)) FROM ins",
                {
                    "instance": sender,
                    "fids": [e.function_id for e in batch],
                    "payloads": [encode_json(e.payload).decode("utf-8") for e in batch],
                    "channel": self._channel,
                    "all": list(EVENT_FUNCTIONS),
                },
            )

    def renotify(self) -> None:
        """Notify the calling call's rows again (those recorded as its sender, among the
        latest): an ``sm_append_call`` that landed but whose answer was lost may have ended
        before its notification (listeners skip the ids they have seen, so a repeat is
        harmless; this instance's listener hands that call its turn there). Best effort: a
        listener that misses it replays the rows when it reconnects."""
        try:
            self._db.rows(
                "SELECT pg_notify(%(channel)s, %(sender)s || '|' || string_agg("
                "id::text || ':' || array_position(%(all)s::text[], function_id)::text, ',' ORDER BY id))"
                " FROM (SELECT id, function_id FROM outbox WHERE instance = %(sender)s"
                " AND id > (SELECT max(id) FROM outbox) - %(reach)s ORDER BY id DESC LIMIT %(n)s) AS latest",
                {"channel": self._channel, "sender": self._db.local.state.sender or self._db.instance,
                 "all": list(EVENT_FUNCTIONS), "reach": 10 * REPLAY_SLACK, "n": NOTIFY_BATCH},
            )
        except Exception:
            log.warning("could not notify the events of a settled append again", exc_info=True)

    def committed(self, tx: Tx | None, events: list[Event], token: object = None,
                  deliver: EventSink | None = None) -> None:
        """This instance's own events, once committed (it delivers them itself,
        so the listener never sees them): the record of known sessions follows,
        then ``deliver`` gets them."""
        if self.after_commit is not None:
            self.after_commit()
        if self._thread is not None:
            self.known.note(events)
        elif events and not self._pruner_runs:  # (running: nothing to start, no call)
            self._prune_unheard()
        if events and deliver is not None:
            deliver(events)

    def abandoned(self, token: object) -> None:
        """A call's commit failed: nothing to undo here."""

    # -- a call's own events in commit order with the others' -------------------------

    def begin_call(self, free: bool = False) -> Turn | None:
        """Note an observed call about to run (before anything is sent): the listener
        holds back every notification after the call's own until the call has handed
        its events on (:meth:`await_turn`, :meth:`end_call`). The call records its rows and
        its notification as its *sender*, ``"<instance>.<n>"`` (the caller sets it as
        ``local.sender`` while the call runs: the instance parameter every write sends
        already, so no statement and no round trip is added), so the listener knows the
        call of each own notification exactly, with nothing to fetch: an own notification
        naming no noted call (made by a call begun before it listened, or by another
        release's process, or sent again) is nobody's turn and is passed over at once.
        ``None`` when there is no stream to order with (the listener is not connected). A
        call on the listener's thread waits for no turn (it would wait for itself): it is
        *free*. (An observer's call waits for its turn as any: the listener runs no observer,
        so it reaches the call's notification.) A call nobody observes is ``free`` too.
        A call nobody here observed as it began (noted or not) hands its events to nobody:
        it records them as :attr:`unheard` (``"<instance>+"``), which the listener hands on
        as another instance's (to the observers that want them once it hears them: one
        added meanwhile is owed them when they commit after its registration), never as
        this instance's own."""
        if self._thread is None:  # (nothing listens: no stream, nothing to note)
            return None
        free = free or threading.current_thread() is self._thread
        with self._turns:  # (with _lost: a turn noted while listening is released when it stops)
            if not self._listening.is_set() and not free:
                return None
            if free:  # (recorded as the instance: its notification names no call, passed over)
                return Turn(self._generation, self._db.instance, free)
            self._count += 1
            turn = Turn(self._generation, f"{self._db.instance}.{self._count:x}")
            self._calls[turn.sender] = turn
        return turn

    def await_turn(self, turn: Turn, events: list[Event]) -> None:
        """Wait until the listener reaches the call's own notification (every event
        committed before it handed on; none after it until :meth:`end_call`). Not for
        ever: a lost listener or notification lets the call hand its events on at once
        (or after ``TURN_WAIT_S``): out of order then, never lost nor twice."""
        if turn.free:
            return
        deadline = time.monotonic() + TURN_WAIT_S
        with self._turns:
            turn.ready = True
            self._turns.notify_all()
            while not turn.given:
                left = deadline - time.monotonic()
                if left <= 0 or turn.generation != self._generation or self._stop.is_set():
                    if left <= 0:
                        log.warning("postgres events: a call's notification was not heard in time;"
                                    " its events are handed on unordered")
                    return
                self._turns.wait(left)

    def queue_own(self, deliver: EventSink, events: list[Event]) -> None:
        """Queue a call's own events for ``deliver`` at its turn's place (after what the listener
        queued before it; the listener goes on once :meth:`end_call` says so): :meth:`drain`
        runs the queue."""
        self._serial.put(functools.partial(deliver, events))

    def drain(self) -> None:
        """Run the queued deliveries here, unless a thread runs them already (it runs ours)."""
        self._serial.drain()

    def end_call(self, turn: Turn) -> None:
        """The call is over (its events handed on, or it failed): the listener goes on (its
        notification, if heard later, names no noted call: passed over)."""
        if turn.free:
            return
        with self._turns:
            turn.done = True
            self._calls.pop(turn.sender, None)
            self._turns.notify_all()

    # -- the reading side -----------------------------------------------------------

    def subscribe(self, sink: EventSink, wants: Callable[[str], bool] | None = None) -> Callable[[], None]:
        """Add a sink. The listener starts now only if it wants some event function
        already (a host whose observers come later starts it in :meth:`ready`)."""
        with self.subscribers.lock:
            entry = self.subscribers.add(sink, wants)
            if wants is None or any(wants(f) for f in EVENT_FUNCTIONS):
                self._start()
        # Not waited for here: a cold open does not wait for the listener's
        # connections; a host waits in ready() before it counts on the events.
        return lambda: self.subscribers.drop(entry)

    def _start(self) -> None:
        """Start the listener unless it runs (the caller holds the subscribers' lock)."""
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name="session-manager-outbox", daemon=True)
            self._thread.start()

    def ready(self) -> None:
        """Events committed after this returns reach the sinks (bounded wait: an
        unreachable server leaves the listener retrying in the background). Starts the
        listener if a sink was given but it does not run yet (nobody observed so far)."""
        with self.subscribers.lock:
            self._idle = False  # (a listener about to leave stays)
            if self._thread is None and self.subscribers.count():
                self._wanted_now.set()  # (no start delay: a host waits for it)
                self._start()
        if self._thread is not None:
            self._wanted_now.set()
            self._listening.wait(timeout=self._db.settings.connect_timeout_ms / 1000 + 1)

    def idle(self) -> None:
        """No sink wants any event function (the embedded host's last observer left): the
        listener leaves at its next poll (its connections closed, its wake-up per append
        gone), unless :meth:`ready` comes first; a later :meth:`ready` starts a new one,
        which, as the first, delivers only what is committed from then on."""
        with self.subscribers.lock:
            if self._thread is not None and not self._stop.is_set() and not self.subscribers.wanting():
                self._idle = True

    def _leave(self) -> bool:
        """Stop the listener if :meth:`idle` asked and :meth:`ready` did not come since (on its thread)."""
        with self.subscribers.lock:
            if not self._idle or self._stop.is_set():
                return False
            self._idle = False
            self._lost()  # (calls waiting for their turn deliver at once)
            self._thread = None
            self._high = -1  # the next listener starts from its own connection: nothing replayed
            self._seen.clear()
            return True

    @property
    def observing(self) -> bool:
        """Whether this instance's listener runs (it registers as an observer: its appends
        record their events, so they skip the plain statement, see plain.py)."""
        return self._thread is not None

    @property
    def listening(self) -> bool:
        """Whether the listener is connected (tests wait on it after an outage)."""
        return self._listening.is_set()

    def close(self) -> None:
        """Stop the listener (woken by an empty notification, not left to its poll)."""
        self._stop.set()
        self._wanted_now.set()
        self._serial.close()
        pruning = self._pruning
        if pruning is not None:
            pruning.join(timeout=self._db.settings.connect_timeout_ms / 1000 + 1)
        thread = self._thread
        if thread is None:
            return
        if self._listening.is_set() and not self._db.settings.read_only:  # (NOTIFY: not in a read-only session)
            try:
                with psycopg.connect(self._db.conninfo, autocommit=True) as conn:
                    conn.execute("SELECT pg_notify(%s, '')", (self._channel,))
            except psycopg.Error:
                pass  # the listener still stops at its next poll
        thread.join(timeout=5.0)

    def _run(self) -> None:
        backoff = 0.1
        # The last exchange the server confirmed (a notification, a fetch, a
        # prune): the time away is counted from it, not from when the failure
        # was noticed, so a silent partition (noticed only when keepalives
        # give up) counts whole.
        contact: float | None = None
        # Until a host waits for the events (ready()), the listener only prunes and
        # keeps the known sessions: it connects a moment later, so a cold open's
        # first call does not share the server's and the machine's time with its
        # two handshakes.
        self._wanted_now.wait(START_DELAY_S)
        while not self._stop.is_set():
            if self._idle and self._leave():
                return
            try:
                listen, fetch = self._connect_pair()
                with listen, fetch:
                    listen.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                    first = self._high < 0
                    lapsed = self._register(listen, fetch)  # (a first one takes its starting point there)
                    if not first:
                        away = None if contact is None else time.monotonic() - contact
                        self._catch_up(fetch, float("inf") if lapsed else away)
                    contact = time.monotonic()
                    backoff = 0.1
                    self._listening.set()
                    while not self._stop.is_set():
                        if self._idle and self._leave():
                            return  # (the connections closed on the way out)
                        # Back as soon as something arrives (with whatever came in the same packet).
                        notes = [note.payload for note in listen.notifies(timeout=POLL_S, stop_after=1)]
                        if notes:
                            self._take(fetch, notes)
                        if self._maybe_prune(fetch) or notes:
                            contact = time.monotonic()
                        self._maybe_renew(listen, fetch)
                    self._unregister(fetch)
            except psycopg.Error as e:
                self._lost()
                log.warning("%s", self._db.say(f"event listener disconnected ({e}); reconnecting"))
            except Exception:
                self._lost()
                log.exception("event listener failed; restarting it")
            self._stop.wait(backoff)
            backoff = min(backoff * 2, 2.0)
        self._lost()

    def _register(self, listen: psycopg.Connection[Any], fetch: psycopg.Connection[Any]) -> bool:
        """Register as an observer (see "Who is owed events"); whether the previous
        registration may have lapsed meanwhile (appends may have recorded nothing for this
        instance: it resyncs rather than replays): its row was not live when the gate was held
        (by the server's clock), or its own clock says it may have expired. A read-only
        listener's lock went with its lost connection: each reconnect is a lapse."""
        before = self._beat_ok
        sent = time.monotonic()
        live = False
        # A first listener takes its starting point while the gate is held, before the
        # registration commits: an append committing after the registration but before a
        # later snapshot would be counted as before its time (marked seen, never delivered).
        # In the same query string as the gate (one implicit transaction): the server never
        # waits on this client while it holds the gate.
        first = self._high < 0
        start = sql.SQL("; ") + _START if first else sql.SQL("")
        try:
            if self._db.settings.read_only:
                listen.execute(_READ_ONLY_OBSERVER)  # (not held yet: this connection is new)
                cur = listen.execute(sql.SQL(_GATE) + start)  # (autocommit: one implicit transaction)
            else:
                cur = fetch.execute(registration(_REGISTER, self._db.instance, self._life_s) + start)
                row = cur.fetchone() if cur.nextset() else None  # (the INSERT's answer: the second)
                live = bool(row and row[0])
            if first:
                self._start_at(cur.fetchone() if cur.nextset() else None)
        except BaseException:
            if first:  # (not registered: the next connection starts afresh)
                self._high = -1
                self._seen.clear()
            raise
        self._beat_ok = sent
        return before is not None and (not live or time.monotonic() - before > self._life_s)

    def _maybe_renew(self, listen: psycopg.Connection[Any], fetch: psycopg.Connection[Any]) -> None:
        """Renew a writable listener's row when due; a row that may have expired meanwhile
        (this thread was held up longer than its life) is registered again, then resynced."""
        if self._db.settings.read_only or self._beat_ok is None:
            return
        sent = time.monotonic()
        if sent - self._beat_ok < self._beat_s:
            return
        renewed = False
        if sent - self._beat_ok < self._life_s:
            cur = fetch.execute(registration(_RENEW, self._db.instance, self._life_s))
            renewed = cur.nextset() is True and cur.rowcount == 1  # (the UPDATE's result: the second)
        if renewed:
            self._beat_ok = sent
            return
        log.warning("postgres events: the listener's registration lapsed; registering again and resyncing")
        self._register(listen, fetch)
        self._catch_up(fetch, float("inf"))

    def _unregister(self, fetch: psycopg.Connection[Any]) -> None:
        """The listener stops: appends need not record for this instance any longer (best effort:
        a row left behind expires)."""
        if self._db.settings.read_only:
            return
        with contextlib.suppress(psycopg.Error):
            fetch.execute("DELETE FROM observers WHERE instance = %s", (self._db.instance,))

    def _lost(self) -> None:
        """The listener stopped (or lost its connection): the notifications of the calls
        waiting for their turn may never come; they hand their events on now."""
        with self._turns:
            self._listening.clear()
            self._generation += 1
            self._turns.notify_all()

    def _connect_pair(self) -> tuple[psycopg.Connection[Any], psycopg.Connection[Any]]:
        """The listening and the fetching connection, opened at once (a cold open waits
        for the listener: one connection's handshake instead of two in a row)."""
        got: list[psycopg.Connection[Any] | BaseException] = []

        def fetching() -> None:
            try:
                got.append(psycopg.connect(self._db.conninfo, autocommit=True))
            except BaseException as e:  # handed to the listener's thread, which raises it
                got.append(e)

        helper = threading.Thread(target=fetching, name="session-manager-outbox-connect", daemon=True)
        helper.start()
        try:
            listen = psycopg.connect(self._db.conninfo, autocommit=True)
        except BaseException:
            helper.join()  # bounded by connect_timeout
            if got and isinstance(got[0], psycopg.Connection):
                got[0].close()
            raise
        helper.join()
        fetch = got[0] if got else RuntimeError("the outbox's fetching connection was not opened")
        if isinstance(fetch, BaseException):
            listen.close()
            raise fetch
        return listen, fetch

    def _start_at(self, row: tuple[Any, ...] | None) -> None:
        """A first listener's starting point (:data:`_START`'s row, read in :meth:`_register`
        before its registration commits): only what commits from now on is delivered."""
        if row is None:
            raise psycopg.OperationalError("postgres events: the listener's starting point was not read")
        self._high = int(row[0])
        for oid in row[1]:
            self._mark_seen(int(oid))
        self.known.load(loads(m.encode("utf-8")) for m in row[2])

    def _catch_up(self, fetch: psycopg.Connection[Any], away_s: float | None) -> None:
        """What a reconnected listener may have missed: replayed, or resynced when away too long."""
        if away_s is not None and away_s > self._retention_s:
            self._resync()
            row = fetch.execute("SELECT coalesce(max(id), 0) FROM outbox").fetchone()
            self._high = max(self._high, int(row[0]) if row else 0)
            return
        rows = fetch.execute(
            "SELECT id, instance, function_id, payload FROM outbox WHERE id > %s ORDER BY id",
            (self._high - REPLAY_SLACK,),
        ).fetchall()
        self._hand_on(rows)

    def _wanted(self, payload: str) -> list[int]:
        """The notified ids worth fetching: another instance's, of an observed (or tracked)
        function; this instance's unheard calls' (see :meth:`begin_call`) only when observed
        (what tracking keeps, this instance knew as it wrote them: fetched, a create's
        notification cost an unobserved instance a round trip)."""
        instance, _, items = payload.partition("|")
        if self._own(instance) or not items:
            return []
        wants = self.subscribers.filters()
        unheard = instance == self.unheard
        if unheard and not wants:
            return []
        out: list[int] = []
        for item in items.split(","):
            oid, _, n = item.partition(":")
            index = int(n) - 1 if n.isdigit() else -1
            fid = EVENT_FUNCTIONS[index] if 0 <= index < len(EVENT_FUNCTIONS) else None
            if fid is None or (any(w is None or w(fid) for w in wants) if unheard
                               else self.subscribers.wanted(fid, wants)):
                out.append(int(oid))
        return out

    def _own(self, instance: str) -> bool:
        """Whether a row's or a notification's instance is this one's (or one of its calls', see begin_call)."""
        own = self._db.instance
        return instance == own or (instance.startswith(own) and instance[len(own) : len(own) + 1] == ".")

    def _take(self, fetch: psycopg.Connection[Any], notes: list[str]) -> None:
        """Hand on what the notifications ``notes`` (in commit order) announce: other
        instances' events, and at each of this instance's own notifications, the turn of
        the call that made it (see :meth:`begin_call`)."""
        ids: list[int] = []
        own = self._db.instance
        for payload in notes:
            if payload.startswith(own):
                sender = payload.partition("|")[0]
                if self._own(sender):  # (else another instance's, or this one's unheard: see begin_call)
                    if self._calls:  # (unlocked: a call is noted before anything it sends)
                        if ids:
                            self._deliver(fetch, ids)
                            ids = []
                        self._own_turn(sender)
                    continue
            ids.extend(self._wanted(payload))
        if ids:
            self._deliver(fetch, ids)

    def _own_turn(self, sender: str) -> None:
        """Give the turn to the call whose notification names it (see :meth:`begin_call`) and
        wait until it has handed its events on. A notification naming no noted call (made
        before the listener listened, or by a free call; a renotification of one over; a
        later batch of one whose turn was given) is passed over at once. A call that does
        not come for its turn within ``TURN_WAIT_S`` (held up between its commit and its
        events: the listener goes back to its connection meanwhile) hands them on when it
        does, unordered."""
        deadline = time.monotonic() + TURN_WAIT_S
        with self._turns:
            turn = self._calls.get(sender)
            if turn is None or turn.given:
                return
            turn.given = True
            self._turns.notify_all()
            while not turn.done and not self._stop.is_set():
                left = deadline - time.monotonic()
                if not turn.ready and left <= 0:
                    break
                self._turns.wait(POLL_S if turn.ready else min(left, POLL_S))
            self._calls.pop(sender, None)

    def _deliver(self, fetch: psycopg.Connection[Any], ids: list[int]) -> None:
        rows = fetch.execute(
            "SELECT id, instance, function_id, payload FROM outbox WHERE id = ANY(%s) ORDER BY id", (ids,)
        ).fetchall()
        self._hand_on(rows)

    def _hand_on(self, rows: list[tuple[Any, ...]]) -> None:
        events: list[Event] = []
        for oid, instance, function_id, payload in rows:
            if oid in self._seen:
                continue
            self._mark_seen(oid)
            self._high = max(self._high, oid)
            if not self._own(instance):
                events.append(Event(function_id, loads(payload.encode("utf-8"))))
        if events:
            self._serial.hand_off(functools.partial(self.subscribers.publish, events))

    def _mark_seen(self, oid: int) -> None:
        self._seen[oid] = None
        if len(self._seen) > SEEN_MAX:
            self._seen.popitem(last=False)

    def _resync(self) -> None:
        log.warning("event listener was away longer than the outbox retention; resyncing")
        # Known sessions taken before the resync lists the store (see KnownSessions.snapshot).
        known = self.known.snapshot()
        now = int(time.time() * 1000)
        # One session at a time, run by the delivery thread after what was queued before.
        self._serial.hand_off(functools.partial(self.subscribers.resync, self._state, known, now))

    def _maybe_prune(self, fetch: psycopg.Connection[Any]) -> bool:
        """Prune when due; True if it did (the server answered)."""
        now = time.monotonic()
        if self._db.settings.read_only or now - self._last_prune < min(PRUNE_EVERY_S, self._retention_s):
            return False  # (a read-only store writes nothing: the writers' listeners prune)
        self._last_prune = now
        fetch.execute(PRUNE, (self._retention_s,))
        return True

    def _prune_unheard(self) -> None:
        """An instance that writes without listening prunes in the listeners' stead: from
        a moment after its first commit (as the listener's first connection: a cold open's
        first calls keep the machine to themselves), a thread of its own prunes at the
        listeners' pace until the listener starts or the store closes, each time on a
        connection of its own (the callers' pool neither waits for it nor grows). It sleeps
        between prunes: an append costs it nothing."""
        if self._pruner_runs or self._db.settings.read_only:
            return
        with self.subscribers.lock:  # (a pruner ended when a listener started; one left since)
            if not self._pruner_runs and self._thread is None and not self._stop.is_set():
                self._pruner_runs = True
                self._pruning = threading.Thread(target=self._prune_while_unheard,
                                                 name="session-manager-outbox-prune", daemon=True)
                try:
                    self._pruning.start()
                except BaseException:
                    self._pruner_runs = False
                    raise

    def _prune_while_unheard(self) -> None:
        try:
            every = min(PRUNE_EVERY_S, self._retention_s)
            self._stop.wait(START_DELAY_S)
            while not self._stop.is_set() and self._thread is None:
                try:
                    with psycopg.connect(self._db.conninfo, autocommit=True) as conn:
                        conn.execute(PRUNE, (self._retention_s,))
                except psycopg.Error as e:  # best effort: the next one is due a minute later
                    if not self._stop.is_set():
                        log.warning("%s", self._db.say(f"could not prune the event outbox ({e})"))
                self._stop.wait(every)
        finally:
            self._pruner_runs = False  # (a later commit starts another, if still unheard)
