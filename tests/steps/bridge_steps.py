"""Steps of the @engine bridge scenarios: a main and a bridged instance.

The main is the in-process fs surface of ``engine_steps`` on the engine at
``III_ENGINE_WS_URL``. The bridged instance's own surface needs an engine of
its own (one engine serves each ``session::*`` id once), so these steps
start a second stand-in (``iii_standin``, from ``../shared/tools/iii-standin``
beside the repository or ``III_STANDIN_DIR``) on a free loopback port and
register the bridged IIIHost there, with the adapter ``bridge`` pointing at
the first engine: its store calls, event publishes and relay go to the main
over a real connection. A caller on the second engine calls the bridged
instance and hosts its observers' sinks. Everything skips when either
engine is unavailable.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_bdd import given, parsers, then, when

from tests.steps.engine_steps import (
    CALL_TIMEOUT_MS,
    WAIT_S,
    Bus,
    connected,
    new_client,
    session_functions,
    shutdown,
    wait_for,
)

BRIDGE_TIMEOUT_MS = 3000


def _standin() -> Any:
    """``iii_standin.running``, or a skip naming where it was looked for."""
    here = Path(__file__).resolve().parents[2]
    candidates = [os.environ.get("III_STANDIN_DIR"), str(here.parent / "shared" / "tools" / "iii-standin")]
    for candidate in candidates:
        if candidate and (Path(candidate) / "iii_standin").is_dir() and candidate not in sys.path:
            sys.path.append(candidate)
    try:
        from iii_standin import running
    except ImportError:
        pytest.skip(f"no iii stand-in to start a second engine (looked in {candidates}); set III_STANDIN_DIR")
    return running


class Bridged:
    """The bridged instance: its engine, worker, host and a caller there."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.stack = contextlib.ExitStack()
        self.url = ""
        self.worker: Any = None
        self.caller: Any = None
        self.host: Any = None
        self.handles: list[Any] = []

    def start(self) -> None:
        from session_manager._worker.config_value import parse_config
        from session_manager._worker.iii_host import IIIHost

        running = _standin()
        engine = self.stack.enter_context(running())
        self.url = engine.url
        self.caller = new_client(self.url, f"bridged-caller-{self.bus.run}")
        self.worker = new_client(self.url, f"session-manager-bridged-{self.bus.run}")
        connected(self.caller)
        connected(self.worker)
        config = parse_config({"adapter": {"name": "bridge", "config": {"url": self.bus.url,
                                                                        "timeout_ms": BRIDGE_TIMEOUT_MS}}})
        # Boot as the worker does: connect to the main, probe it, attach the relay.
        self.host = IIIHost(self.worker, config, local_url=self.url)
        self.host.register()
        wait_for(lambda: len(session_functions(self.caller)) >= len(self.host.refs), what="bridged surface")

    def call(self, fid: str, payload: Any) -> None:
        from iii import InvocationError

        self.bus.result, self.bus.error = None, None
        try:
            self.bus.result = self.caller.trigger({"function_id": fid, "payload": payload,
                                                   "timeout_ms": CALL_TIMEOUT_MS})
        except InvocationError as e:
            self.bus.error = e

    def observe(self, name: str, fid: str, filters: dict[str, Any]) -> None:
        box = self.bus.observed.setdefault(name, [])
        sink = f"bridged-tests::{self.bus.run}::{name}"

        def receive(event: Any) -> Any:
            with self.bus._lock:
                box.append(event)
            return {"ok": True}

        self.caller.register_function(sink, receive, description="@engine bridged test sink")
        handle = self.caller.observe({"function_id": fid, "filters": filters, "deliver": "output"}, sink)
        self.handles.append(handle)
        handle.ready(timeout=WAIT_S)

    def close(self) -> None:
        for handle in self.handles:  # while their client still runs
            with contextlib.suppress(Exception):
                handle.dispose()
        relay = None
        if self.host is not None:
            link = self.host.runtime.bridge
            relay = link.relay_id if link is not None else None
            self.host.close()  # ends the bridge connection: its relay leaves the main's engine
        shutdown(self.worker)
        shutdown(self.caller)
        self.stack.close()
        if self.bus.caller is not None and relay is not None:
            wait_for(lambda: not any(f["function_id"] == relay for f in session_functions(self.bus.caller)),
                     what="the relay leaving the main's engine")


