"""An in-process iii engine double that behaves like the wire stand-in.

One :class:`FakeEngine` is an engine *and* the client of the first worker on
it (pass it wherever a :class:`~session_manager._bus.Bus` goes);
:meth:`FakeEngine.connection` adds another worker on the same engine. Calls
run synchronously on the caller's thread.

What it does as the stand-in (``iii-standin``) does:

* a handler's exception answers ``InvocationError("invocation_failed",
  str(exc))``, an unknown function ``function_not_found``; a call with an
  ``action`` (fire-and-forget, ``TriggerAction.Void()``) gets no reply:
  ``trigger`` returns ``None`` and swallows its failure;
* object payloads reach handlers with ``_caller_worker_id`` (the calling
  worker's id) added; observers' filters and deliveries see the payload as sent;
* a handler gets a copy of the payload and a caller a copy of the result, as
  the wire gives (a handler or caller changing it never reaches the other);
* an observer is ``pending`` until its source and target are registered and
  the source's owner was told (its ``ObserveHooks.on_observer_added`` ran; a
  hook that raises rejects it); ``ready(timeout)`` raises ``TimeoutError``
  while pending and ``ObserveRejection`` for a refused one; filters are
  compiled and evaluated with ``iii.filter`` over ``{input, output}`` of each
  successful call, and the target gets the envelope, the input or the output
  per ``deliver``;
* a built-in configuration worker: ``configuration::register`` (the initial
  value only when none is stored), ``get`` (``NOT_FOUND`` when nothing is
  stored), ``set``, and the observable ``configuration::on-updated``.

Test controls beyond the stand-in: :meth:`FakeEngine.add_observer` (an
outside observer that records what it receives), ``config_failures`` (errors
the next configuration calls raise), ``observe_failure``,
:meth:`FakeEngine.unregister`, and :meth:`FakeConnection.drop` /
:meth:`FakeConnection.restore` (a worker's link lost and regained, as the
SDK reconnects: calls to and from it fail meanwhile, and the calls its
observers would have received are lost).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from iii import InvocationError
from iii.errors import ObserveRejection
from iii.filter import CompiledFilter, FilterError, compile_filter

from .._bus import CALLER_KEY
from .._hosts.embedded import copy_json
from ._connection import FakeConnection

CONFIG_ON_UPDATED = "configuration::on-updated"
_SINK = "test::sink"  # the target of add_observer's observers: records, never invoked


@dataclass
class Registration:
    """One registered function, as a test can inspect it."""

    function_id: str
    handler: Callable[..., Any]
    description: str | None = None
    metadata: dict[str, Any] | None = None
    request_format: dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    observe: Any = None
    owner: str = ""


@dataclass(eq=False)
class FakeObserver:
    """An observer; also what ``ObserveHooks`` callbacks receive (``.id``)."""

    id: str
    function_id: str
    filters: dict[str, Any] = field(default_factory=dict)
    target: str = _SINK
    deliver: str = "envelope"
    owner: str = ""  # the observing worker
    state: str = "pending"
    told: bool = False  # the source's owner ran its on_observer_added hook
    error: Exception | None = None
    delivered: list[Any] = field(default_factory=list)  # the output of each matching call
    compiled: CompiledFilter | None = None

    def matches(self, doc: dict[str, Any]) -> bool:
        return self.compiled is not None and bool(self.compiled.matches(doc))


class FakeHandle:
    """The observing worker's handle (``ObserverHandle`` of the SDK)."""

    def __init__(self, engine: FakeEngine, observer: FakeObserver) -> None:
        self._engine = engine
        self._observer = observer
        self.id = observer.id

    @property
    def state(self) -> str:
        return self._observer.state

    def ready(self, timeout: float | None = None) -> None:
        with self._engine.changed:
            settled = self._engine.changed.wait_for(lambda: self.state != "pending", timeout)
        if not settled:
            raise TimeoutError(f"observer {self.id} is still pending after {timeout}s")
        if self._observer.error is not None:
            raise self._observer.error

    def dispose(self) -> None:
        self._engine.remove_observer(self._observer)

    def on_state_change(self, listener: Any) -> Callable[[], None]:
        return lambda: None


