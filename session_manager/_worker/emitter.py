"""Event delivery on an iii engine: an event function is called only while
something observes it (counted through ``ObserveHooks``), fire-and-forget,
from one background thread after the mutation is durable, so a failed or
slow delivery never fails or delays the call that produced it. The queue
between them is bounded (:mod:`.event_queue`)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from iii import ObserveHooks, TriggerAction

from .._bus import Bus
from .._service.stats import Stats
from .._wire import events as ev
from .._wire.events import Event
from ..store.bridge import protocol as sp
from .event_queue import EventQueue
from .fanout_order import Numbering

log = logging.getLogger("session_manager.iii")


class Emitter:
    """Calls event functions while observed, in order, off the caller's thread."""

    def __init__(self, client: Bus, stats: Stats | None = None) -> None:
        self._client = client
        self._observers: dict[str, set[str]] = {fid: set() for fid in (*ev.EVENT_FUNCTIONS, sp.ON_EVENTS)}
        self._lock = threading.Lock()
        self._queue = EventQueue(self._deliver, stats or Stats())
        self._numbering = Numbering()  # the fan-out's order, for receivers across the engine

    # -- observer tracking (ObserveHooks) ------------------------------------

    def hooks(self, function_id: str) -> ObserveHooks:
        def added(observer: Any) -> None:
            with self._lock:
                self._observers[function_id].add(str(observer.id))
            log.debug("observer %s added on %s", observer.id, function_id)

        def removed(observer: Any) -> None:
            with self._lock:
                self._observers[function_id].discard(str(observer.id))
            log.debug("observer %s removed from %s", observer.id, function_id)

        return ObserveHooks(on_observer_added=added, on_observer_removed=removed)

    def is_observed(self, function_id: str) -> bool:
        with self._lock:
            return bool(self._observers.get(function_id))

    # -- delivery -------------------------------------------------------------

    def emit(self, events: list[Event], *, fanout: bool = False, wait_s: float = 0.0) -> None:
        """Queue events for their event functions; with ``fanout`` (an fs
        instance) each one is also handed to ``session::store::on-events``
        for the attached bridges. The queue is bounded (see
        :mod:`.event_queue`); ``wait_s`` waits for room first (a resync)."""
        fanout = fanout and self.is_observed(sp.ON_EVENTS)
        for event in events:
            if fanout or self.is_observed(event.function_id):
                self._queue.put(event, fanout, wait_s=wait_s)

    def _deliver(self, event: Event, fanout: bool) -> None:
        # Re-checked: the last observer may have gone meanwhile.
        if self.is_observed(event.function_id):
            self._void(event.function_id, event.payload)
        if fanout and self.is_observed(sp.ON_EVENTS):
            self._void(sp.ON_EVENTS, self._numbering.stamp(sp.envelope(event)))

    def _void(self, function_id: str, payload: dict[str, Any]) -> None:
        try:
            self._client.trigger({"function_id": function_id, "payload": payload,
                                  "action": TriggerAction.Void()})
        except Exception:
            log.warning("event %s not delivered; the mutation stands", function_id, exc_info=True)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued event has been handed to the client;
        False if ``timeout_s`` passed first."""
        return self._queue.flush(timeout_s)

    def close(self) -> None:
        self._queue.close()
