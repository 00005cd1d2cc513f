"""Steps of the @engine scenarios: the production surface on a live engine.

The engine is the one at ``III_ENGINE_WS_URL`` (default
``ws://127.0.0.1:49134``). Before every scenario we connect a caller worker;
the scenario skips, with the reason, when nothing answers, when the engine's
functions cannot be listed, or when another worker already serves
``session::*`` there (we never write into someone else's store). The surface
is then registered in-process by a second worker, over a temp data_dir,
without touching the engine's configuration entry; only the @process
scenario runs the real ``session-manager`` process, which does.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_bdd import given, parsers, then, when

from session_manager._worker.sdk import SdkBus
from tests.steps.common import contains, lookup

DEFAULT_URL = "ws://127.0.0.1:49134"
CALL_TIMEOUT_MS = 10_000
SETTLE_S = 0.5
WAIT_S = 10.0

_unreachable: dict[str, str] = {}  # url -> reason, so a missing engine costs one probe per run


def engine_url() -> str:
    return os.environ.get("III_ENGINE_WS_URL") or DEFAULT_URL


def wait_for(predicate: Callable[[], Any], timeout: float = WAIT_S, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not met within {timeout}s")
        time.sleep(0.05)


def new_client(url: str, name: str, *, probe: bool = False) -> SdkBus:
    from iii_helpers.observability import ReconnectionConfig

    retries = ReconnectionConfig(max_retries=1, initial_delay_ms=100) if probe else None
    return SdkBus(url, worker_name=name, telemetry=False, reconnection_config=retries,
                  invocation_timeout_ms=CALL_TIMEOUT_MS)


def connected(client: SdkBus, timeout: float = 5.0) -> None:
    """Wait for ``connected``; raise ConnectionError once the client gives up
    (the SDK's own wait sleeps its full 30 s even after a final failure)."""
    if not client.wait_connected(timeout_s=timeout):
        raise ConnectionError(f"connection to {client.url} {client.connection_state()}")


def shutdown(client: SdkBus | None) -> None:
    if client is not None:
        client.shutdown()


def session_functions(client: Any) -> list[dict[str, Any]]:
    answer = client.trigger({"function_id": "engine::functions::list",
                             "payload": {"include_internal": True, "prefix": "session::"},
                             "timeout_ms": CALL_TIMEOUT_MS})
    return [f for f in answer.get("functions", []) if str(f.get("function_id", "")).startswith("session::")]


class Bus:
    """One scenario on the engine: a caller, the surface's host, observers."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.url = url
        self.tmp = tmp
        self.data_dir = tmp / "data"
        self.run = f"run-{uuid.uuid4().hex[:8]}"
        self.saved: dict[str, Any] = {"RUN": self.run}
        self.caller: Any = None
        self.worker: Any = None
        self.host: Any = None
        self.result: Any = None
        self.error: Any = None
        self.observed: dict[str, list[Any]] = {}
        self.handles: list[Any] = []
        self.process: subprocess.Popen[bytes] | None = None
        self.process_log = tmp / "worker.log"
        self._lock = threading.Lock()

    # -- set-up -------------------------------------------------------------------

    def connect(self) -> None:
        if self.url in _unreachable:
            pytest.skip(_unreachable[self.url])
        self.caller = new_client(self.url, f"session-manager-engine-tests-{self.run}", probe=True)
        try:
            connected(self.caller)
        except (ConnectionError, AssertionError) as e:
            _unreachable[self.url] = f"no iii engine answers at {self.url} ({e}); set III_ENGINE_WS_URL"
            pytest.skip(_unreachable[self.url])
        try:
            present = session_functions(self.caller)
        except Exception as e:
            pytest.skip(f"the engine at {self.url} cannot list its functions: {e}")
        if present:
            owners = sorted({str(f.get("worker_name")) for f in present})
            pytest.skip(f"the engine at {self.url} already runs a session-manager ({', '.join(owners)}); "
                        "point III_ENGINE_WS_URL at a bare engine")

    def register_surface(self) -> None:
        from session_manager._worker.config_value import parse_config
        from session_manager._worker.iii_host import IIIHost

        self.worker = new_client(self.url, f"session-manager-under-test-{self.run}")
        connected(self.worker)
        config = parse_config({"adapter": {"name": "fs", "config": {"data_dir": str(self.data_dir)}}})
        self.host = IIIHost(self.worker, config)
        self.host.register()
        # Every id, not a count: the event and store functions come first, so
        # a partial count could still lack the session functions.
        wait_for(lambda: len(session_functions(self.caller)) >= len(self.host.refs), what="surface registered")

    def withdraw_surface(self) -> None:
        if self.host is not None:
            self.host.close()
            self.host = None
        shutdown(self.worker)
        self.worker = None
        wait_for(lambda: not session_functions(self.caller), what="surface withdrawn")

    def close(self) -> None:
        for handle in self.handles:
            with contextlib.suppress(Exception):
                handle.dispose()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
        if self.host is not None:
            self.host.close()
        shutdown(self.worker)
        shutdown(self.caller)

    # -- calls ------------------------------------------------------------------

    def substitute(self, text: str) -> Any:
        return json.loads(re.sub(r"\$\{([A-Za-z0-9_]+)\}", lambda m: str(self.saved[m.group(1)]), text))

    def call(self, fid: str, payload: Any) -> None:
        from iii import InvocationError

        self.result, self.error = None, None
        try:
            self.result = self.caller.trigger({"function_id": fid, "payload": payload,
                                               "timeout_ms": CALL_TIMEOUT_MS})
        except InvocationError as e:
            self.error = e

    def expect_ok(self) -> Any:
        assert self.error is None, f"bus call failed: {self.error}"
        return self.result

    # -- observers --------------------------------------------------------------

    def observe(self, name: str, fid: str, filters: dict[str, Any]) -> None:
        box = self.observed.setdefault(name, [])
        sink = f"engine-tests::{self.run}::{name}"

        def receive(event: Any) -> Any:
            with self._lock:
                box.append(event)
            return {"ok": True}

        self.caller.register_function(sink, receive, description="@engine test sink")
        handle = self.caller.observe({"function_id": fid, "filters": filters, "deliver": "output"}, sink)
        self.handles.append(handle)
        handle.ready(timeout=WAIT_S)

    def received(self, name: str, n: int) -> list[Any]:
        box = self.observed[name]
        if n:
            wait_for(lambda: len(box) >= n, what=f"observer {name} receiving {n} events")
        time.sleep(SETTLE_S)  # then make sure nothing else arrives
        with self._lock:
            return list(box)

    # -- JSONL read-back ---------------------------------------------------------

    def records(self, session_id: str, data_dir: Path | None = None) -> list[dict[str, Any]]:
        from session_manager.store.fs._encoding import encode_id

        path = (data_dir or self.data_dir) / f"{encode_id(session_id)}.jsonl"
        assert path.exists(), f"{path} does not exist"
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    # -- the real process -----------------------------------------------------------

    def start_process(self, data_dir: Path) -> None:
        from iii import InvocationError

        from session_manager._bus import classify
        from session_manager.errors import NotFound, Unavailable

        value = {"adapter": {"name": "fs", "config": {"data_dir": str(data_dir)}}}
        try:
            self.caller.trigger({"function_id": "configuration::get", "payload": {"id": "session-manager"},
                                 "timeout_ms": CALL_TIMEOUT_MS})
            # Stored already (an earlier run): point it at our dir; the seed would not apply.
            self.caller.trigger({"function_id": "configuration::set",
                                 "payload": {"id": "session-manager", "value": value},
                                 "timeout_ms": CALL_TIMEOUT_MS})
        except InvocationError as e:
            failure = classify(e)
            if isinstance(failure, Unavailable):
                pytest.skip(f"the engine at {self.url} has no configuration worker ({e})")
            if not isinstance(failure, NotFound):  # nothing stored yet: the seed applies
                raise
        seed = self.tmp / "seed.yaml"
        seed.write_text(json.dumps(value))  # JSON is YAML
        env = {**os.environ, "OTEL_ENABLED": "false"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "session_manager", "--url", self.url, "--config", str(seed)],
            stdout=subprocess.DEVNULL, stderr=self.process_log.open("wb"), env=env)
        wait_for(lambda: "ready: serving" in self.log() or self.process.poll() is not None,
                 timeout=30, what="session-manager process ready")
        assert self.process.poll() is None, f"the process exited:\n{self.log()}"

    def log(self) -> str:
        return self.process_log.read_text(encoding="utf-8", errors="replace") if self.process_log.exists() else ""


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[Bus]:
    b = Bus(engine_url(), tmp_path)
    try:
        b.connect()
        yield b
    finally:
        b.close()


# -- steps -------------------------------------------------------------------------------


@given("the session-manager surface is registered on the engine over a temp data dir")
def _surface(bus: Bus) -> None:
    bus.register_surface()


@given("the in-process surface is withdrawn")
def _withdraw(bus: Bus) -> None:
    bus.withdraw_surface()


@when(parsers.parse('I call "{fid}" over the bus with:'))
def _call(bus: Bus, fid: str, docstring: str) -> None:
    bus.call(fid, bus.substitute(docstring))


@when("these bus calls succeed:")
def _calls(bus: Bus, docstring: str) -> None:
    for fid, payload in bus.substitute(docstring):
        bus.call(fid, payload)
        bus.expect_ok()


@then(parsers.parse("the bus call succeeds with:"))
def _ok_with(bus: Bus, docstring: str) -> None:
    contains(bus.expect_ok(), bus.substitute(docstring))


@then("the bus result is null")
def _null(bus: Bus) -> None:
    assert bus.expect_ok() is None


@then(parsers.parse('the bus call fails with "{code}"'))
def _fails(bus: Bus, code: str) -> None:
    assert bus.error is not None, f"expected {code}, got {bus.result!r}"
    assert bus.error.code == "invocation_failed", bus.error
    assert bus.error.message.startswith(f"{code}: "), bus.error.message


@then(parsers.parse('I remember the bus result "{path}" as "{name}"'))
def _remember(bus: Bus, path: str, name: str) -> None:
    bus.saved[name] = lookup(bus.expect_ok(), path)


@then(parsers.parse('the latest "meta" record of session "{sid}" contains:'))
def _meta_record(bus: Bus, sid: str, docstring: str) -> None:
    session_id = bus.substitute(json.dumps(sid))
    metas = [r["meta"] for r in bus.records(session_id) if r.get("type") in ("meta", "append") and "meta" in r]
    assert metas, "no meta record"
    contains(metas[-1], bus.substitute(docstring))


@then(parsers.parse('the latest "entry" record "{entry_id}" of session "{sid}" contains:'))
def _entry_record(bus: Bus, entry_id: str, sid: str, docstring: str) -> None:
    session_id = bus.substitute(json.dumps(sid))
    entries = [r["entry"] for r in bus.records(session_id)
               if r.get("type") in ("entry", "append") and r.get("entry", {}).get("id") == entry_id]
    assert entries, f"no entry record for {entry_id}"
    contains(entries[-1], bus.substitute(docstring))


@then(parsers.parse('the active leaf recorded for session "{sid}" is "{entry_id}"'))
def _leaf_record(bus: Bus, sid: str, entry_id: str) -> None:
    leaves = []
    for r in bus.records(bus.substitute(json.dumps(sid))):
        if r.get("type") == "leaf":
            leaves.append(r.get("entry_id"))
        elif r.get("type") == "append":
            leaves.append(r["entry"]["id"])
    assert leaves and leaves[-1] == entry_id, leaves


@given(parsers.parse('an observer "{name}" on "{fid}" with filters:'))
def _observer(bus: Bus, name: str, fid: str, docstring: str) -> None:
    bus.observe(name, fid, bus.substitute(docstring))


@then(parsers.parse('observer "{name}" receives exactly {n:d} events'))
def _exactly(bus: Bus, name: str, n: int) -> None:
    events = bus.received(name, n)
    assert len(events) == n, json.dumps(events, indent=1)[:2000]


@then(parsers.parse('observer "{name}" events all contain:'))
def _all_contain(bus: Bus, name: str, docstring: str) -> None:
    want = bus.substitute(docstring)
    for event in bus.observed[name]:
        contains(event, want)


@when(parsers.parse('the reply "{entry_id}" of session "{sid}" streams {n:d} updates over the bus'))
def _stream(bus: Bus, entry_id: str, sid: str, n: int) -> None:
    for i in range(1, n + 1):
        bus.call("session::update-message", {"session_id": sid, "entry_id": entry_id,
                                             "expected_revision": i - 1,
                                             "content": [{"type": "text", "text": f"token {i}"}]})
        assert bus.expect_ok() == {"updated": True, "revision": i}


@then(parsers.parse('observer "{name}" saw revisions 1 to {n:d} of "{entry_id}", the highest with text "{text}"'))
def _revisions(bus: Bus, name: str, n: int, entry_id: str, text: str) -> None:
    events = bus.observed[name]
    assert all(e["entry_id"] == entry_id for e in events)
    # Delivery is unordered by contract: each revision exactly once, and each
    # one carries its own content, so "keep the highest" converges.
    assert sorted(e["revision"] for e in events) == list(range(1, n + 1))
    for e in events:
        assert e["message"]["content"] == [{"type": "text", "text": f"token {e['revision']}"}]
    assert max(events, key=lambda e: e["revision"])["message"]["content"][0]["text"] == text


@given(parsers.parse('the session-manager process runs with data dir "{name}"'))
def _process(bus: Bus, name: str) -> None:
    bus.start_process(bus.tmp / name)


@then(parsers.parse('the process data dir "{name}" holds the session "{sid}"'))
def _process_file(bus: Bus, name: str, sid: str) -> None:
    records = bus.records(bus.substitute(json.dumps(sid)), bus.tmp / name)
    assert records[0]["type"] == "meta"


@when(parsers.parse('the configuration sets the process data dir to "{name}"'))
def _set_dir(bus: Bus, name: str) -> None:
    before = bus.log().count("now serves")
    value = {"adapter": {"name": "fs", "config": {"data_dir": str(bus.tmp / name)}}}
    bus.caller.trigger({"function_id": "configuration::set", "payload": {"id": "session-manager",
                                                                         "value": value},
                        "timeout_ms": CALL_TIMEOUT_MS})
    wait_for(lambda: bus.log().count("now serves") > before, what="the process applying the new data dir")


@when("the session-manager process gets SIGTERM")
def _sigterm(bus: Bus) -> None:
    assert bus.process is not None
    bus.process.send_signal(signal.SIGTERM)


@then(parsers.parse('it exits with status 0 and logged "{text}"'))
def _exited(bus: Bus, text: str) -> None:
    assert bus.process is not None
    assert bus.process.wait(timeout=20) == 0, bus.log()
    assert text in bus.log(), bus.log()
