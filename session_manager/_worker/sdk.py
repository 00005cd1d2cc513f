"""The one wrapper around the iii SDK client (``iii.iii.III``).

It implements :class:`~session_manager._bus.Bus` and adds what the worker
needs around a connection and the SDK does not offer as one call: wait for
``connected`` (bounded, interruptible, with a progress note), say why the
engine refused this worker, and a shutdown that may be called twice (a
second ``III.shutdown()`` hangs on the stopped loop). Nothing else in the
package touches the SDK client or its private attributes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .._bus import ObserverHandle

_POLL_S = 0.05


class SdkBus:
    """A connection to an iii engine; it connects (and reconnects) in the background."""

    def __init__(self, url: str, *, worker_name: str, description: str | None = None,
                 telemetry: bool = True, **options: Any) -> None:
        """``options`` go to ``iii.InitOptions`` as they are (e.g.
        ``invocation_timeout_ms``, ``reconnection_config``)."""
        from iii import InitOptions
        from iii.iii import III

        options.update(worker_name=worker_name, worker_description=description)
        if not telemetry:
            options["otel"] = {"enabled": False}
        self.url = url
        self._client: Any = III(url, InitOptions(**options))
        self._shutdown_lock = threading.Lock()
        self._shut = False

    # -- Bus --------------------------------------------------------------------

    def trigger(self, request: dict[str, Any]) -> Any:
        return self._client.trigger(request)

    def register_function(
        self,
        function_id: str,
        handler: Callable[..., Any],
        *,
        description: str | None = None,
        metadata: dict[str, Any] | None = None,
        request_format: dict[str, Any] | None = None,
        response_format: dict[str, Any] | None = None,
        observe: Any = None,
    ) -> Any:
        return self._client.register_function(
            function_id, handler, description=description, metadata=metadata,
            request_format=request_format, response_format=response_format, observe=observe,
        )

    def observe(self, source: dict[str, Any], target: str) -> ObserverHandle:
        handle: ObserverHandle = self._client.observe(source, target)
        return handle

    def add_connection_state_listener(self, listener: Callable[[str], None]) -> Callable[[], None]:
        off: Callable[[], None] = self._client.add_connection_state_listener(listener)
        return off

    def shutdown(self) -> None:
        with self._shutdown_lock:
            if self._shut:
                return
            self._shut = True
        self._client.shutdown()

    # -- connection -------------------------------------------------------------

    def connection_state(self) -> str:
        return str(self._client.get_connection_state())

    def wait_connected(self, *, timeout_s: float | None = None, stop: threading.Event | None = None,
                       on_waiting: Callable[[], None] | None = None, first_note_s: float = 1.0,
                       note_every_s: float = 10.0) -> bool:
        """Block until connected (True), or until the client gives up, ``stop``
        is set or ``timeout_s`` passes (False). While waiting, ``on_waiting``
        runs after ``first_note_s`` and then every ``note_every_s``."""
        changed = threading.Event()
        off = self.add_connection_state_listener(lambda state: changed.set())
        start = time.monotonic()
        next_note = start + first_note_s
        try:
            while True:
                state = self.connection_state()
                if state == "connected":
                    return True
                if state == "failed" or (stop is not None and stop.is_set()):
                    return False
                now = time.monotonic()
                if timeout_s is not None and now - start >= timeout_s:
                    return False
                if on_waiting is not None and now >= next_note:
                    on_waiting()
                    next_note = now + note_every_s
                changed.wait(_POLL_S)
                changed.clear()
        finally:
            off()

    def refusal(self) -> str:
        """Why the connection failed for good: the engine's rejection of this
        worker (e.g. its name is taken), which the SDK raises from any call once
        it has failed, or a generic reason."""
        try:
            self._client.trigger({"function_id": "engine::workers::list", "payload": {}, "timeout_ms": 1})
        except Exception as e:
            return str(e)
        return "connection failed"
