"""A bridged instance's link to its main: store, event publisher and relay.

One :class:`Bridge` per bridge runtime owns a dedicated iii client connected
to the main's engine and uses it three ways:

* :attr:`Bridge.store`, the :class:`~session_manager.store.bridge.BridgeStore`;
* :meth:`Bridge.publish`: each mutation's events go to the main in one
  ``session::store::publish-events`` call, off the caller's thread (a
  failure is logged; the mutation stands, as with any lost event);
* the relay: a function ``session::bridge::recv::<uuid>`` registered on the
  main's engine, observing the main's ``session::store::on-events``; it hands
  each envelope's event to this instance's local event functions.

A bridged instance never calls its event functions at mutation time: its
own events come back through the main like everyone else's, so every
instance's observers see each event once.

While the link is down every event the main fans out (and every publish)
is lost, so when the client reconnects the bridge resyncs its local
observers, off the SDK's thread: each session the main holds as events
(as after an adapter swap), preceded by one ``session::on-deleted`` for
each session its observers knew of that the main no longer holds
(:class:`~session_manager.store._known.KnownSessions`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import uuid
from collections.abc import Callable
from typing import Any

from .._bus import Bus, ObserverHandle
from .._service.stats import Stats
from .._wire.events import Event
from ..clock import Clock, SystemClock
from ..errors import STORAGE, SessionError
from ..errors import BridgeUnavailable as BridgeUnavailable  # (re-exported: the old import path keeps working)
from ..store.bridge import BridgeStore
from ..store.bridge import protocol as sp
from ..store.resync import KnownSessions, resync_batches
from .background import SerialWorker
from .fanout_order import Reorder, numbers_of
from .sdk import SdkBus

log = logging.getLogger("session_manager.bridge")

RELAY_PREFIX = "session::bridge::recv::"
READY_TIMEOUT_S = 10.0
PUBLISH_QUEUE_LIMIT = 1000  # mutations' event batches waiting to go to the main


def normalize_url(url: str) -> str:
    """Compare engine URLs loosely: case of scheme/host, trailing slash, localhost."""
    out = url.strip().rstrip("/").lower()
    return out.replace("://localhost:", "://127.0.0.1:").replace("://[::1]:", "://127.0.0.1:")


def connect(url: str, timeout_ms: int) -> SdkBus:
    """A client of the main's engine, connected; :class:`BridgeUnavailable`
    when it does not connect within the call timeout (at least 1 s)."""
    # A name of its own: engines refuse a second worker under one name.
    client = SdkBus(url, worker_name=f"session-manager-bridge-{uuid.uuid4().hex[:8]}",
                    description="session-manager bridge link to its main instance", telemetry=False)
    if not client.wait_connected(timeout_s=min(max(timeout_ms / 1000.0, 1.0), 30.0)):
        client.shutdown()
        raise BridgeUnavailable(f"the main engine at {url} is unreachable")
    return client


class Bridge:
    """The link of one bridge runtime; :meth:`close` ends all of it."""

    def __init__(self, client: Bus, url: str, timeout_ms: int, relay: Callable[[Event], None],
                 stats: Stats | None = None, *, resync: Callable[[list[Event]], None] | None = None,
                 clock: Clock | None = None) -> None:
        """``relay`` takes each event the main fans out; ``resync`` each batch
        of a resync (default: every event to ``relay``)."""
        self.client = client
        self.url = url
        self.timeout_ms = timeout_ms
        self.store = BridgeStore(client, timeout_ms)
        self.relay_id = f"{RELAY_PREFIX}{uuid.uuid4()}"
        self._relay = relay
        self._order = Reorder(self._relay_in_order)
        self._observer: ObserverHandle | None = None
        self.stats = stats or Stats()
        self._worker = SerialWorker("session-bridge-publish", bound=PUBLISH_QUEUE_LIMIT)
        self._resync_sink = resync or self._relay_each
        self._clock: Clock = clock or SystemClock()
        self.known = KnownSessions()  # what this instance's observers were told exists
        # One resync running and at most one waiting: a waiting one covers any later reconnect.
        self._resyncer = SerialWorker("session-bridge-resync", bound=1)
        self._link_lost = False
        self._closing = False
        self._off_state: Callable[[], None] | None = None

    # -- start ------------------------------------------------------------------

    def start(self, ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        """Check the main serves the store protocol, then attach the relay.
        Raises :class:`BridgeUnavailable` naming the cause."""
        try:
            self.known.load(self.store.list_metas())
        except Exception as e:
            raise BridgeUnavailable(f"the main at {self.url} does not serve the store protocol: {e}") from e
        self.client.register_function(
            self.relay_id, self._receive,
            description="Internal: relays the main's session events to a bridged session-manager.",
            metadata=dict(sp.REGISTRATION_METADATA),
        )
        handle = self.client.observe({"function_id": sp.ON_EVENTS, "deliver": "input"}, self.relay_id)
        self._observer = handle
        try:
            handle.ready(timeout=ready_timeout_s)
        except Exception as e:
            raise BridgeUnavailable(f"cannot observe {sp.ON_EVENTS} on the main at {self.url}: {e}") from e
        self._off_state = self.client.add_connection_state_listener(self._on_state)
        log.info("bridge to %s attached (relay %s)", self.url, self.relay_id)

    # -- resync after a lost link ---------------------------------------------------

    def _on_state(self, state: str) -> None:
        # Called on the client's own thread: never block it with calls to the main.
        if state != "connected":
            self._link_lost = True
            return
        if self._link_lost and not self._closing:
            self._link_lost = False
            self._resyncer.submit(self._resync, timeout_s=0)

    def _resync(self) -> None:
        if self._closing:
            return
        log.warning("link to the main at %s was lost; resyncing local observers", self.url)
        known = self.known.snapshot()  # before the listing: see KnownSessions.snapshot
        sent = 0
        try:
            for batch in resync_batches(self.store, known, self._clock.now_ms()):
                if self._closing:
                    return
                self.known.note(batch)
                self._resync_sink(batch)
                sent += len(batch)
        except Exception as e:
            log.warning("resync from the main at %s failed after %d events (%s); observers may be stale "
                        "until the next reconnect", self.url, sent, e)
            return
        log.info("resync from the main at %s: %d events", self.url, sent)

    # -- relay --------------------------------------------------------------------

    def _relay_each(self, batch: list[Event]) -> None:
        for event in batch:
            self._relay(event)

    def _receive(self, data: Any) -> Any:
        event = sp.event_of(data)
        if event is None:
            log.warning("bridge relay: malformed envelope ignored: %.200r", data)
            return {"ok": False}
        self._order.receive(event, numbers_of(data))  # the engine may hand two over the other way round
        return {"ok": True}

    def _relay_in_order(self, event: Event) -> None:
        self.known.note([event])
        self._relay(event)

    # -- publish ------------------------------------------------------------------

    def publish(self, events: list[Event]) -> None:
        """Hand one mutation's events to the main (one call, in order, later).

        Backpressure: with :data:`PUBLISH_QUEUE_LIMIT` batches waiting, wait
        for room at most ``timeout_ms``, then answer ``session/storage`` (the
        mutation itself is already stored; its events are not published)."""
        if not events:
            return
        if not self._worker.submit(functools.partial(self._send, list(events)), timeout_s=self.timeout_ms / 1000):
            total = self.stats.add("publish_timeouts")
            log.warning("publish queue to the main at %s full for %d ms: %d events not published "
                        "(%d such timeouts so far)", self.url, self.timeout_ms, len(events), total)
            raise SessionError(STORAGE, f"publishing events to the main at {self.url}: {PUBLISH_QUEUE_LIMIT} "
                               f"batches still waiting after {self.timeout_ms} ms")

    def _send(self, batch: list[Event]) -> None:
        try:
            self.client.trigger({"function_id": sp.PUBLISH_EVENTS,
                                 "payload": {"events": [sp.envelope(e, legacy=True) for e in batch]},
                                 "timeout_ms": self.timeout_ms})
        except Exception as e:
            log.warning("%d events not published to the main at %s (%s); the mutation stands",
                        len(batch), self.url, e)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued batch has been sent (or has failed);
        False if ``timeout_s`` passed first."""
        return self._worker.flush(timeout_s) and self._resyncer.flush(timeout_s)

    # -- end ----------------------------------------------------------------------

    def close(self) -> None:
        """Send what is queued, detach the relay and disconnect."""
        self._closing = True
        if self._off_state is not None:
            self._off_state()
        self._resyncer.close()
        self._worker.close()
        self._order.close()
        if self._observer is not None:
            with contextlib.suppress(Exception):
                self._observer.dispose()
        self.client.shutdown()
