"""What both adapters' outboxes share: the subscribers of one store and what
they are handed.

An outbox (the postgres one follows other instances over ``LISTEN``, the
sqlite one polls the file) reads the events other stores committed and hands
them here: :meth:`Subscribers.publish` notes them in the record of known
sessions and calls every sink. After a gap it cannot replay,
:meth:`Subscribers.resync` publishes the store's whole state instead (and one
``on-deleted`` per known session that is gone), so observers may see
duplicates then, never a gap.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..._wire.events import EVENT_FUNCTIONS, ON_CREATED, ON_DELETED, ON_META_UPDATED, Event
from ..base import EventSink, Meta
from ..resync import KnownSessions, StateSource, resync_batches

__all__ = ["TRACKED", "Subscribers"]

log = logging.getLogger("session_manager.store.sql.outbox")

# Handed on (or fetched) even when unobserved (rare next to appends): they keep
# the record of known sessions, so a resync can announce the deletions it missed
# to whoever observes session::on-deleted by then.
TRACKED = frozenset({ON_CREATED, ON_DELETED, ON_META_UPDATED})

Subscription = tuple[EventSink, Callable[[str], bool] | None]


class Subscribers:
    """One store's event sinks (each with what it wants), and what its observers know exists."""

    def __init__(self) -> None:
        self._sinks: list[Subscription] = []
        self.lock = threading.Lock()  # guards the sinks (the outbox also starts its follower under it)
        self.known = KnownSessions()  # what this store's observers were told exists

    def add(self, sink: EventSink, wants: Callable[[str], bool] | None) -> Subscription:
        """Add a sink (the caller holds :attr:`lock`); the entry :meth:`drop` takes."""
        entry = (sink, wants)
        self._sinks.append(entry)
        return entry

    def drop(self, entry: Subscription) -> None:
        with self.lock:
            if entry in self._sinks:
                self._sinks.remove(entry)

    def count(self) -> int:
        """How many sinks there are (the caller holds :attr:`lock`)."""
        return len(self._sinks)

    def wanting(self) -> bool:
        """Whether some sink wants some event function (the caller holds :attr:`lock`)."""
        return any(w is None or any(w(f) for f in EVENT_FUNCTIONS) for _, w in self._sinks)

    def wanted(self, function_id: str, wants: list[Callable[[str], bool] | None]) -> bool:
        """Whether an event of ``function_id`` is worth handing on (``wants``: :meth:`filters`)."""
        return function_id in TRACKED or any(w is None or w(function_id) for w in wants)

    def filters(self) -> list[Callable[[str], bool] | None]:
        """What each sink wants, taken once per batch of events."""
        with self.lock:
            return [w for _, w in self._sinks]

    def publish(self, events: list[Event]) -> None:
        """Note ``events`` as known and hand them to every sink (one failing sink stops no other)."""
        self.known.note(events)
        with self.lock:
            sinks = [sink for sink, _ in self._sinks]
        for sink in sinks:
            try:
                sink(events)
            except Exception:
                log.exception("an event subscriber failed; delivery goes on")

    def resync(self, store: StateSource, known: list[Meta], now_ms: int) -> None:
        """Publish the store's state as events, one session at a time (``known``: what
        :attr:`known` held before the store was listed, see KnownSessions.snapshot)."""
        for batch in resync_batches(store, known, now_ms):
            self.publish(batch)
