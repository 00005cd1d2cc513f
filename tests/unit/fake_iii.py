"""A fake of the iii-sdk client, just the part the worker uses.

It records ``register_function``, ``trigger`` and ``observe`` calls, runs
handlers in-process (a handler's exception becomes
``InvocationError("invocation_failed", str(exc))`` as on the bus), serves a
tiny ``configuration::*`` worker, and lets a test add and remove observers
of a registered function, which runs that function's ``ObserveHooks``.

``observe()`` of a function registered on the fake adds a live observer: the
owner's hooks run and each matching invocation is delivered to the target
function (``deliver`` input / output / envelope), synchronously, as the
engine would. :meth:`FakeIII.connection` is a second client of the same
fake engine (a bridged instance's link to its main), which can be shut down
or made to fail every call.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from iii import InvocationError
from iii.filter import compile_filter


@dataclass
class Registration:
    function_id: str
    handler: Any
    description: str | None
    metadata: dict[str, Any] | None
    request_format: dict[str, Any] | None
    response_format: dict[str, Any] | None
    observe: Any


@dataclass
class FakeObserver:
    """The owner's view of an observer (what ``ObserveHooks`` callbacks get)."""

    id: str
    function_id: str
    filters: dict[str, Any] = field(default_factory=dict)
    target: str = "test::sink"
    args: dict[str, Any] = field(default_factory=dict)
    capture: list[str] = field(default_factory=lambda: ["input", "output", "caller"])
    on: str = "success"
    deliver: str = "envelope"
    delivered: list[Any] = field(default_factory=list)

    def matches(self, doc: dict[str, Any]) -> bool:
        return bool(compile_filter(self.filters).matches(doc))


class FakeHandle:
    def __init__(self, observer_id: str, fail: Exception | None = None, on_dispose: Any = None) -> None:
        self.id = observer_id
        self.state = "active" if fail is None else "error"
        self.reason = None
        self._fail = fail
        self._on_dispose = on_dispose

    def ready(self, timeout: float | None = None) -> None:
        if self._fail is not None:
            raise self._fail

    def dispose(self) -> None:
        if self.state != "disposed" and self._on_dispose is not None:
            self._on_dispose()
        self.state = "disposed"

    def on_state_change(self, listener: Any) -> Any:
        return lambda: None


