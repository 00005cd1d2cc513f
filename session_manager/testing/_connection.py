"""Another worker's client on a :class:`~._engine.FakeEngine`, whose link can
be lost and regained (:meth:`FakeConnection.drop`, :meth:`FakeConnection.restore`).

The engine module builds connections (``FakeEngine.connection``), so this one
names the engine only through :class:`EngineSide`, the part of it a connection
uses: the import goes one way, engine to connection.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from iii import InvocationError


class ObserverHandle(Protocol):
    """What :meth:`FakeConnection.observe` returns (``FakeHandle``, as the SDK's ``ObserverHandle``)."""

    id: str

    @property
    def state(self) -> str: ...

    def ready(self, timeout: float | None = None) -> None: ...

    def dispose(self) -> None: ...


class EngineSide(Protocol):
    """The part of :class:`~._engine.FakeEngine` a connection uses."""

    offline: set[str]
    changed: threading.Condition

    def register_function(self, function_id: str, handler: Callable[..., Any], *, description: str | None = None,
                          metadata: dict[str, Any] | None = None, request_format: Any = None,
                          response_format: Any = None, observe: Any = None, owner: str | None = None) -> Any: ...

    def call(self, request: dict[str, Any], *, caller: str) -> Any: ...

    def observe_as(self, owner: str, source: dict[str, Any], target: str) -> ObserverHandle: ...

    def unregister(self, function_id: str) -> None: ...


class FakeConnection:
    """Another worker on a :class:`FakeEngine`: its registrations and observers
    go when it shuts down, after which every call fails with ``SHUTDOWN``."""

    def __init__(self, engine: EngineSide, name: str) -> None:
        self.engine = engine
        self.name = name
        self.worker_id = f"w-{name}-{uuid.uuid4().hex[:6]}"
        self.registered: list[str] = []
        self.handles: list[ObserverHandle] = []
        self.triggers: list[dict[str, Any]] = []
        self.failure: Exception | None = None  # raised by every call (an unreachable engine)
        self.closed = False
        self.dropped = False
        self._listeners: list[Callable[[str], None]] = []

    def register_function(self, function_id: str, handler: Callable[..., Any], **options: Any) -> Any:
        ref = self.engine.register_function(function_id, handler, owner=self.worker_id, **options)
        self.registered.append(function_id)
        return ref

    def trigger(self, request: dict[str, Any]) -> Any:
        self.triggers.append(request)
        if self.closed:
            raise InvocationError("SHUTDOWN", "the client is shut down")
        if self.failure is not None:
            raise self.failure
        if self.dropped:
            raise InvocationError("timeout", "the engine is unreachable (the link is down)")
        return self.engine.call(request, caller=self.worker_id)

    def observe(self, source: dict[str, Any], target: str, options: Any = None) -> ObserverHandle:
        handle = self.engine.observe_as(self.worker_id, source, target)
        self.handles.append(handle)
        return handle

    def add_connection_state_listener(self, listener: Callable[[str], None]) -> Callable[[], None]:
        self._listeners.append(listener)
        listener(self.get_connection_state())

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def get_connection_state(self) -> str:
        if self.closed:
            return "disconnected"
        return "reconnecting" if self.dropped else "connected"

    def drop(self) -> None:
        """The link goes down (the SDK keeps reconnecting): registrations stay,
        but nothing reaches this worker and its calls fail until :meth:`restore`."""
        self.dropped = True
        with self.engine.changed:
            self.engine.offline.add(self.worker_id)
        self._tell()

    def restore(self) -> None:
        """The link is back (as after the SDK's reconnect and re-registration)."""
        self.dropped = False
        with self.engine.changed:
            self.engine.offline.discard(self.worker_id)
        self._tell()

    def _tell(self) -> None:
        state = self.get_connection_state()
        for listener in list(self._listeners):
            listener(state)

    def shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        for handle in self.handles:
            handle.dispose()
        for function_id in self.registered:
            self.engine.unregister(function_id)
