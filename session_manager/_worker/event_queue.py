"""The bounded queue between mutations and their event deliveries.

Events are fire-and-forget (the spec lets a delivery be lost), so a slow
observer must never grow memory without end or slow the mutations down.
When the queue holds :data:`EVENT_QUEUE_LIMIT` events, in this order:

1. ``session::on-message-updated`` coalesces per entry (a streamed reply's
   older revision is replaced by the newer one, in place), first for the
   incoming event, then across the whole queue;
2. still full, an event that may be dropped (``on-message-updated``,
   ``on-status-changed``, ``on-meta-updated``) is dropped, the incoming one
   or, to make room for one that may not, the oldest queued one;
3. ``on-created``, ``on-message-added`` and ``on-deleted`` are never dropped:
   with nothing left to drop they are queued past the bound (there is one
   per mutation, so the mutation rate bounds them).

Every coalesced or dropped event is counted in :class:`~.._service.stats.Stats`
(``session::config-status`` reports them) and logged (rate-limited). A
resync waits for room instead (``wait_s``), as it produces events far faster
than any mutation does.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .._service.stats import Stats
from .._wire import events as ev
from .._wire.events import Event

log = logging.getLogger("session_manager.events")

EVENT_QUEUE_LIMIT = 10_000
NEVER_DROPPED = frozenset({ev.ON_CREATED, ev.ON_MESSAGE_ADDED, ev.ON_DELETED})
WARN_EVERY_S = 10.0


@dataclass
class Item:
    event: Event
    fanout: bool


def _entry_key(item: Item) -> tuple[str, str, bool] | None:
    """What an on-message-updated coalesces by: (session, entry, fan-out)."""
    if item.event.function_id != ev.ON_MESSAGE_UPDATED:
        return None
    p = item.event.payload
    return (str(p.get("session_id")), str(p.get("entry_id")), item.fanout)


def _revision(item: Item) -> int:
    value = item.event.payload.get("revision", 0)
    return value if isinstance(value, int) else 0


class EventQueue:
    """Delivers queued events one at a time, in order, on a daemon thread."""

    def __init__(self, deliver: Callable[[Event, bool], None], stats: Stats, *, name: str = "session-events",
                 bound: int = EVENT_QUEUE_LIMIT) -> None:
        self.bound = bound
        self._deliver = deliver
        self._stats = stats
        self._items: collections.deque[Item | None] = collections.deque()
        self._busy = False
        self._cond = threading.Condition()
        self._warned_at = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- producers ---------------------------------------------------------------

    def put(self, event: Event, fanout: bool, *, wait_s: float = 0.0) -> None:
        """Queue one event under the policy above; ``wait_s`` > 0 first waits
        that long for room (a resync)."""
        item = Item(event, fanout)
        with self._cond:
            if wait_s > 0:
                self._cond.wait_for(lambda: len(self._items) < self.bound, timeout=wait_s)
            if len(self._items) >= self.bound and not self._make_room(item):
                return
            self._items.append(item)
            self._cond.notify_all()

    def _make_room(self, incoming: Item) -> bool:
        """Coalesce or drop so ``incoming`` fits; False: it was absorbed or dropped."""
        key = _entry_key(incoming)
        if key is not None:
            for i, queued in enumerate(self._items):
                if queued is not None and _entry_key(queued) == key:
                    if _revision(incoming) >= _revision(queued):
                        self._items[i] = incoming  # in place: still after its on-message-added
                    self._count("events_coalesced", 1)
                    return False
        merged = self._coalesce_all()
        if merged:
            self._count("events_coalesced", merged)
            if len(self._items) < self.bound:
                return True
        if incoming.event.function_id not in NEVER_DROPPED:
            self._count("events_dropped", 1)
            return False
        for i, queued in enumerate(self._items):
            if queued is not None and queued.event.function_id not in NEVER_DROPPED:
                del self._items[i]
                self._count("events_dropped", 1)
                break
        return True  # past the bound if nothing could go: these are never dropped

    def _coalesce_all(self) -> int:
        """Keep one on-message-updated per entry (the highest revision, at the
        first one's place); returns how many were merged away."""
        first: dict[tuple[str, str, bool], int] = {}
        kept: list[Item | None] = []
        for queued in self._items:
            key = _entry_key(queued) if queued is not None else None
            if key is None:
                kept.append(queued)
                continue
            assert queued is not None
            at = first.get(key)
            if at is None:
                first[key] = len(kept)
                kept.append(queued)
            else:
                held = kept[at]
                if held is not None and _revision(queued) >= _revision(held):
                    kept[at] = queued
        merged = len(self._items) - len(kept)
        if merged:
            self._items = collections.deque(kept)
        return merged

    def _count(self, name: str, n: int) -> None:
        total = self._stats.add(name, n)
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            log.warning("event queue full (%d): %s now %d (coalesced %d, dropped %d in total)", self.bound,
                        name, total, self._stats.get("events_coalesced"), self._stats.get("events_dropped"))

    # -- the delivery thread --------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._items))
                item = self._items.popleft()
                self._busy = True
                self._cond.notify_all()
            try:
                if item is None:
                    return
                self._deliver(item.event, item.fanout)
            except Exception:  # a delivery reports its own failures; this is the last guard
                log.warning("event delivery failed", exc_info=True)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued event has been delivered; False if
        ``timeout_s`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._items and not self._busy, timeout=timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued, then stop the thread."""
        if self._thread.is_alive():
            with self._cond:
                self._items.append(None)
                self._cond.notify_all()
            self._thread.join(timeout=timeout_s)
