"""Another worker's client on a :class:`~._engine.FakeEngine`, whose link can
be lost and regained (:meth:`FakeConnection.drop`, :meth:`FakeConnection.restore`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from iii import InvocationError

from ._engine import FakeEngine, FakeHandle


class FakeConnection:
    """Another worker on a :class:`FakeEngine`: its registrations and observers
    go when it shuts down, after which every call fails with ``SHUTDOWN``."""

    def __init__(self, engine: FakeEngine, name: str) -> None:
        self.engine = engine
        self.name = name
        self.worker_id = f"w-{name}-{uuid.uuid4().hex[:6]}"
        self.registered: list[str] = []
        self.handles: list[FakeHandle] = []
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

    def observe(self, source: dict[str, Any], target: str, options: Any = None) -> FakeHandle:
        handle = self.engine._observe(source, target, self.worker_id)
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
