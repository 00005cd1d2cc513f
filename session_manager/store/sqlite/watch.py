"""Events for a read-only sqlite store: what it sees other processes change, as the six events.

A read-only open writes nothing, so it cannot register in ``readers`` as a
writable store's follower does (:mod:`.outbox`); and the writers put rows in
the outbox only while a registered reader follows the file. So a read-only
store does not read the outbox at all: it compares states, as the fs
read-only follower does (:mod:`..fs._watch`, whose :func:`session_events`
it shares). While anyone observes it, one thread checks ``PRAGMA
data_version`` every ``poll_ms`` (shared memory: no I/O while nothing is
committed); after another connection's commit it lists every session's meta
(one query) and, for each session whose meta changed or that was updated
within :data:`RECENT_MS` of the newest ``updated_at`` it saw before (a
revision of a streamed reply may keep the meta's millisecond), re-reads its
entries and delivers the difference:

- a new session: ``on-created``, then ``on-message-added`` per entry; a new
  entry: ``on-message-added``; a higher revision: ``on-message-updated``
  (``origin`` ``None``: the database does not keep the update's);
- another status, title, description or metadata: ``on-status-changed``,
  ``on-meta-updated``; a session gone: ``on-deleted`` (stamped when noticed).

It sees states, not mutations: updates of one entry committed between two
polls arrive as one event carrying the last. No gap is possible (nothing is
pruned under it: the state is the database's), so it never resyncs. As the fs
watch: what exists when an observer is added while none was
(:meth:`StateWatch.baseline`, from the store's ``observing``) is the
baseline and fires nothing; what changes while nobody observes is nobody's
event (the next observer starts from a new baseline).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._wire.events import EVENT_FUNCTIONS, Event
from .._core.codec import loads
from ..resync import SeenSession, session_events
from ..sql.keys import key, unkey
from ..sql.outbox import Subscribers
from .core import SK

if TYPE_CHECKING:
    from ..base import EventSink, Meta
    from .core import SqliteDatastore

__all__ = ["RECENT_MS", "StateWatch"]

log = logging.getLogger("session_manager.store.sqlite.watch")

RECENT_MS = 5_000  # a session updated this close to the newest update seen is re-read on every commit


class StateWatch:
    """One polling thread delivering what other processes change in a read-only store."""

    def __init__(self, db: SqliteDatastore) -> None:
        self._db = db
        self._poll_s = db.settings.poll_ms / 1000
        self.subscribers = Subscribers()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Session id -> (meta text, state); None: no baseline (nobody observes).
        self._seen: dict[str, tuple[str, SeenSession]] | None = None
        self._newest = 0  # the newest updated_at seen
        # PRAGMA data_version as last read, with the connection it was read on (each
        # connection counts for itself: values of two connections do not compare).
        self._version: tuple[sqlite3.Connection, int] | None = None
        self._polling = threading.RLock()  # one pass at a time

    def subscribe(self, sink: EventSink, wants: Callable[[str], bool] | None = None) -> Callable[[], None]:
        with self.subscribers.lock:
            entry = self.subscribers.add(sink, wants)
            start = self._thread is None
            if start:
                self._thread = threading.Thread(target=self._run, name="session-manager-sqlite-watch", daemon=True)
        self.baseline()
        if start and self._thread is not None:
            self._thread.start()
        return lambda: self.subscribers.drop(entry)

    def _observed(self) -> bool:
        return any(w is None or any(w(f) for f in EVENT_FUNCTIONS) for w in self.subscribers.filters())

    def baseline(self) -> None:
        """Take the state later changes are compared with now, unless there is one (an observer
        was just added: what another process commits from now on is its event)."""
        with self._polling:
            if self._seen is None and self._observed() and not self._stop.is_set():
                self._take_baseline(self._db.conn())

    def _take_baseline(self, conn: sqlite3.Connection) -> None:
        self._version = (conn, conn.execute("PRAGMA data_version").fetchone()[0])  # read before the snapshot
        self._seen, self._newest = {}, 0
        self._pass(conn, baseline=True)

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)

    def _run(self) -> None:
        failing = ""
        while not self._stop.wait(self._poll_s):
            try:
                conn = self._db.conn()  # this thread's read-only connection
                events: list[Event] = []
                with self._polling:
                    if not self._observed():
                        self._seen = None  # what changes unobserved is nobody's event
                    elif self._seen is None:
                        self._take_baseline(conn)
                    else:
                        version = (conn, conn.execute("PRAGMA data_version").fetchone()[0])
                        if self._version is None or self._version[0] is not conn or self._version[1] != version[1]:
                            self._version = version  # (read before the pass's snapshot: nothing slips between)
                            events = self._pass(conn, baseline=False)
                if events:  # (outside the lock: an observer may add another, which takes it)
                    self.subscribers.publish(events)
                failing = ""
            except sqlite3.Error as e:
                if str(e) != failing:  # logged once per kind of failure, not once per poll
                    log.warning("sqlite read-only watch of %s: %s; retrying", self._db.file, e)
                failing = str(e)
            except Exception:
                if self._stop.is_set():
                    return
                log.exception("sqlite read-only watch failed; it goes on")

    def _pass(self, conn: sqlite3.Connection, *, baseline: bool) -> list[Event]:
        """Compare the sessions with the state last seen (in one read snapshot): the difference to deliver."""
        conn.execute("BEGIN")  # deferred: a read snapshot, no lock
        try:
            events = self._compare(conn)
        finally:
            conn.execute("COMMIT")
        if baseline or not events or self._stop.is_set():
            return []
        wants = self.subscribers.filters()
        return [e for e in events if self.subscribers.wanted(e.function_id, wants)]

    def _compare(self, conn: sqlite3.Connection) -> list[Event]:
        seen = self._seen
        assert seen is not None
        rows = conn.execute("SELECT session_id, meta, updated_at FROM sessions WHERE meta IS NOT NULL").fetchall()
        now = int(time.time() * 1000)
        recent = self._newest - RECENT_MS
        current = {unkey(sid): (text, updated if isinstance(updated, int) else 0) for sid, text, updated in rows}
        events: list[Event] = []
        for sid in [s for s in seen if s not in current]:
            events += session_events(sid, seen.pop(sid)[1], None, [], now)
        newest = self._newest
        for sid, (text, updated) in current.items():
            newest = max(newest, updated)
            before = seen.get(sid)
            if before is not None and before[0] == text and updated < recent:
                continue
            meta: Meta = loads(text.encode("utf-8"))
            state = before[1] if before is not None else None
            if state is not None and state.meta.get("created_at") != meta.get("created_at"):
                known: dict[str, int] = {}  # deleted and made again: every entry is new
            else:
                known = state.revisions if state is not None else {}
            revisions: dict[str, int] = {}
            changed: list[int] = []
            for seq, eid, revision in conn.execute(
                    "SELECT seq, entry_id, coalesce(json_extract(body, '$.revision'), 0) FROM entries"
                    " WHERE sk = " + SK + " ORDER BY seq", (key(sid),)):
                entry_id = unkey(eid)
                revisions[entry_id] = revision
                if known.get(entry_id) != revision:
                    changed.append(seq)
            entries: list[dict[str, Any]] = [loads(body.encode("utf-8")) for (body,) in conn.execute(
                "SELECT body FROM entries WHERE seq IN (SELECT value FROM json_each(?)) ORDER BY seq",
                (json.dumps(changed),))] if changed else []
            events += session_events(sid, state, meta, entries, now)
            seen[sid] = (text, SeenSession((), meta, revisions))
        self._newest = newest
        return events
