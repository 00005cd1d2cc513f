"""Live events for the viewer: the store's observers fanned out to Server-Sent Events streams.

The hub observes the six event functions through the manager's ordinary
:meth:`~session_manager.SessionManager.observe`, so every adapter that delivers
events to observers feeds it: the fs read-only follower (:mod:`..store._watch`),
postgres through ``LISTEN`` (its outbox), and any store whose
:meth:`~session_manager.store.base.SessionStore.subscribe` delivers other
processes' events. Each stream gets every event once, in the order the
observer was handed them (one source thread per store: in order per session).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from .._hosts.embedded import Observation, SessionManager
from .._wire.events import EVENT_FUNCTIONS

MAX_QUEUED = 10_000  # a stream this far behind is closed (its page reconnects and reloads what it shows)
KEEPALIVE_S = 15.0


@dataclass(eq=False)
class _Stream:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[tuple[str, dict[str, Any]] | None]
    session_id: str | None


class Hub:
    """One set of observers; any number of streams."""

    def __init__(self, sm: SessionManager) -> None:
        self._streams: set[_Stream] = set()
        self._lock = threading.Lock()
        self._observations: list[Observation] = [
            sm.observe({"function_id": fid}, self._handler(fid)) for fid in EVENT_FUNCTIONS]

    def _handler(self, function_id: str) -> Callable[[dict[str, Any]], None]:
        return lambda event: self._deliver(function_id, event)

    def close(self) -> None:
        """Stop observing and end every open stream."""
        for observation in self._observations:
            observation.dispose()
        with self._lock:
            streams, self._streams = list(self._streams), set()
        for stream in streams:
            stream.loop.call_soon_threadsafe(stream.queue.put_nowait, None)

    def _deliver(self, function_id: str, event: dict[str, Any]) -> None:
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            if stream.session_id is None or stream.session_id == event.get("session_id"):
                try:
                    stream.loop.call_soon_threadsafe(self._put, stream, (function_id, event))
                except RuntimeError:  # its loop is closed: the stream is gone
                    self._drop(stream)

    def _put(self, stream: _Stream, item: tuple[str, dict[str, Any]]) -> None:
        if stream.queue.qsize() >= MAX_QUEUED:
            self._drop(stream)
            stream.queue.put_nowait(None)
            return
        stream.queue.put_nowait(item)

    def _drop(self, stream: _Stream) -> None:
        with self._lock:
            self._streams.discard(stream)

    async def stream(self, session_id: str | None) -> AsyncIterator[str]:
        """The SSE text of every event from now on (``session_id``: that session's only)."""
        stream = _Stream(asyncio.get_running_loop(), asyncio.Queue(), session_id)
        with self._lock:
            self._streams.add(stream)
        try:
            yield ": connected\n\n"  # the response starts at once: the browser's EventSource opens
            number = 0
            while True:
                try:
                    item = await asyncio.wait_for(stream.queue.get(), KEEPALIVE_S)
                except asyncio.TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if item is None:
                    return
                number += 1
                function_id, event = item
                yield f"id: {number}\nevent: {function_id}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"
        finally:
            self._drop(stream)


__all__ = ["Hub"]