class FakeEngine:
    """An engine with its first worker's client; see the module docstring."""

    def __init__(self, *, inject_caller: bool = True, worker_id: str = "w-session-manager") -> None:
        self.functions: dict[str, Registration] = {}  # what workers registered (not the built-ins)
        self.order: list[str] = []
        self.triggers: list[dict[str, Any]] = []  # every call this client made
        self.observes: list[tuple[dict[str, Any], Any]] = []  # every observe, from any worker
        self.observers: dict[str, FakeObserver] = {}
        self.inject_caller = inject_caller
        self.worker_id = worker_id
        self.state = "connected"
        self.config_store: dict[str, dict[str, Any]] = {}
        self.config_calls: list[tuple[str, Any]] = []
        self.config_failures: dict[str, list[Exception]] = {}
        self.observe_failure: Exception | None = None
        self.offline: set[str] = set()  # workers whose link is down (FakeConnection.drop)
        self.changed = threading.Condition(threading.RLock())
        self._ids = itertools.count(1)
        self._builtins: dict[str, Callable[[Any], Any]] = {
            "configuration::register": self._config_register,
            "configuration::get": self._config_get,
            "configuration::set": self._config_set,
            CONFIG_ON_UPDATED: lambda event: event,
        }

    # -- the Bus of the first worker -------------------------------------------------

    def register_function(self, function_id: str, handler: Callable[..., Any], *, description: str | None = None,
                          metadata: dict[str, Any] | None = None, request_format: Any = None,
                          response_format: Any = None, observe: Any = None, owner: str | None = None) -> Any:
        with self.changed:
            if function_id in self.functions or function_id in self._builtins:
                raise ValueError(f"function id '{function_id}' already registered")
            self.functions[function_id] = Registration(function_id, handler, description, metadata, request_format,
                                                       response_format, observe, owner or self.worker_id)
            self.order.append(function_id)
        self._refresh_all()
        return {"id": function_id}

    def trigger(self, request: dict[str, Any]) -> Any:
        with self.changed:
            self.triggers.append(request)
        return self.call(request, caller=self.worker_id)

    def observe(self, source: dict[str, Any], target: str, options: Any = None) -> FakeHandle:
        return self.observe_as(self.worker_id, source, target)

    def add_connection_state_listener(self, listener: Callable[[str], None]) -> Callable[[], None]:
        listener(self.state)
        return lambda: None

    def get_connection_state(self) -> str:
        return self.state

    def shutdown(self) -> None:
        self.state = "disconnected"

    # -- the engine -------------------------------------------------------------------

    def call(self, request: dict[str, Any], *, caller: str) -> Any:
        """Route one call from worker ``caller``; fire-and-forget calls get no reply."""
        function_id, payload = request["function_id"], request.get("payload")
        if request.get("action") is None:
            return self.invoke(function_id, payload, caller=caller)
        with contextlib.suppress(InvocationError):  # no reply to a void call: the engine only logs its failure
            self.invoke(function_id, payload, caller=caller)
        return None

    def invoke(self, function_id: str, payload: Any, *, caller: str = "w-caller", activation: bool = False) -> Any:
        """Run a function as the engine would for a call from ``caller``, then
        offer the finished call to its observers."""
        builtin = self._builtins.get(function_id)
        reg = self.functions.get(function_id)
        if builtin is None and reg is None:
            raise InvocationError("function_not_found", f"Function {function_id} not found in namespace default.")
        if builtin is not None:
            result = builtin(payload)  # raises InvocationError itself
        else:
            assert reg is not None
            if reg.owner in self.offline:
                raise InvocationError("timeout", f"the worker serving {function_id} is unreachable")
            data = copy_json(payload)  # as over the wire: a handler never holds the caller's objects
            if self.inject_caller and isinstance(data, dict) and not activation:
                data = {**data, CALLER_KEY: caller}
            try:
                result = reg.handler(data)
            except Exception as e:
                raise InvocationError("invocation_failed", str(e), function_id=function_id) from e
        self._offer(function_id, payload, result)
        return copy_json(result)  # nor a caller the handler's (a service answers from its cache)

    def _offer(self, function_id: str, payload: Any, result: Any) -> None:
        with self.changed:
            active = [o for o in self.observers.values() if o.function_id == function_id and o.state == "active"]
        for obs in active:
            if not obs.matches({"input": payload, "output": result}):
                continue
            obs.delivered.append(result)
            if obs.target == _SINK:
                continue
            if obs.deliver == "input":
                value = payload
            elif obs.deliver == "output":
                value = result
            else:
                value = {"observer_id": obs.id, "function_id": function_id, "input": payload, "output": result}
            with contextlib.suppress(InvocationError):  # the engine only logs a failed activation
                self.invoke(obs.target, value, activation=True)

    # -- observers ----------------------------------------------------------------------

    def observe_as(self, owner: str, source: dict[str, Any], target: str) -> FakeHandle:
        """``observe`` by worker ``owner`` (this client's, or a :class:`FakeConnection`'s)."""
        self.observes.append((source, target))
        obs = FakeObserver(f"o-{next(self._ids)}", source["function_id"], dict(source.get("filters") or {}),
                           target=str(target), deliver=source.get("deliver") or "envelope", owner=owner)
        try:
            obs.compiled = compile_filter(obs.filters)
        except FilterError as e:
            obs.state, obs.error = "error", ObserveRejection(e.code, e.message)
        if self.observe_failure is not None:
            obs.state, obs.error = "error", self.observe_failure
        if obs.error is None:
            with self.changed:
                self.observers[obs.id] = obs
            self._refresh(obs)
        return FakeHandle(self, obs)

    def add_observer(self, function_id: str, filters: dict[str, Any] | None = None) -> FakeObserver:
        """An outside observer (a test's): its owner is told, and each matching
        call's output lands in its ``delivered``."""
        obs = FakeObserver(f"o-{next(self._ids)}", function_id, dict(filters or {}), owner="w-test")
        obs.compiled = compile_filter(obs.filters)
        with self.changed:
            self.observers[obs.id] = obs
        self._refresh(obs)
        return obs

    def remove_observer(self, obs: FakeObserver) -> None:
        with self.changed:
            if self.observers.pop(obs.id, None) is None:
                return
            obs.state = "disposed"
            self.changed.notify_all()
            reg = self.functions.get(obs.function_id)
        hooks = reg.observe if reg is not None and obs.told else None
        if hooks is not None and hooks.on_observer_removed is not None:
            hooks.on_observer_removed(obs)

    def _refresh_all(self) -> None:
        with self.changed:
            observers = list(self.observers.values())
        for obs in observers:
            self._refresh(obs)

    def _refresh(self, obs: FakeObserver) -> None:
        """Tell a new source owner (its hook may refuse), then settle the state."""
        with self.changed:
            reg = self.functions.get(obs.function_id)
            source_up = reg is not None or obs.function_id in self._builtins
            tell = reg is not None and not obs.told
            obs.told = obs.told or tell
        hooks = reg.observe if tell and reg is not None else None
        if hooks is not None and hooks.on_observer_added is not None:
            try:
                hooks.on_observer_added(obs)
            except Exception as e:
                with self.changed:
                    obs.state, obs.error = "error", ObserveRejection("OBSERVE_REJECTED", str(e))
                    self.observers.pop(obs.id, None)
                    self.changed.notify_all()
                return
        with self.changed:
            target_up = obs.target == _SINK or obs.target in self.functions or obs.target in self._builtins
            if obs.state in ("pending", "active"):
                obs.state = "active" if source_up and target_up else "pending"
            self.changed.notify_all()

    def unregister(self, function_id: str) -> None:
        """The function's worker went away: it goes, and observers of it and to it go."""
        with self.changed:
            gone = [o for o in self.observers.values() if function_id in (o.function_id, o.target)]
        for obs in gone:
            self.remove_observer(obs)
        with self.changed:
            self.functions.pop(function_id, None)

    # -- more workers -----------------------------------------------------------------

    def connection(self, name: str = "bridge") -> FakeConnection:
        """Another worker's client on this engine."""
        return FakeConnection(self, name)

    def event_calls(self) -> list[tuple[str, dict[str, Any]]]:
        """Every event-function call this client made, in order."""
        return [(t["function_id"], t["payload"]) for t in self.triggers
                if t["function_id"].startswith("session::on-") and t["function_id"] != "session::on-config-change"]

    # -- the configuration worker -------------------------------------------------------

    def set_config(self, value: Any, config_id: str = "session-manager") -> None:
        """``configuration::set`` from outside (an operator's edit)."""
        self.invoke("configuration::set", {"id": config_id, "value": value}, caller="w-operator")

    def _failure(self, function_id: str, payload: Any) -> None:
        self.config_calls.append((function_id, payload))
        failures = self.config_failures.get(function_id)
        if failures:
            raise failures.pop(0)

    def _config_get(self, payload: Any) -> Any:
        self._failure("configuration::get", payload)
        cid = payload["id"]
        if cid not in self.config_store:
            raise InvocationError("NOT_FOUND", f"configuration '{cid}' not found")
        return {"id": cid, "value": self.config_store[cid]["value"]}

    def _config_register(self, payload: Any) -> Any:
        self._failure("configuration::register", payload)
        cid = payload["id"]
        entry = self.config_store.setdefault(cid, {"value": payload.get("initial_value")})
        if entry["value"] is None and "initial_value" in payload:
            entry["value"] = payload["initial_value"]
        entry.update(schema=payload.get("schema"), name=payload.get("name"), description=payload.get("description"))
        return {"id": cid, **entry}

    def _config_set(self, payload: Any) -> Any:
        self._failure("configuration::set", payload)
        cid = payload["id"]
        entry = self.config_store.setdefault(cid, {"value": None})
        old, entry["value"] = entry["value"], payload.get("value")
        event = {"type": "configuration", "event_type": "configuration:updated", "id": cid,
                 "value": entry["value"], "old_value": old, "new_value": entry["value"]}
        self.invoke(CONFIG_ON_UPDATED, event, caller="w-configuration")
        return {"id": cid, "value": entry["value"]}
