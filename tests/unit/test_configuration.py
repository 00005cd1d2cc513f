"""Configuration: parsing, schema, boot, seed, reloads, last-good, resync."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from iii import InvocationError
from jsonschema import Draft7Validator

from session_manager._wire import events as ev
from session_manager._worker.config_client import (
    ON_CONFIG_CHANGE,
    UPDATED_FILTERS,
    BuildError,
    ConfigurationUnavailable,
    Retry,
    fetch,
    probe,
)
from session_manager._worker.config_value import (
    EXTENSION_KEYS,
    ConfigError,
    config_schema,
    default_config_value,
    parse_config,
    resolve_data_dir,
)
from session_manager._worker.iii_host import SELF_REFERENTIAL, IIIHost, start
from session_manager._worker.seed import Seed, read_seed
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds
from session_manager.store import FsStore
from session_manager.testing import FakeEngine

START_MS = 1_000_000
NO_WAIT = Retry(attempts=3, delays=(0.0,), sleep=lambda s: None)

NO_COUNTS = {"cas_retries": 0, "events_coalesced": 0, "events_dropped": 0, "publish_timeouts": 0,
             "compactions": 0, "retention_last_sweep_at": None, "retention_last_swept": 0}


def fs(data_dir: Path | str, **extra: Any) -> dict[str, Any]:
    return {"adapter": {"name": "fs", "config": {"data_dir": str(data_dir)}}, **extra}


def unreachable(config: Any) -> Any:
    raise ConnectionError(f"the main engine at {config.url} is unreachable")


def boot(fake: FakeEngine, seed: dict[str, Any] | None = None) -> IIIHost:
    host = start(fake, seed, retry=NO_WAIT, ids=SequentialIds(), clock=ManualClock(START_MS),
                 local_url="ws://127.0.0.1:49134", bridge_connector=unreachable)
    host.reloader._retry = NO_WAIT
    return host


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 5}


# -- the value and its schema ---------------------------------------------------


def test_defaults_and_schema_example() -> None:
    # Prevents: a manifest/default config drifting from the documented defaults, and a default
    # value carrying keys of ours that the Rust worker (which denies unknown fields) would refuse.
    assert default_config_value() == {
        "adapter": {"name": "fs", "config": {"data_dir": "data/session-manager"}},
        "default_list_limit": 50, "max_list_limit": 500, "max_attachment_bytes": 52428800}
    # Set away from their defaults, our own keys are written and read back.
    tuned = parse_config({"max_request_bytes": 1024, "max_batch_entries": 7}).to_value()
    assert (tuned["max_request_bytes"], tuned["max_batch_entries"]) == (1024, 7)
    assert parse_config(tuned).to_value() == tuned
    schema = config_schema()
    Draft7Validator.check_schema(schema)
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema["example"] == default_config_value()


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    assert ref.startswith("#/definitions/"), ref
    return schema["definitions"][ref.removeprefix("#/definitions/")]


def test_the_generated_schema_has_the_shape_the_console_renders() -> None:
    # Prevents: a schema change (generator upgrade, new key) that turns the adapter picker, the
    # enums, the limits or the defaults of the console form into something it cannot render.
    schema = config_schema()
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    props = schema["properties"]
    adapter = props["adapter"]
    assert adapter["default"] == {"name": "fs", "config": {"data_dir": "data/session-manager"}}
    assert adapter["description"]
    variants = [_resolve(schema, v) for v in adapter["oneOf"]]  # adjacently tagged: one variant per adapter
    assert [v["properties"]["name"] for v in variants] == [
        {"type": "string", "enum": ["fs"]}, {"type": "string", "enum": ["bridge"]},
        {"type": "string", "enum": ["postgres"]}, {"type": "string", "enum": ["sqlite"]}]
    fs_variant, bridge_variant, pg_variant, sqlite_variant = variants
    for variant in variants:
        assert variant["type"] == "object" and variant["additionalProperties"] is False
        assert set(variant["properties"]) == {"name", "config"} and variant["description"]
        config = _resolve(schema, variant["properties"]["config"])
        assert config["type"] == "object" and config["additionalProperties"] is False
    assert fs_variant["required"] == ["name"] and sorted(bridge_variant["required"]) == ["config", "name"]
    fs_config = _resolve(schema, fs_variant["properties"]["config"])
    assert fs_config["properties"]["data_dir"] == {
        "type": "string", "default": "data/session-manager", "description": fs_config["properties"]["data_dir"][
            "description"]}
    bridge_config = _resolve(schema, bridge_variant["properties"]["config"])
    assert bridge_config["required"] == ["url"] and bridge_config["properties"]["url"]["type"] == "string"
    assert sorted(pg_variant["required"]) == ["config", "name"]
    pg_config = _resolve(schema, pg_variant["properties"]["config"])
    assert pg_config["required"] == ["dsn"] and set(pg_config["properties"]) == {
        "dsn", "pool_size", "connect_timeout_ms", "statement_timeout_ms", "pool_timeout_ms", "schema",
        "outbox_retention_ms", "timeout_ms"}
    assert all(p.get("description") for p in pg_config["properties"].values())
    assert pg_config["properties"]["schema"]["default"] == "public"
    retention = pg_config["properties"]["outbox_retention_ms"]
    assert (retention["type"], retention["minimum"], retention["default"]) == ("integer", 1000, 600_000)
    assert "outbox_retention_ms" not in pg_config["required"]
    assert sorted(sqlite_variant["required"]) == ["config", "name"]
    sqlite_config = _resolve(schema, sqlite_variant["properties"]["config"])
    assert sqlite_config["required"] == ["path"] and set(sqlite_config["properties"]) == {
        "path", "poll_ms", "busy_timeout_ms", "outbox_retention_ms"}
    assert all(p.get("description") for p in sqlite_config["properties"].values())
    poll = sqlite_config["properties"]["poll_ms"]
    assert (poll["type"], poll["minimum"], poll["default"]) == ("integer", 1, 25)
    retention = sqlite_config["properties"]["outbox_retention_ms"]
    assert (retention["minimum"], retention["default"]) == (1000, 60_000)
    call_deadline = pg_config["properties"]["timeout_ms"]  # the postgres adapter's deadline on every call
    assert (call_deadline["type"], call_deadline["minimum"], call_deadline["default"]) == ("integer", 1, 30_000)
    assert "timeout_ms" not in pg_config["required"]
    timeout = bridge_config["properties"]["timeout_ms"]
    assert (timeout["type"], timeout["minimum"], timeout["default"]) == ("integer", 0, 5000)
    defaults = default_config_value()
    for key in ("default_list_limit", "max_list_limit", "max_attachment_bytes"):
        limit = props[key]
        assert (limit["type"], limit["minimum"], limit["maximum"]) == ("integer", 0, 2**64 - 1), key
        assert limit["default"] == defaults[key] and limit["description"], key
    # Every key of the value is in the form; our own keys too (durability, cache_bytes), though a
    # default value leaves them out (written only when not at their default, so the Rust worker reads it).
    assert set(props) == set(defaults) | set(EXTENSION_KEYS)
    assert props["durability"]["enum"] == ["flush", "fsync"] and props["durability"]["default"] == "flush"
    assert props["cache_bytes"]["default"] == 256 * 1024 * 1024 and "cache_bytes" not in defaults


@pytest.mark.parametrize("value", [
    {},
    fs("/x"),
    {"adapter": {"name": "fs"}},
    {"adapter": {"name": "bridge", "config": {"url": "ws://main:49134"}}},
    {"adapter": {"name": "bridge", "config": {"url": "ws://m", "timeout_ms": 10}}, "max_list_limit": 9},
    {"adapter": {"name": "postgres", "config": {"dsn": "postgresql://db/sm"}}},
    {"adapter": {"name": "postgres", "config": {"dsn": "host=db", "pool_size": 4, "connect_timeout_ms": 1000,
                                                "statement_timeout_ms": 0, "pool_timeout_ms": 50, "schema": "s",
                                                "outbox_retention_ms": 1000, "timeout_ms": 250}}},
    {"adapter": {"name": "sqlite", "config": {"path": "data/sm.db"}}},
    {"adapter": {"name": "sqlite", "config": {"path": "/x.db", "poll_ms": 5, "busy_timeout_ms": 0,
                                              "outbox_retention_ms": 1000}}, "durability": "fsync"},
])
def test_schema_and_parser_accept_the_same_values(value: dict[str, Any]) -> None:
    # Prevents: a console form that saves values the worker then refuses.
    Draft7Validator(config_schema()).validate(value)
    parse_config(value)


@pytest.mark.parametrize("value", [
    {"adapter": {"name": "cloud", "config": {}}},
    {"adapter": {"name": "bridge", "config": {}}},
    {"adapter": {"name": "fs", "config": {"datadir": "x"}}},
    {"adapter": {"name": "postgres", "config": {}}},
    {"adapter": {"name": "postgres", "config": {"dsn": "x", "pool_size": 0}}},
    {"adapter": {"name": "postgres", "config": {"dsn": "x", "schema": ""}}},
    {"adapter": {"name": "postgres", "config": {"dsn": "x", "password": "p"}}},
    {"adapter": {"name": "postgres", "config": {"dsn": "x", "outbox_retention_ms": 999}}},
    {"adapter": {"name": "postgres", "config": {"dsn": "x", "outbox_retention_ms": 2**31}}},
    {"adapter": {"name": "sqlite", "config": {}}},
    {"adapter": {"name": "sqlite", "config": {"path": "x.db", "poll_ms": 0}}},
    {"adapter": {"name": "sqlite", "config": {"path": "x.db", "outbox_retention_ms": 999}}},
    {"adapter": {"name": "sqlite", "config": {"path": "x.db", "dsn": "x"}}},
    {"adapter": {"name": "postgres", "config": {"dsn": "x", "timeout_ms": 0}}},
    {"adapter": {"name": "postgres", "config": {"dsn": "x", "timeout_ms": 2**31}}},
    {"default_list_limt": 5},
    {"max_list_limit": -1},
    {"max_list_limit": "5"},
])
def test_schema_and_parser_reject_the_same_values(value: dict[str, Any]) -> None:
    # Prevents: a typo silently running on defaults.
    assert not Draft7Validator(config_schema()).is_valid(value)
    with pytest.raises(ConfigError):
        parse_config(value)


def test_data_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Prevents: relative data dirs landing in the wrong place under iii compose.
    monkeypatch.setenv("III_COMPOSE_DIR", str(tmp_path))
    assert resolve_data_dir("data/sm") == tmp_path / "data" / "sm"
    assert resolve_data_dir("/abs") == Path("/abs")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_data_dir("~/d") == tmp_path / "home" / "d"


def test_seed_expands_plain_vars_and_keeps_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Prevents: the seed expanding ${VAR:default} that belongs to the configuration worker, or an
    # unusable seed silently dropped (it is reported with the file and the reason).
    monkeypatch.setenv("SM_DIR", "/srv/sm")
    monkeypatch.delenv("SM_UNSET", raising=False)
    monkeypatch.delenv("SM_DIR_DEFAULTED", raising=False)
    path = tmp_path / "seed.yaml"
    path.write_text("adapter:\n  name: fs\n  config:\n    data_dir: ${SM_DIR}/x${SM_UNSET}\n"
                    "max_list_limit: 7\n")
    assert read_seed(path) == Seed(str(path), {**fs("/srv/sm/x"), "max_list_limit": 7})
    path.write_text("adapter:\n  name: fs\n  config:\n    data_dir: ${SM_DIR_DEFAULTED:data/y}\n")
    assert read_seed(path) == Seed(str(path), fs("${SM_DIR_DEFAULTED:data/y}"))
    path.write_text("adapter: [unclosed\n")
    assert read_seed(path).value is None and "is not valid YAML" in (read_seed(path).problem or "")
    path.write_text("bogus_key: 1\n")
    assert read_seed(path).value is None and "bogus_key" in (read_seed(path).problem or "")
    missing = read_seed(tmp_path / "missing.yaml")
    assert missing.value is None and (missing.problem or "").startswith("cannot be read")


def test_a_seed_is_validated_after_placeholder_expansion(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Prevents: a ${VAR:default} placeholder smuggling an invalid value past the check (registered,
    # then breaking every later boot).
    monkeypatch.delenv("SM_LIMIT", raising=False)
    path = tmp_path / "seed.yaml"
    path.write_text("max_list_limit: ${SM_LIMIT:lots}\n")
    seed = read_seed(path)
    assert seed.value is None
    assert "after ${VAR:default} expansion" in (seed.problem or "") and "max_list_limit" in (seed.problem or "")
    path.write_text("max_list_limit: ${SM_LIMIT:70}\n")  # a lone placeholder reads as a number
    assert read_seed(path) == Seed(str(path), {"max_list_limit": "${SM_LIMIT:70}"})
    monkeypatch.setenv("SM_LIMIT", "-1")  # validated in this environment, as the worker will expand it
    assert "max_list_limit" in (read_seed(path).problem or "")


# -- boot ---------------------------------------------------------------------------


def test_first_boot_registers_defaults_and_observes_updates(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a first boot with nothing stored failing, or no observer on config updates.
    monkeypatch.setenv("III_COMPOSE_DIR", str(tmp_path))
    fake = FakeEngine()
    host = boot(fake)
    try:
        register = [p for f, p in fake.config_calls if f == "configuration::register"]
        assert len(register) == 1
        assert register[0]["id"] == "session-manager"
        assert register[0]["initial_value"] == default_config_value()
        assert register[0]["schema"] == config_schema()
        assert host.runtime.config == parse_config(default_config_value())
        assert (tmp_path / "data" / "session-manager").is_dir()
        assert fake.observes == [({"function_id": "configuration::on-updated", "filters": UPDATED_FILTERS,
                                   "deliver": "input"}, ON_CONFIG_CHANGE)]
    finally:
        host.close()


def test_stored_value_wins_over_seed(tmp_path: Path) -> None:
    # Prevents: a --config seed overwriting what the operator stored.
    fake = FakeEngine()
    fake.config_store["session-manager"] = {"value": fs(tmp_path / "stored", max_list_limit=9)}
    host = boot(fake, seed=fs(tmp_path / "seed"))
    try:
        assert host.runtime.config.max_list_limit == 9
        assert (tmp_path / "stored").is_dir() and not (tmp_path / "seed").exists()
    finally:
        host.close()


def test_seed_applies_when_nothing_is_stored(tmp_path: Path) -> None:
    # Prevents: the one-time seed being ignored on a first boot.
    fake = FakeEngine()
    host = boot(fake, seed=fs(tmp_path / "seed", default_list_limit=3))
    try:
        assert host.runtime.config.default_list_limit == 3
        assert fake.config_store["session-manager"]["value"] == fs(tmp_path / "seed", default_list_limit=3)
    finally:
        host.close()


def test_transient_failures_are_retried(tmp_path: Path) -> None:
    # Prevents: one slow answer from the configuration worker aborting boot.
    fake = FakeEngine()
    fake.config_failures["configuration::register"] = [InvocationError("TIMEOUT", "slow")]
    host = boot(fake, seed=fs(tmp_path / "d"))
    host.close()


def test_a_missing_configuration_worker_is_retried_not_read_as_nothing_stored(tmp_path: Path) -> None:
    # Prevents: `function_not_found` (the configuration worker not up yet) read as "nothing is
    # stored", which skipped the retry and seeded over a stored value's place in the boot log.
    fake = FakeEngine()
    fake.config_store["session-manager"] = {"value": fs(tmp_path / "stored")}
    fake.config_failures["configuration::get"] = [
        InvocationError("function_not_found", "Function configuration::get not found in namespace default.")]
    assert probe(fake, NO_WAIT) is True
    assert [fid for fid, _ in fake.config_calls] == ["configuration::get", "configuration::get"]
    host = boot(fake, seed=fs(tmp_path / "seed"))
    try:
        assert host.runtime.config.adapter_value() == {"name": "fs", "config": {"data_dir": str(tmp_path / "stored")}}
        assert fake.config_store["session-manager"]["value"] == fs(tmp_path / "stored")
    finally:
        host.close()


def test_nothing_stored_is_an_answer_and_not_retried(tmp_path: Path) -> None:
    # Prevents: a "nothing stored" answer retried with backoff (slow first boots) or read as a failure.
    fake = FakeEngine()
    assert probe(fake, NO_WAIT) is False
    assert [fid for fid, _ in fake.config_calls] == ["configuration::get"]
    with pytest.raises(ConfigurationUnavailable, match="not found"):
        fetch(fake, NO_WAIT)
    assert [fid for fid, _ in fake.config_calls] == ["configuration::get"] * 2
    assert fake.functions == {} and fake.config_store == {}


def test_a_configuration_worker_that_never_comes_is_unavailable_after_the_retries() -> None:
    # Prevents: three `function_not_found` answers reported as "not found" instead of unavailable.
    fake = FakeEngine()
    fake.config_failures["configuration::get"] = [
        InvocationError("function_not_found", "Function configuration::get not found in namespace default.")] * 3
    with pytest.raises(ConfigurationUnavailable, match="configuration::get failed after 3 attempts"):
        fetch(fake, NO_WAIT)
    assert [fid for fid, _ in fake.config_calls] == ["configuration::get"] * 3


def test_configuration_is_a_required_dependency(tmp_path: Path) -> None:
    # Prevents: a worker that starts without its configuration and silently uses defaults.
    fake = FakeEngine()
    fake.config_failures["configuration::register"] = [
        InvocationError("function_not_found", "Function configuration::register not found")] * 3
    with pytest.raises(ConfigurationUnavailable, match="configuration::register failed after 3 attempts"):
        boot(fake, seed=fs(tmp_path / "d"))
    assert fake.functions == {}


def test_unreachable_bridge_at_boot_is_fatal_and_clear(tmp_path: Path) -> None:
    # Prevents: a bridge config silently falling back to a local fs store.
    fake = FakeEngine()
    fake.config_store["session-manager"] = {"value": {"adapter": {"name": "bridge",
                                                                  "config": {"url": "ws://main:1"}}}}
    with pytest.raises(BuildError, match=r"bridge to ws://main:1 unavailable: .*unreachable"):
        boot(fake)
    assert fake.functions == {}


def test_self_referential_bridge_at_boot_is_fatal(tmp_path: Path) -> None:
    # Prevents: a bridge pointed at its own engine, which would store through itself.
    fake = FakeEngine()
    fake.config_store["session-manager"] = {"value": {"adapter": {"name": "bridge",
                                                                  "config": {"url": "ws://LOCALHOST:49134/"}}}}
    with pytest.raises(BuildError, match=SELF_REFERENTIAL):
        boot(fake)
    assert fake.functions == {}


def test_unparseable_stored_value_is_fatal_at_boot() -> None:
    # Prevents: booting on defaults when the stored value has a typo.
    fake = FakeEngine()
    fake.config_store["session-manager"] = {"value": {"max_list_limt": 5}}
    with pytest.raises(ConfigError, match="max_list_limt"):
        boot(fake)


# -- reloads -----------------------------------------------------------------------


@pytest.fixture
def booted(tmp_path: Path) -> Any:
    fake = FakeEngine()
    host = boot(fake, seed=fs(tmp_path / "a"))
    yield fake, host
    host.close()


def test_limits_reload_applies_per_call(booted: tuple[FakeEngine, IIIHost], tmp_path: Path) -> None:
    # Prevents: list limits that need a restart to change.
    fake, host = booted
    for _ in range(3):
        fake.invoke("session::create", {})
    assert len(fake.invoke("session::list", {})["sessions"]) == 3
    store_before = host.runtime.store
    fake.set_config(fs(tmp_path / "a", default_list_limit=2, max_list_limit=2))
    assert host.runtime.store is store_before  # no rebuild for tuning
    assert len(fake.invoke("session::list", {})["sessions"]) == 2
    assert len(fake.invoke("session::list", {"limit": 100})["sessions"]) == 2
    assert fake.invoke("session::config-status", {})["last_outcome"] == "applied"


def test_cache_bytes_hot_reloads(booted: tuple[FakeEngine, IIIHost], tmp_path: Path) -> None:
    # Prevents: a memory budget that needs a restart to change, or a reload that rebuilds the store for it.
    fake, host = booted
    store = host.runtime.store
    assert isinstance(store, FsStore) and store.cache_bytes == 256 * 1024 * 1024
    for _ in range(5):
        fake.invoke("session::create", {})
    fake.set_config({**fs(tmp_path / "a"), "cache_bytes": 0})
    assert host.runtime.store is store and store.cache_bytes == 0
    assert len(store._sessions) == 0  # all dropped at once
    assert len(fake.invoke("session::list", {})["sessions"]) == 5  # and still all there
    assert fake.invoke("session::config-status", {})["last_outcome"] == "applied"


def test_adapter_reload_swaps_store_and_resyncs(booted: tuple[FakeEngine, IIIHost], tmp_path: Path) -> None:
    # Prevents: a data_dir change that keeps serving the old store, or observers left stale after it.
    fake, host = booted
    fake.invoke("session::create", {"title": "old", "metadata": {"owner": "u_1"}})  # s_001 in a/
    # prepare b/ with one session holding a user message and a streamed reply
    other = IIIHost(FakeEngine(), parse_config(fs(tmp_path / "b")), ids=SequentialIds(),
                    clock=ManualClock(START_MS + 5))
    other.register()
    other.client.invoke("session::create", {"title": "new"})
    other.client.invoke("session::append", {"session_id": "s_001", "message": user("u"), "entry_id": "m1"})
    other.client.invoke("session::append", {"session_id": "s_001", "custom": {"custom_type": "n"},
                                            "entry_id": "c1"})
    other.client.invoke("session::update-message", {"session_id": "s_001", "entry_id": "m1",
                                                    "content": [{"type": "text", "text": "v2"}]})
    other.close()
    for fid in ev.EVENT_FUNCTIONS:
        fake.add_observer(fid)
    fake.invoke("session::create", {"title": "gone"})  # s_002: in a/ only, so the swap deletes it
    host.emitter.flush()
    fake.triggers.clear()

    fake.set_config(fs(tmp_path / "b"))
    host.emitter.flush()
    assert host.runtime.config.adapter_value() == {"name": "fs", "config": {"data_dir": str(tmp_path / "b")}}
    calls = fake.event_calls()
    assert [(fid, p["session_id"], p.get("entry_id")) for fid, p in calls] == [
        (ev.ON_DELETED, "s_002", None),
        (ev.ON_CREATED, "s_001", None),
        (ev.ON_MESSAGE_ADDED, "s_001", "m1"),
        (ev.ON_MESSAGE_UPDATED, "s_001", "m1"),
        (ev.ON_MESSAGE_ADDED, "s_001", "c1"),
    ]
    assert calls[0][1] == {"session_id": "s_002", "timestamp": START_MS}
    assert calls[2][1]["message"]["content"] == [{"type": "text", "text": "v2"}]
    assert calls[3][1]["revision"] == 1
    assert calls[4][1]["custom"] == {"custom_type": "n", "data": None}
    # the new store serves calls now
    assert fake.invoke("session::get", {"session_id": "s_001"})["meta"]["title"] == "new"
    assert fake.invoke("session::get", {"session_id": "s_002"}) is None
    assert fake.invoke("session::config-status", {}) == {
        "last_outcome": "applied", "last_error": None, "rejected_reloads": 0, **NO_COUNTS}


def test_unbuildable_adapter_keeps_last_good(booted: tuple[FakeEngine, IIIHost], tmp_path: Path) -> None:
    # Prevents: a bad data_dir taking the worker down or half-swapping it.
    fake, host = booted
    fake.invoke("session::create", {"title": "kept"})
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    assert fake.invoke(ON_CONFIG_CHANGE, {"id": "session-manager"}) == {"ok": True}  # nothing changed yet
    before = host.runtime
    fake.config_store["session-manager"]["value"] = fs(blocker)
    assert fake.invoke(ON_CONFIG_CHANGE, {}) == {"ok": True}
    assert host.runtime is before
    status = fake.invoke("session::config-status", {})
    assert status["last_outcome"] == "rejected"
    assert str(blocker) in status["last_error"]
    assert status["rejected_reloads"] == 1
    fake.set_config({"adapter": {"name": "bridge", "config": {"url": "ws://main:1"}}})
    status = fake.invoke("session::config-status", {})
    assert status["rejected_reloads"] == 2 and "bridge to ws://main:1 unavailable" in status["last_error"]
    fake.set_config({"max_list_limt": 1})  # does not parse
    assert fake.invoke("session::config-status", {})["rejected_reloads"] == 3
    assert fake.invoke("session::get", {"session_id": "s_001"})["meta"]["title"] == "kept"
    fake.set_config(fs(tmp_path / "a", max_list_limit=4))
    assert fake.invoke("session::config-status", {}) == {
        "last_outcome": "applied", "last_error": None, "rejected_reloads": 3, **NO_COUNTS}


def test_fetch_failure_fails_the_reload_and_keeps_status(booted: tuple[FakeEngine, IIIHost]) -> None:
    # Prevents: an unreachable configuration worker being recorded as a rejected value.
    fake, _ = booted
    fake.config_failures["configuration::get"] = [InvocationError("TIMEOUT", "slow")] * 3
    with pytest.raises(InvocationError, match="configuration::get failed after 3 attempts"):
        fake.invoke(ON_CONFIG_CHANGE, {})
    assert fake.invoke("session::config-status", {})["rejected_reloads"] == 0


def test_payload_is_never_trusted(booted: tuple[FakeEngine, IIIHost], tmp_path: Path) -> None:
    # Prevents: any caller injecting configuration through the discoverable hook.
    fake, host = booted
    fake.invoke(ON_CONFIG_CHANGE, {"id": "session-manager", "value": fs(tmp_path / "evil"),
                                   "new_value": fs(tmp_path / "evil")})
    assert not (tmp_path / "evil").exists()
    assert host.runtime.config.adapter_value()["config"]["data_dir"] == str(tmp_path / "a")


def test_overlapping_reloads_converge_on_the_newest_value(booted: tuple[FakeEngine, IIIHost],
                                                          tmp_path: Path) -> None:
    # Prevents: an older reload finishing last and leaving a stale runtime.
    fake, host = booted
    fake.config_store["session-manager"]["value"] = fs(tmp_path / "c", max_list_limit=11)
    threads = [threading.Thread(target=fake.invoke, args=(ON_CONFIG_CHANGE, {})) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert host.runtime.config.max_list_limit == 11
    assert host.runtime.config.adapter_value()["config"]["data_dir"] == str(tmp_path / "c")
