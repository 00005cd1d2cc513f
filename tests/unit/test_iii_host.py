"""The iii host over a fake client: registrations, schemas, errors, events."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
from iii import InvocationError, ObserveHooks, TriggerAction
from jsonschema import Draft202012Validator

from session_manager._bus import strip_caller
from session_manager._hosts.surface import EVENT_SURFACE, FUNCTIONS
from session_manager._wire import events as ev
from session_manager._wire.schemas import json_schema
from session_manager._worker.config_value import WorkerConfig, parse_config
from session_manager._worker.iii_host import IIIHost
from session_manager._worker.served import SERVED
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds
from session_manager.store.bridge.protocol import ON_EVENTS, PUBLISH_EVENTS
from session_manager.store.bridge.server import STORE_FUNCTIONS
from session_manager.testing import FakeEngine

START_MS = 1_000_000

NO_COUNTS = {"cas_retries": 0, "events_coalesced": 0, "events_dropped": 0, "publish_timeouts": 0,
             "compactions": 0, "retention_last_sweep_at": None, "retention_last_swept": 0}


def fs_config(data_dir: Path, **limits: int) -> WorkerConfig:
    return parse_config({"adapter": {"name": "fs", "config": {"data_dir": str(data_dir)}}, **limits})



def call_signature_ok(handler: Any) -> bool:
    """The SDK passes ``data`` (and ``metadata`` only to a parameter of that name)."""
    params = list(inspect.signature(handler).parameters)
    return len(params) == 1 or (len(params) == 2 and params[1] == "metadata")


@pytest.fixture
def fake() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def host(fake: FakeEngine, tmp_path: Path) -> Any:
    h = IIIHost(fake, fs_config(tmp_path / "data"), ids=SequentialIds(), clock=ManualClock(START_MS))
    h.register()
    yield h
    h.close()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 5}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}], "stop_reason": "end",
            "model": "m", "provider": "p", "timestamp": 6}


def events(host: IIIHost, fake: FakeEngine) -> list[tuple[str, dict[str, Any]]]:
    host.emitter.flush()
    return fake.event_calls()


# -- registration ---------------------------------------------------------------


def test_every_function_is_registered_with_schemas_and_flags(host: IIIHost, fake: FakeEngine) -> None:
    # Prevents: a surface row the worker forgets to register, or one registered without schemas.
    store_protocol = [ON_EVENTS] + [f.id for f in STORE_FUNCTIONS] + [PUBLISH_EVENTS]
    expected = [f.id for f in EVENT_SURFACE] + store_protocol + [f.id for f in FUNCTIONS] + [
        "session::on-config-change", "session::config-status"]
    assert fake.order == expected
    # One table: everything registered comes from SERVED, in its order.
    assert [row.id for row in SERVED] == expected
    for f in (*EVENT_SURFACE, *FUNCTIONS):
        reg = fake.functions[f.id]
        assert reg.description == f.description
        assert reg.metadata == f.registration_metadata()
        assert reg.request_format == json_schema(f.request)
        assert reg.response_format == json_schema(f.response, nullable=f.nullable)
        Draft202012Validator.check_schema(reg.request_format)
        Draft202012Validator.check_schema(reg.response_format)
        # a top-level "name"+"type" pair would be coerced into the SDK's legacy format
        assert not {"name", "type"} <= set(reg.request_format)
        assert call_signature_ok(reg.handler)
    for fid in ("session::on-config-change", "session::config-status"):
        assert fake.functions[fid].request_format is not None
        assert fake.functions[fid].response_format is not None


def test_visibility_flags(host: IIIHost, fake: FakeEngine) -> None:
    # Prevents: mutating functions discoverable by agents, or event functions hidden from observers.
    assert fake.functions["session::create"].metadata == {"internal": True, "trace_hidden": True}
    assert fake.functions["session::get"].metadata == {"trace_hidden": True}
    for fid in ev.EVENT_FUNCTIONS:
        assert fake.functions[fid].metadata == {"trace_hidden": True, "private": True}
        assert isinstance(fake.functions[fid].observe, ObserveHooks)


def test_nullable_response_schema_accepts_null(host: IIIHost, fake: FakeEngine) -> None:
    # Prevents: a registered schema that forbids the documented null of session::get.
    schema = fake.functions["session::get"].response_format
    Draft202012Validator(schema).validate(None)
    assert not Draft202012Validator(fake.functions["session::create"].response_format).is_valid(None)


# -- calls and errors --------------------------------------------------------------


def test_round_trip_and_caller_key_is_ignored(host: IIIHost, fake: FakeEngine, tmp_path: Path) -> None:
    # Prevents: the engine-injected _caller_worker_id leaking into stored data or failing validation.
    created = fake.invoke("session::create", {"title": "t", "metadata": {"owner": "u_1"}})
    assert created["session_id"] == "s_001"
    assert created["meta"]["metadata"] == {"owner": "u_1"}
    out = fake.invoke("session::append", {"session_id": "s_001", "message": user("hi")})
    assert out == {"entry_id": "e_001", "parent_id": None, "timestamp": START_MS}
    page = fake.invoke("session::messages", {"session_id": "s_001"})
    assert [m["message"]["content"][0]["text"] for m in page["messages"]] == ["hi"]
    assert (tmp_path / "data" / "s_001.jsonl").exists()
    assert "_caller_worker_id" not in (tmp_path / "data" / "s_001.jsonl").read_text()
    assert fake.invoke("session::get", {"session_id": "nope"}) is None


def test_session_error_crosses_with_its_code(host: IIIHost, fake: FakeEngine) -> None:
    # Prevents: a domain error reaching callers without its stable code first.
    with pytest.raises(InvocationError) as err:
        fake.invoke("session::set-status", {"session_id": "s_x", "status": "working"})
    assert err.value.code == "invocation_failed"
    assert err.value.message.startswith("session/not_found: ")


@pytest.mark.parametrize("payload", [{"session_id": ""}, {}, {"session_id": 5}, ["not", "an", "object"]])
def test_validation_failure_is_invalid_request(host: IIIHost, fake: FakeEngine, payload: Any) -> None:
    # Prevents: a malformed payload surfacing as a traceback instead of session/invalid_request.
    with pytest.raises(InvocationError) as err:
        fake.invoke("session::get", payload)
    assert err.value.message.startswith("session/invalid_request: ")


def test_strip_caller_only_touches_objects() -> None:
    # Prevents: stripping that breaks non-object payloads.
    assert strip_caller({"a": 1, "_caller_worker_id": "w"}) == {"a": 1}
    assert strip_caller([1]) == [1]
    assert strip_caller(None) is None


# -- events ---------------------------------------------------------------------


def test_no_event_call_while_unobserved(host: IIIHost, fake: FakeEngine) -> None:
    # Prevents: the worker calling event functions nobody observes (wasted bus traffic).
    fake.invoke("session::create", {"title": "t"})
    fake.invoke("session::append", {"session_id": "s_001", "message": user("hi")})
    assert events(host, fake) == []


def test_event_calls_only_while_observed_with_exact_payloads(host: IIIHost, fake: FakeEngine) -> None:
    # Prevents: events sent after the last observer left, or payloads missing session_metadata.
    added = fake.add_observer(ev.ON_MESSAGE_ADDED)
    fake.invoke("session::create", {"title": "t", "metadata": {"owner": "u_1"}})
    fake.invoke("session::append", {"session_id": "s_001", "message": user("hi")})
    calls = events(host, fake)
    assert calls == [(ev.ON_MESSAGE_ADDED, {
        "session_id": "s_001", "entry_id": "e_001", "parent_id": None, "message": user("hi"),
        "timestamp": START_MS, "session_metadata": {"owner": "u_1"}})]
    assert all(isinstance(t["action"], type(TriggerAction.Void())) for t in fake.triggers
               if t["function_id"] == ev.ON_MESSAGE_ADDED)
    # the event function's handler returned the event (minus the caller key) to the observer
    assert added.delivered == [calls[0][1]]
    fake.remove_observer(added)
    fake.invoke("session::append", {"session_id": "s_001", "message": user("again")})
    assert len(events(host, fake)) == 1


def test_every_event_kind_and_session_metadata(host: IIIHost, fake: FakeEngine) -> None:
    # Prevents: an event kind never emitted, or session_metadata taken at the wrong moment.
    for fid in ev.EVENT_FUNCTIONS:
        fake.add_observer(fid)
    fake.invoke("session::create", {"title": "t", "metadata": {"owner": "u_1"}})
    fake.invoke("session::create", {"title": "bare"})
    fake.invoke("session::set-status", {"session_id": "s_001", "status": "working"})
    fake.invoke("session::append", {"session_id": "s_001", "message": assistant(""), "entry_id": "r1"})
    fake.invoke("session::update-message", {"session_id": "s_001", "entry_id": "r1",
                                            "content": [{"type": "text", "text": "It"}]})
    fake.invoke("session::set-meta", {"session_id": "s_001", "metadata": {"owner": "u_2"}})
    fake.invoke("session::delete", {"session_id": "s_001"})
    fake.invoke("session::append", {"session_id": "s_002", "custom": {"custom_type": "note", "data": 1}})
    calls = events(host, fake)
    assert [fid for fid, _ in calls] == [ev.ON_CREATED, ev.ON_CREATED, ev.ON_STATUS_CHANGED,
                                         ev.ON_MESSAGE_ADDED, ev.ON_MESSAGE_UPDATED, ev.ON_META_UPDATED,
                                         ev.ON_DELETED, ev.ON_MESSAGE_ADDED]
    meta_of = [p.get("session_metadata", "<absent>") for _, p in calls]
    assert meta_of == [{"owner": "u_1"}, "<absent>", {"owner": "u_1"}, {"owner": "u_1"}, {"owner": "u_1"},
                       {"owner": "u_2"}, {"owner": "u_2"}, "<absent>"]
    assert calls[2][1] == {"session_id": "s_001", "status": "working", "previous_status": "idle",
                           "timestamp": START_MS, "session_metadata": {"owner": "u_1"}}
    assert calls[4][1]["revision"] == 1
    assert calls[7][1]["custom"] == {"custom_type": "note", "data": 1}
    assert "message" not in calls[7][1]


def test_failed_event_delivery_never_fails_the_mutation(host: IIIHost, fake: FakeEngine) -> None:
    # Prevents: a broken event call turning an acknowledged mutation into an error.
    fake.add_observer(ev.ON_CREATED)

    def boom(request: dict[str, Any]) -> Any:
        raise ConnectionError("socket gone")

    real = fake.trigger
    fake.trigger = boom  # type: ignore[method-assign]
    try:
        created = fake.invoke("session::create", {"title": "t"})
        host.emitter.flush()
    finally:
        fake.trigger = real  # type: ignore[method-assign]
    assert created["session_id"] == "s_001"
    assert fake.invoke("session::get", {"session_id": "s_001"})["meta"]["title"] == "t"


def test_draft_and_leaf_moves_are_event_silent(host: IIIHost, fake: FakeEngine) -> None:
    # Prevents: event-silent mutations calling event functions.
    for fid in ev.EVENT_FUNCTIONS:
        fake.add_observer(fid)
    fake.invoke("session::create", {"title": "t"})
    before = len(events(host, fake))
    fake.invoke("session::set-draft", {"session_id": "s_001", "draft": "typing"})
    assert len(events(host, fake)) == before


def test_config_status_at_boot(host: IIIHost, fake: FakeEngine) -> None:
    # Prevents: a config-status that does not match the golden shape at boot.
    assert fake.invoke("session::config-status", {}) == {
        "last_outcome": "applied", "last_error": None, "rejected_reloads": 0, **NO_COUNTS}


def test_close_refuses_new_calls(fake: FakeEngine, tmp_path: Path) -> None:
    # Prevents: calls accepted after shutdown began (they could be cut off mid-write).
    h = IIIHost(fake, fs_config(tmp_path / "d"), ids=SequentialIds(), clock=ManualClock(START_MS))
    h.register()
    h.close()
    with pytest.raises(InvocationError) as err:
        fake.invoke("session::create", {})
    assert err.value.message.startswith("session/storage: ")


# -- CLI -------------------------------------------------------------------------


def test_manifest_from_the_module_entry_point() -> None:
    # Prevents: a --manifest that connects, logs to stdout, or drifts from the registry fields.
    import json
    import subprocess
    import sys

    import session_manager
    from session_manager._worker.manifest import manifest

    out = subprocess.run([sys.executable, "-m", "session_manager", "--manifest"], capture_output=True,
                         text=True, timeout=60, check=True)
    printed = json.loads(out.stdout)
    assert printed == manifest()
    assert printed["name"] == "session-manager" and printed["version"] == "1.2.0" == session_manager.__version__
    assert printed["default_config"]["adapter"] == {"name": "fs", "config": {"data_dir": "data/session-manager"}}
    assert printed["supported_targets"]


def test_domain_errors_are_logged_without_traceback() -> None:
    # Prevents: every not_found answer flooding the worker log with a traceback.
    import logging

    from session_manager._worker.main import QuietDomainErrors
    from session_manager.errors import not_found

    try:
        try:
            raise not_found("s_x")
        except Exception as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError:
        import sys

        record = logging.LogRecord("iii.iii", logging.ERROR, __file__, 1, "Error in handler %s",
                                   ("session::get",), sys.exc_info())
    assert QuietDomainErrors().filter(record)
    assert record.levelno == logging.INFO and record.exc_info is None
    assert "session/not_found" in record.getMessage()