@pytest.fixture
def bridged(bus: Bus) -> Iterator[Bridged]:
    b = Bridged(bus)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def other_bridged(bus: Bus, bridged: Bridged) -> Iterator[Bridged]:
    """A second bridged instance, on a third engine, over the same main."""
    b = Bridged(bus)
    try:
        yield b
    finally:
        b.close()


# -- steps -------------------------------------------------------------------------------


@given("a bridged session-manager on a second engine stores through the main")
def _bridged(bridged: Bridged) -> None:
    bridged.start()


@given(parsers.parse('an observer "{name}" on the bridged instance on "{fid}" with filters:'))
def _bridged_observer(bridged: Bridged, name: str, fid: str, docstring: str) -> None:
    bridged.observe(name, fid, bridged.bus.substitute(docstring))


@when(parsers.parse('I call "{fid}" on the bridged instance with:'))
def _bridged_call(bridged: Bridged, fid: str, docstring: str) -> None:
    bridged.call(fid, bridged.bus.substitute(docstring))


@when("the main instance goes away")
def _main_gone(bridged: Bridged) -> None:
    bus = bridged.bus
    bus.host.close()
    bus.host = None
    shutdown(bus.worker)
    bus.worker = None
    wait_for(lambda: not any(f["function_id"].startswith("session::store::")
                             for f in session_functions(bus.caller)), what="the main leaving its engine")


@given("another bridged session-manager on a third engine stores through the main")
def _other_bridged(other_bridged: Bridged) -> None:
    other_bridged.start()


@given(parsers.parse('an observer "{name}" on the other bridged instance on "{fid}" with filters:'))
def _other_observer(other_bridged: Bridged, name: str, fid: str, docstring: str) -> None:
    other_bridged.observe(name, fid, other_bridged.bus.substitute(docstring))


@when(parsers.parse('both bridged instances append {n:d} messages each to session "{sid}" at once'))
def _both_append(bridged: Bridged, other_bridged: Bridged, n: int, sid: str) -> None:
    bus = bridged.bus
    session_id = bus.substitute(json.dumps(sid))
    acked: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def run(instance: Bridged, name: str) -> None:
        try:
            start.wait()
            for i in range(n):
                answer = instance.caller.trigger({"function_id": "session::append", "timeout_ms": CALL_TIMEOUT_MS,
                                                  "payload": {"session_id": session_id, "message": {
                                                      "role": "user", "timestamp": 1,
                                                      "content": [{"type": "text", "text": f"{name}-{i}"}]}}})
                with bus._lock:
                    acked.append(answer["entry_id"])
        except BaseException as e:  # reported below
            errors.append(e)

    pool = [threading.Thread(target=run, args=(b, name)) for b, name in ((bridged, "first"), (other_bridged, "second"))]
    for t in pool:
        t.start()
    for t in pool:
        t.join(300)
    assert errors == [], errors
    assert len(acked) == 2 * n and len(set(acked)) == 2 * n
    bus.saved["ACKED"] = acked


@then(parsers.parse('the main\'s JSONL of session "{sid}" holds one linear chain of every acknowledged append'))
def _one_chain(bridged: Bridged, sid: str) -> None:
    from session_manager.store import FsStore

    bus = bridged.bus
    session_id = bus.substitute(json.dumps(sid))
    fresh = FsStore(bus.data_dir, read_only=True)  # a reader of the main's files, replayed from disk
    path = [e["id"] for e in fresh.path(session_id, fresh.get_leaf(session_id))]
    assert len(fresh.entries(session_id)) == len(path), "an entry is off the active path: the session forked"
    assert sorted(path) == sorted(bus.saved["ACKED"])
    appends = [r for r in bus.records(session_id) if r["type"] == "append"]
    assert len(appends) == len(path)  # one atomic record per acknowledged append


@then(parsers.parse('observer "{name}" saw each acknowledged append exactly once'))
def _each_once(bridged: Bridged, name: str) -> None:
    bus = bridged.bus
    acked = bus.saved["ACKED"]
    events = bus.received(name, len(acked))
    assert sorted(e["entry_id"] for e in events) == sorted(acked)


@then(parsers.parse('the bus error names "{text}"'))
def _error_names(bridged: Bridged, text: str) -> None:
    assert bridged.bus.error is not None and text in bridged.bus.error.message, bridged.bus.error
