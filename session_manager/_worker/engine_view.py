"""A main instance's sessions, read over its engine, with its events: ``data serve ws://…``.

The viewer (and any reading ``data`` command) given an engine URL opens an
:class:`EngineView`: a :class:`~session_manager.store.bridge.BridgeStore`
over a dedicated client of that engine (reads through the main's
``session::store::*`` calls) whose :meth:`subscribe` hands out the main's
events as the bridge's relay receives them (the main's
``session::store::on-events`` fan-out, resynced after a lost link). So the
viewer's observers see every instance's mutations through the store's
ordinary observer mechanism. It is read-only: it never publishes, commits or
deletes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from .._bus import Bus
from .._wire.events import Event
from ..errors import StoreError
from ..store.base import AttachmentMeta, Commit, EventSink
from ..store.bridge import BridgeStore
from .bridge_link import Bridge, connect

DEFAULT_TIMEOUT_MS = 5000
SCHEMES = ("ws://", "wss://")


class EngineView(BridgeStore):
    """The main's store, read-only, with its events for subscribers."""

    read_only = True

    def __init__(self, client: Bus, url: str, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        super().__init__(client, timeout_ms)
        self._subscribers: list[tuple[EventSink, Callable[[str], bool] | None]] = []
        self._lock = threading.Lock()
        self._link = Bridge(client, url, timeout_ms, self._relay)
        self._link.start()  # raises BridgeUnavailable naming the cause

    def _relay(self, event: Event) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for sink, wants in subscribers:
            if wants is None or wants(event.function_id):
                sink([event])

    def subscribe(self, sink: EventSink, wants: Callable[[str], bool] | None = None) -> Callable[[], None]:
        entry = (sink, wants)
        with self._lock:
            self._subscribers.append(entry)

        def unsubscribe() -> None:
            with self._lock:
                if entry in self._subscribers:
                    self._subscribers.remove(entry)

        return unsubscribe

    def commit(self, session_id: str, commit: Commit) -> Commit:
        raise StoreError("this view of the main's sessions is read-only")

    def delete_session(self, session_id: str) -> bool:
        raise StoreError("this view of the main's sessions is read-only")

    def put_attachment(self, meta: AttachmentMeta, chunks: Iterable[bytes]) -> None:
        raise StoreError("this view of the main's sessions is read-only")

    def delete_attachment(self, session_id: str, attachment_id: str) -> bool:
        raise StoreError("this view of the main's sessions is read-only")

    def close(self) -> None:
        """Detach the relay and disconnect."""
        self._link.close()


def open_engine(url: str, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> EngineView:
    """Connect to the main's engine at ``url``; ``BridgeUnavailable`` when it is
    unreachable or serves no store protocol."""
    client = connect(url, timeout_ms)
    try:
        return EngineView(client, url, timeout_ms)
    except BaseException:
        client.shutdown()
        raise


def is_engine_url(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(SCHEMES)


__all__ = ["EngineView", "is_engine_url", "open_engine"]
