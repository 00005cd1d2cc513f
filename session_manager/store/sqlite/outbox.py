"""Events across processes: an outbox table every open store follows.

Writing: :meth:`Outbox.record` inserts one row per event in the mutation's
own transaction (from ``run_call``), so a rolled-back mutation leaves none
and the sequence (``AUTOINCREMENT``, under SQLite's single writer) is the
commit order. A newer ``on-message-updated`` row of an entry replaces the
older ones (observers keep the highest revision, as the spec tells them),
so a streamed reply leaves one row, not one per update. When no other store
follows the file, no row is written (nobody would read it; a follower that
registers later starts after this commit, as its registration waits for
the write lock).

Following: every store with a subscriber that wants some event function
(the embedded host's once it has an observer: it calls :meth:`Outbox.ready`
then) registers a row in ``readers``
(the sequence it is past, and when it last said so) and runs one thread
that checks ``PRAGMA data_version`` every ``poll_ms`` (a counter in shared
memory: no I/O when nothing changed) and, when another connection
committed, reads the rows past its sequence and hands other stores' events
to its subscribers in sequence order. Its own store's calls hand theirs on
themselves, in that same order (:meth:`Outbox.committed`): under the same
delivery lock, after the other stores' rows committed before them; and a
call in flight (its position noted before its COMMIT, dropped once its
events are handed on) holds the follower back from every row committed
after it, so another process's commit that lands between this call's
COMMIT and its delivery is never delivered first (the follower reads it
again at its next poll). Once a second it renews its row and prunes: rows every
live reader is past, readers silent for longer than the retention (a
killed process), and rows older than the retention whoever has not read
them. A follower that was itself away longer than that (a suspended
process), whose reader row was pruned, or whose renewal comes later than
the retention (writers counted it out and wrote no rows for it meanwhile,
even if nobody pruned its row yet), resyncs like a reload: every
session's state as events, and one ``on-deleted`` per session its
observers knew of that is gone.

A read-only store (which writes nothing, so registers no reader row) follows
no outbox rows: :meth:`Outbox.subscribe` hands its sinks to a
:class:`.watch.StateWatch`, which compares states instead.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..._wire.events import EVENT_FUNCTIONS, ON_MESSAGE_UPDATED, Event
from .._core.codec import encode_line as encode_json
from .._core.codec import loads
from ..base import EventSink
from ..serial import Serial
from ..sql.outbox import Subscribers
from .watch import StateWatch

if TYPE_CHECKING:
    from ..resync import KnownSessions, StateSource
    from .core import SqliteDatastore

__all__ = ["POSITION_COLUMNS", "Outbox", "now_ms"]

log = logging.getLogger("session_manager.store.sqlite.outbox")

# The last committed sequence, and whether another live store follows the file (parameters:
# this store's instance, the oldest live reader's time); an append's read brings them along.
POSITION_COLUMNS = ("(SELECT seq FROM sqlite_sequence WHERE name = 'outbox'),"
                    " EXISTS (SELECT 1 FROM readers WHERE instance != ? AND seen_ms >= ?)")
_POSITION_SQL = "SELECT " + POSITION_COLUMNS
BEAT_S = 1.0  # how often a follower renews its reader row and prunes


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _Clock:
    """A follower's marks (monotonic seconds): its last poll, beat attempt and renewal."""

    contact: float
    version: int | None = None
    beat: float = 0.0
    renewed: float = 0.0

    def __post_init__(self) -> None:
        self.beat = self.renewed = self.contact