class FakeIII:
    def __init__(self, *, inject_caller: bool = True) -> None:
        self.functions: dict[str, Registration] = {}
        self.order: list[str] = []
        self.triggers: list[dict[str, Any]] = []
        self.observes: list[tuple[dict[str, Any], Any]] = []
        self.observers: dict[str, FakeObserver] = {}
        self.inject_caller = inject_caller
        self.config_store: dict[str, dict[str, Any]] = {}
        self.config_calls: list[tuple[str, Any]] = []
        self.config_failures: dict[str, list[Exception]] = {}
        self.observe_failure: Exception | None = None
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.state = "connected"
        self.worker_id = "w-session-manager"

    # -- SDK surface --------------------------------------------------------------

    def register_function(self, function_id: str, handler: Any, *, description: str | None = None,
                          metadata: dict[str, Any] | None = None, request_format: Any = None,
                          response_format: Any = None, observe: Any = None,
                          local_dispatch: bool = True) -> Any:
        if function_id in self.functions:
            raise ValueError(f"function id '{function_id}' already registered")
        self.functions[function_id] = Registration(function_id, handler, description, metadata,
                                                   request_format, response_format, observe)
        self.order.append(function_id)
        return {"id": function_id}

    def trigger(self, request: dict[str, Any]) -> Any:
        with self._lock:
            self.triggers.append(request)
        fid = request["function_id"]
        payload = request.get("payload")
        void = request.get("action") is not None
        if fid.startswith("configuration::"):
            return self._configuration(fid, payload)
        try:
            return self.invoke(fid, payload)
        except InvocationError:
            if void:
                return None
            raise

    def observe(self, source: dict[str, Any], target: Any, options: Any = None) -> FakeHandle:
        self.observes.append((source, target))
        if self.observe_failure is not None or source["function_id"] not in self.functions:
            return FakeHandle(f"obs-{next(self._ids)}", self.observe_failure)
        obs = self._attach(FakeObserver(f"o-{next(self._ids)}", source["function_id"],
                                        dict(source.get("filters") or {}), target=str(target),
                                        deliver=source.get("deliver", "envelope")))
        return FakeHandle(obs.id, on_dispose=lambda: self.remove_observer(obs))

    def get_connection_state(self) -> str:
        return self.state

    def add_connection_state_listener(self, cb: Any) -> Any:
        cb(self.state)
        return lambda: None

    def shutdown(self) -> None:
        self.state = "disconnected"

    # -- test controls -----------------------------------------------------------

    def invoke(self, function_id: str, payload: Any) -> Any:
        """Call a registered handler as the engine would (with the caller key)."""
        reg = self.functions.get(function_id)
        if reg is None:
            raise InvocationError("function_not_found",
                                  f"Function {function_id} not found in namespace default.")
        data = payload
        if self.inject_caller and isinstance(data, dict):
            data = {**data, "_caller_worker_id": "w-caller"}
        try:
            result = reg.handler(data)
        except Exception as e:
            raise InvocationError("invocation_failed", str(e), function_id=function_id) from e
        for obs in list(self.observers.values()):
            if obs.function_id == function_id and obs.matches({"input": payload, "output": result}):
                obs.delivered.append(result)
                if obs.target in self.functions:
                    self._deliver(obs, payload, result)
        return result

    def _deliver(self, obs: FakeObserver, payload: Any, result: Any) -> None:
        if obs.deliver == "input":
            value = payload
        elif obs.deliver == "output":
            value = result
        else:
            value = {"observer_id": obs.id, "function_id": obs.function_id, "input": payload, "output": result}
        with contextlib.suppress(InvocationError):  # the engine only logs a failed activation
            self.invoke(obs.target, value)

    def _attach(self, obs: FakeObserver) -> FakeObserver:
        self.observers[obs.id] = obs
        hooks = self.functions[obs.function_id].observe
        if hooks is not None and hooks.on_observer_added is not None:
            hooks.on_observer_added(obs)
        return obs

    def add_observer(self, function_id: str, filters: dict[str, Any] | None = None) -> FakeObserver:
        return self._attach(FakeObserver(f"o-{next(self._ids)}", function_id, filters or {}))

    def remove_observer(self, obs: FakeObserver) -> None:
        if self.observers.pop(obs.id, None) is None:
            return
        reg = self.functions.get(obs.function_id)
        hooks = reg.observe if reg is not None else None
        if hooks is not None and hooks.on_observer_removed is not None:
            hooks.on_observer_removed(obs)

    def unregister(self, function_id: str) -> None:
        """The function's worker went away: the function and its observers go."""
        for obs in [o for o in self.observers.values() if function_id in (o.function_id, o.target)]:
            self.remove_observer(obs)
        self.functions.pop(function_id, None)

    def connection(self, name: str = "bridge") -> FakeConnection:
        """Another client of this fake engine."""
        return FakeConnection(self, name)

    def event_calls(self) -> list[tuple[str, dict[str, Any]]]:
        """Every event-function trigger the worker made, in order."""
        return [(t["function_id"], t["payload"]) for t in self.triggers
                if t["function_id"].startswith("session::on-") and t["function_id"] != "session::on-config-change"]

    def set_config(self, value: Any) -> None:
        """``configuration::set`` then the observer's delivery to its target."""
        entry = self.config_store["session-manager"]
        old = entry["value"]
        entry["value"] = value
        event = {"type": "configuration", "event_type": "configuration:updated", "id": "session-manager",
                 "value": value, "old_value": old, "new_value": value}
        self.invoke("session::on-config-change", event)

    # -- configuration worker ------------------------------------------------------

    def _configuration(self, fid: str, payload: Any) -> Any:
        self.config_calls.append((fid, payload))
        failures = self.config_failures.get(fid)
        if failures:
            raise failures.pop(0)
        cid = payload["id"]
        if fid == "configuration::get":
            if cid not in self.config_store:
                raise InvocationError("NOT_FOUND", f"configuration '{cid}' not found")
            return {"id": cid, "value": self.config_store[cid]["value"]}
        if fid == "configuration::register":
            entry = self.config_store.setdefault(cid, {"value": payload.get("initial_value")})
            if entry["value"] is None and "initial_value" in payload:
                entry["value"] = payload["initial_value"]
            entry.update(schema=payload.get("schema"), name=payload.get("name"),
                         description=payload.get("description"))
            return {"id": cid, **entry}
        raise InvocationError("function_not_found", f"Function {fid} not found in namespace default.")


class FakeConnection:
    """A second worker on the same fake engine: its registrations and
    observers live in the engine's tables and go when it shuts down."""

    def __init__(self, engine: FakeIII, name: str) -> None:
        self.engine = engine
        self.name = name
        self.registered: list[str] = []
        self.handles: list[FakeHandle] = []
        self.triggers: list[dict[str, Any]] = []
        self.failure: Exception | None = None  # raised by every call (an unreachable engine)
        self.closed = False

    def register_function(self, function_id: str, handler: Any, **options: Any) -> Any:
        ref = self.engine.register_function(function_id, handler, **options)
        self.registered.append(function_id)
        return ref

    def trigger(self, request: dict[str, Any]) -> Any:
        self.triggers.append(request)
        if self.closed:
            raise InvocationError("SHUTDOWN", "the client is shut down")
        if self.failure is not None:
            raise self.failure
        return self.engine.trigger(request)

    def observe(self, source: dict[str, Any], target: Any, options: Any = None) -> FakeHandle:
        handle = self.engine.observe(source, target, options)
        self.handles.append(handle)
        return handle

    def get_connection_state(self) -> str:
        return "disconnected" if self.closed else "connected"

    def shutdown(self) -> None:
        self.closed = True
        for handle in self.handles:
            handle.dispose()
        for function_id in self.registered:
            self.engine.unregister(function_id)


def call_signature_ok(handler: Any) -> bool:
    """The SDK passes ``data`` (and ``metadata`` only to a parameter of that name)."""
    params = list(inspect.signature(handler).parameters)
    return len(params) == 1 or (len(params) == 2 and params[1] == "metadata")