class Outbox:
    """One store's side of the outbox: record its events, follow the others'."""

    def __init__(self, db: SqliteDatastore, state: StateSource) -> None:
        self._db = db
        self._state = state  # what a resync lists (the store's reads)
        self._retention_ms = db.retention_ms
        self._poll_s = db.settings.poll_ms / 1000
        self.subscribers = Subscribers()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None
        self._seq = 0  # the highest sequence handed on (or skipped)
        # Rows are handed on (by the follower, or by a call catching up before its own events,
        # then handing those on) one delivery at a time, in order, and no thread waits for
        # another's (an observer may call back into the store, or wait for a thread that does).
        self._serial = Serial("session-manager-sqlite-delivery")
        # The positions (the sequence every commit before it reached) of this store's calls
        # committing or committed whose events are not handed on yet: the follower hands on
        # no row past the lowest (a later commit). Noted before the COMMIT, under the write lock.
        self._in_flight: list[int] = []
        self._in_flight_lock = threading.Lock()
        # This store's calls with events, numbered as they record (under the write lock: in
        # commit order, whichever of this process's threads made them), and handed to the
        # delivery queue in that order: a call that committed after another of this store's
        # yet reached the queue first waits there (its number noted with its delivery) until
        # the earlier one is queued, by whichever of the two comes last. (A call that thereby
        # finds its delivery queued by another thread returns before its observers ran, as
        # when it finds a delivery running: Serial's price.)
        self._tickets = 0  # the last number given
        self._queued = 0  # the last number queued (or abandoned)
        self._waiting: dict[int, Callable[[], None] | None] = {}
        self._tickets_lock = threading.Lock()
        self.held = False  # the follower left rows for after a call's own events (read again next poll)
        self._watch: StateWatch | None = None  # a read-only store's follower (no reader row)
        self._idle = False  # idle() asked the follower to stop (nobody wants events): it leaves at its next poll
        # Tests only: called on the calling thread right after a call's COMMIT, before its own
        # events are handed on (another process's commit can be made to land in that window).
        self.after_commit: Callable[[], None] | None = None

    @property
    def known(self) -> KnownSessions:
        """What this store's observers were told exists."""
        return self.subscribers.known

    # -- the writing side (inside the mutation's transaction) -----------------

    def record(self, conn: sqlite3.Connection, events: list[Event]) -> tuple[int, int] | None:
        """Inside a mutation (holding the write lock): insert the events' rows, superseding
        older updates of the same entry, when another store follows the file. Returns the
        sequence every commit before this one reached (both read by one statement, or noted by
        the append's read in this transaction: :meth:`.reads.SqliteReads.meta_and_leaf_to_commit`)
        with the call's number in this store's commit order, or ``None`` when this store follows
        nobody or the call has no events."""
        following = self._thread is not None
        if not events and not following:
            return None
        instance = self._db.instance
        state = self._db.local.state
        noted, state.position = state.position, None
        if noted is not None:  # read in this transaction (the write lock held since): still current
            last, others = noted
        else:
            last, others = conn.execute(_POSITION_SQL, (instance, now_ms() - self._retention_ms)).fetchone()
        before = (int(last) if last is not None else 0) if following else None
        if events and others:  # (else nobody else follows this file)
            now = now_ms()
            for event in events:
                entry_key = None
                if event.function_id == ON_MESSAGE_UPDATED:
                    payload = event.payload
                    entry_key = json.dumps([payload.get("session_id"), payload.get("entry_id")])
                    conn.execute("DELETE FROM outbox WHERE entry_key = ?", (entry_key,))
                conn.execute("INSERT INTO outbox (instance, function_id, entry_key, payload, created_ms)"
                             " VALUES (?, ?, ?, ?, ?)",
                             (instance, event.function_id, entry_key, encode_json(event.payload).decode("utf-8"),
                              now))
        if before is None or not events:
            return None
        with self._in_flight_lock:  # in flight from before the COMMIT: see _follow
            self._in_flight.append(before)
        with self._tickets_lock:
            self._tickets += 1
            return before, self._tickets

    def abandoned(self, token: tuple[int, int] | None) -> None:
        """The COMMIT of a call :meth:`record` noted failed: no longer in flight, nor awaited."""
        if token is not None:
            self._land(token[0])
            self._queue(token[1], None)

    def _queue(self, ticket: int, delivery: Callable[[], None] | None) -> None:
        """``delivery`` (``None``: the call's COMMIT failed) into the delivery queue once every
        call of this store that committed before it is in, then the queue run here unless a
        delivery runs."""
        with self._tickets_lock:
            self._waiting[ticket] = delivery
            while self._queued + 1 in self._waiting:
                self._queued += 1
                ready = self._waiting.pop(self._queued)
                if ready is not None:
                    self._serial.put(ready)
        self._serial.drain()

    def _land(self, before: int) -> None:
        with self._in_flight_lock:
            if before in self._in_flight:  # (absent: a call without events)
                self._in_flight.remove(before)

    def committed(self, conn: sqlite3.Connection, events: list[Event], token: tuple[int, int] | None,
                  deliver: EventSink | None = None) -> None:
        """This store's own events, once committed, handed to ``deliver`` in commit order
        with other processes': under the follower's delivery lock, after the rows other
        processes committed before them; the follower held back the rows committed after
        them (:meth:`record` noted this call in flight before its COMMIT). The known
        sessions follow. A store that follows nobody has nothing to order them with. (``token``:
        what :meth:`record` returned; its number keeps this store's calls in commit order.)"""
        if token is None or not events:
            if events and deliver is not None:
                deliver(events)
            return
        before, ticket = token
        try:
            if self.after_commit is not None:
                self.after_commit()
        finally:  # (queued whatever the hook does: every later call of this store waits for it)
            self._queue(ticket, functools.partial(self._hand_own, events, before, deliver))

    def _hand_own(self, events: list[Event], before: int, deliver: EventSink | None) -> None:
        """A call's delivery (on whichever thread runs the serial's queue)."""
        try:
            try:
                if before > self._seq:
                    self._follow(self._reader(), upto=before)
            except sqlite3.Error as e:  # the mutation stands; the follower hands those rows on instead
                log.warning("sqlite: catching up before a call's own events failed: %s", e)
            self.known.note(events)
            if deliver is not None:
                deliver(events)
        finally:
            self._land(before)

    def _reader(self) -> sqlite3.Connection:
        """The connection of the thread running a delivery (the follower's own, else the
        thread's: a delivery runs between calls, never inside one's transaction)."""
        if threading.current_thread() is self._thread and self._conn is not None:
            return self._conn
        return self._db.conn()

    def _follow_now(self) -> None:
        """The follower's delivery: what was committed since (a failure retried next poll)."""
        self.held = False
        try:
            self._follow(self._reader())
        except sqlite3.Error as e:
            self.held = True
            log.warning("sqlite outbox follower of %s: %s; retrying", self._db.file, e)

    # -- the following side -----------------------------------------------------

    def subscribe(self, sink: EventSink, wants: Callable[[str], bool] | None = None) -> Callable[[], None]:
        if self._db.read_only:
            with self.subscribers.lock:
                if self._watch is None:
                    self._watch = StateWatch(self._db)
            return self._watch.subscribe(sink, wants)
        with self.subscribers.lock:
            entry = self.subscribers.add(sink, wants)
            if self._thread is None and (wants is None or any(wants(f) for f in EVENT_FUNCTIONS)):
                self._start()
        return lambda: self.subscribers.drop(entry)

    def observing(self) -> None:
        """An observer was added (a read-only store's watch takes its baseline now)."""
        if self._watch is not None:
            self._watch.baseline()

    def ready(self) -> None:
        """Follow from now on, if a sink was given (nobody observed so far: the store
        followed nobody, and writers wrote no rows for it). Registered before this
        returns: every commit after it reaches the sinks."""
        if self._db.read_only:
            return
        with self.subscribers.lock:
            self._idle = False  # (a follower about to leave stays)
            if self._thread is None and self.subscribers.count() and not self._stop.is_set():
                self._start()

    def idle(self) -> None:
        """No sink wants any event function (the embedded host's last observer left): the
        follower leaves at its next poll and drops its reader row (writers stop writing
        rows for it), unless :meth:`ready` comes first; a later :meth:`ready` registers
        again, from the last committed row. (A read-only store's watch stops comparing by
        itself once nobody observes.)"""
        with self.subscribers.lock:
            if self._thread is not None and not self._stop.is_set() and not self.subscribers.wanting():
                self._idle = True

    def _leave(self, conn: sqlite3.Connection) -> bool:
        """Stop following if :meth:`idle` asked and :meth:`ready` did not come since (on its thread)."""
        with self.subscribers.lock:
            if not self._idle or self._stop.is_set():
                return False
            self._idle = False
            self._thread = None
            with contextlib.suppress(sqlite3.Error):  # else pruned after the retention all the same
                conn.execute("DELETE FROM readers WHERE instance = ?", (self._db.instance,))
            return True

    def _start(self) -> None:
        # Registered before subscribe returns: every commit after it reaches the sink.
        if self._conn is None:  # (a follower started again after idle() reuses it)
            self._conn = self._db.connect()
        self._register(self._conn, load_known=True)
        self._thread = threading.Thread(target=self._run, name="session-manager-sqlite-outbox", daemon=True)
        self._thread.start()

    def _register(self, conn: sqlite3.Connection, *, load_known: bool) -> None:
        """Start following from the last committed row (under the write lock, so
        no commit is in between)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'").fetchone()
            self._seq = int(row[0]) if row else 0
            conn.execute("INSERT OR REPLACE INTO readers (instance, seq, seen_ms) VALUES (?, ?, ?)",
                         (self._db.instance, self._seq, now_ms()))
            if load_known:
                metas = conn.execute("SELECT meta FROM sessions WHERE meta IS NOT NULL").fetchall()
                self.known.load(loads(m.encode("utf-8")) for (m,) in metas)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        """Stop following and leave the readers (so this store pins no row)."""
        self._stop.set()
        if self._watch is not None:
            self._watch.close()
        thread, conn = self._thread, self._conn
        if thread is not None and thread is not threading.current_thread():  # (an observer it runs may close)
            thread.join(timeout=5.0)
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):  # else pruned after the retention all the same
                conn.execute("PRAGMA busy_timeout = 1000")  # best effort: a close never waits long for it
                conn.execute("DELETE FROM readers WHERE instance = ?", (self._db.instance,))

    def _run(self) -> None:
        conn = self._conn
        assert conn is not None
        clock = _Clock(time.monotonic())
        failing = ""
        while not self._stop.wait(self._poll_s):
            if self._idle and self._leave(conn):
                return
            try:
                self._poll(conn, clock)
                failing = ""
            except sqlite3.Error as e:
                if str(e) != failing:  # logged once per kind of failure, not once per poll
                    log.warning("sqlite outbox follower of %s: %s; retrying", self._db.file, e)
                failing = str(e)
            except Exception:
                log.exception("sqlite outbox follower failed; it goes on")

    def _poll(self, conn: sqlite3.Connection, clock: _Clock) -> None:
        now = time.monotonic()
        if now - clock.contact > self._retention_ms / 1000:
            self._resync(conn, "this process was away longer than the outbox retention")
        clock.contact = now
        current = conn.execute("PRAGMA data_version").fetchone()[0]
        if current != clock.version or self.held:
            clock.version = current
            if self.held or self._others_since(conn):
                self._serial.submit(self._follow_now)
            if self._stop.is_set():  # (an observer it ran closed the store)
                return
        every = min(BEAT_S, self._retention_ms / 4000)
        if now - clock.beat < every:
            return
        clock.beat = now
        # Skipped while writers hold the lock (delivery must not wait behind them),
        # unless the row is due: then it waits its turn like any writer.
        if self._beat(conn, wait=now - clock.renewed >= every * 2):
            clock.renewed = now
        clock.contact = time.monotonic()
        # The WAL copied back into the database here, not by a writer mid-commit
        # (PASSIVE: it waits for nobody and nobody waits for it); after a delete whose
        # own checkpoint a reader held off, a TRUNCATE one (erasure, core.py).
        if self._db.erase_pending:
            self._db.checkpoint_erased(conn, wait=True)
        else:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def _others_since(self, conn: sqlite3.Connection) -> bool:
        """Whether rows of other processes follow :attr:`_seq` (then the follower takes the
        delivery queue to hand them on). Rows of this store's own alone (most changes a
        store sees are its own commits) are passed over here, without taking the queue: a
        call finding the queue taken returns before its own observers ran, so a follower
        taking it for nothing made that happen without another process in sight. One
        snapshot: a row of another process committed before the last one seen is seen."""
        high, others = conn.execute(
            "SELECT max(seq), count(*) FILTER (WHERE instance <> ?) FROM outbox WHERE seq > ?",
            (self._db.instance, self._seq)).fetchone()
        if others:
            return True
        if high is not None and high > self._seq:
            # (A delivery running meanwhile may set it back to rows it read: they are this
            # store's own, passed over again, nothing handed on twice.)
            self._seq = high
        return False

    def _follow(self, conn: sqlite3.Connection, upto: int = 2**62) -> None:
        """Hand on the rows past :attr:`_seq` up to ``upto``, short of those committed after
        a call of this store whose own events are not handed on yet (held: read again)."""
        rows = conn.execute("SELECT seq, instance, function_id, payload FROM outbox WHERE seq > ? AND seq <= ?"
                            " ORDER BY seq", (self._seq, upto)).fetchall()
        if not rows:
            return
        # Read after the rows: a call whose COMMIT those rows follow was noted before it.
        if self._in_flight:
            with self._in_flight_lock:
                floor = min(self._in_flight, default=None)
            if floor is not None and rows[-1][0] > floor:
                self.held = True
                rows = [row for row in rows if row[0] <= floor]
                if not rows:
                    return
        wants = self.subscribers.filters()
        events: list[Event] = []
        own = self._db.instance
        for _, instance, function_id, payload in rows:
            if instance != own and self.subscribers.wanted(function_id, wants):
                events.append(Event(function_id, loads(payload.encode("utf-8"))))
        self._seq = rows[-1][0]
        if events:
            self.subscribers.publish(events)

    def _beat(self, conn: sqlite3.Connection, *, wait: bool) -> bool:
        """Renew this store's reader row and prune; False if skipped (the lock was busy)."""
        now = now_ms()
        if not wait:
            conn.execute("PRAGMA busy_timeout = 0")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            if wait:
                raise
            return False
        finally:
            conn.execute(f"PRAGMA busy_timeout = {self._db.settings.busy_timeout_ms}")
        try:
            # Renewed only if still live: silent past the retention (a stalled follower whose
            # row nobody pruned yet), writers counted it out and wrote no rows for it meanwhile.
            kept = conn.execute("UPDATE readers SET seq = ?, seen_ms = ? WHERE instance = ? AND seen_ms >= ?",
                                (self._seq, now, self._db.instance, now - self._retention_ms)).rowcount
            conn.execute("DELETE FROM readers WHERE seen_ms < ?", (now - self._retention_ms,))
            floor = conn.execute("SELECT min(seq) FROM readers").fetchone()[0]
            conn.execute("DELETE FROM outbox WHERE seq <= ? OR created_ms < ?",
                         (floor if floor is not None else 2**62, now - self._retention_ms))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if not kept:  # counted as dead (silent past the retention): rows it never read may be gone or unwritten
            self._resync(conn, "this store's outbox position was pruned")
        return True

    def _resync(self, conn: sqlite3.Connection, why: str) -> None:
        log.warning("sqlite outbox follower of %s: %s; resyncing", self._db.file, why)
        known = self.known.snapshot()  # taken before the resync lists the store

        def resync() -> None:
            self._register(self._reader(), load_known=False)
            self.subscribers.resync(self._state, known, now_ms())

        self._serial.submit(resync)
