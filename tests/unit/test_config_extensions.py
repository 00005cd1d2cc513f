"""The configuration keys this worker adds to the Rust reference's: derived
from the model, each optional with its default, hot-reloaded, refused when
bad (the running value kept), and named exactly in the configuration page's
table (docs/configuration.md, the one table of every key) and its switch-back
note (the Rust worker denies unknown fields, so an operator switching back
must know precisely what to remove)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from iii import InvocationError
from pydantic import BaseModel

from session_manager._hosts.retention import RetentionPolicy
from session_manager._wire import events as ev
from session_manager._worker.config_client import Retry
from session_manager._worker.config_value import (
    EXTENSION_KEYS,
    NOT_IN_RUST,
    BridgeConfig,
    ConfigError,
    FsConfig,
    PostgresConfig,
    SqliteConfig,
    WorkerConfig,
    config_schema,
    parse_config,
)
from session_manager._worker.iii_host import IIIHost, start
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds
from session_manager.store.fs import FsStore
from session_manager.testing import FakeEngine

# Every configuration key is listed once, on this page (the README links to it).
CONFIG_DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
NO_WAIT = Retry(attempts=3, delays=(0.0,), sleep=lambda s: None)

# The reference's own configuration (iii-hq/workers session-manager/src/config.rs and the spec of
# record): kept here by hand, so a key of ours can never be mistaken for one of the reference's.
REFERENCE_TOP = {"adapter", "default_list_limit", "max_list_limit", "max_attachment_bytes"}
REFERENCE_ADAPTERS = {"fs": {"data_dir"}, "bridge": {"url", "timeout_ms"}}


def keys(model: type[BaseModel]) -> set[str]:
    """The keys a model accepts, as spelled in a stored value (aliases)."""
    return {f.alias or name for name, f in model.model_fields.items()}


def readme_section(heading: str) -> str:
    """A README section, from the heading line that starts with ``heading`` to the next heading."""
    text = CONFIG_DOC.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}")
    end = re.compile(r"\n#{2,3} ").search(text, start + len(heading) + 1)
    return text[start:end.start() if end else len(text)]


def table_rows(section: str) -> dict[str, list[str]]:
    """The first table of a section: key -> its cells after the key (default, what, hot-reload)."""
    rows: dict[str, list[str]] = {}
    lines = section.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        m = re.fullmatch(r"`([a-z_]+)`", cells[0])
        if m:
            rows[m.group(1)] = cells[1:]
    return rows


def switch_back_keys() -> set[str]:
    """The keys the Configuration section's switch-back note tells an operator to remove."""
    section = readme_section("## Top-level keys")
    note = section[section.index("**Switching back to the Rust worker:**"):]
    listed = note[note.index("so remove"):note.index("from the\nstored value")]
    return set(re.findall(r"`([a-z_]+)`", listed))


def extra_top_keys() -> set[str]:
    return keys(WorkerConfig) - REFERENCE_TOP


def test_the_extra_keys_are_the_models_and_the_readme_names_exactly_them() -> None:
    # Prevents: a key added to the model but missing from the README table or the switch-back note
    # (an operator switching back keeps it and the Rust worker refuses the whole stored value), a
    # note naming a key that no longer exists, and EXTENSION_KEYS (what to_value leaves out at the
    # default) drifting from the model.
    extra = extra_top_keys()
    assert keys(WorkerConfig) >= REFERENCE_TOP  # every reference key still accepted
    assert extra == set(EXTENSION_KEYS) == {"max_request_bytes", "max_batch_entries", "durability", "cache_bytes",
                                         "retention"}
    rows = table_rows(readme_section("## Top-level keys"))
    assert set(rows) - REFERENCE_TOP == extra
    assert set(rows) >= REFERENCE_TOP
    assert switch_back_keys() == extra
    # The operations page's move back to the Rust worker names the same keys (it left `retention` out).
    ops = " ".join((CONFIG_DOC.parent / "operations.md").read_text(encoding="utf-8").split())
    ops = ops[ops.index("remove the keys the Rust worker does not know"):]
    assert set(re.findall(r"`([a-z_]+)`", ops[:ops.index("(it refuses")])) == extra
    # The console form (the registered schema) says the same of each, and of no reference key.
    props = config_schema()["properties"]
    assert {k for k, p in props.items() if p["description"].endswith(NOT_IN_RUST)} == extra
    # "none of the four": the count in the note follows the list.
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
    assert f"names none of the {words[len(extra)]}" in readme_section("## Top-level keys")
    # Inside the adapters: the reference's two adapters take only their own keys; ours is the
    # postgres adapter, whose keys its own table lists and whose note says to leave it.
    assert keys(FsConfig) == REFERENCE_ADAPTERS["fs"] and keys(BridgeConfig) == REFERENCE_ADAPTERS["bridge"]
    adapters = {a.model_fields["name"].annotation.__args__[0]  # type: ignore[union-attr]
                for a in WorkerConfig.model_fields["adapter"].annotation.__args__}  # type: ignore[union-attr]
    assert adapters - set(REFERENCE_ADAPTERS) == {"postgres", "sqlite"}
    pg = readme_section("## Keys of the postgres adapter")
    assert set(table_rows(pg)) == keys(PostgresConfig)
    assert "**Switch-back note:** the Rust worker refuses a stored configuration\nnaming adapter `postgres`" in pg
    lite = readme_section("## Keys of the sqlite adapter")
    assert set(table_rows(lite)) == keys(SqliteConfig)
    assert "**Switch-back note:** the Rust worker refuses a stored configuration naming adapter `sqlite`" in lite


def readme_default(cell: str) -> Any:
    """A README default cell as a value: `flush` -> "flush", 67108864 (64 MiB) -> 67108864."""
    return yaml.safe_load(cell.strip("`")) if cell.startswith("`") else int(cell.split()[0])


def test_readme_defaults_are_the_models() -> None:
    # Prevents: the README promising a default the worker does not run on (an operator who leaves
    # a key out gets a different cap, cache or durability than documented).
    rows = table_rows(readme_section("## Top-level keys"))
    model = WorkerConfig()
    for key, (cell, _, reload) in rows.items():
        want = model.adapter_value() if key == "adapter" else getattr(model, key)
        assert readme_default(cell) == want, key
        assert reload.startswith("yes"), key  # every key hot-reloads
    for heading, model_type in (("## Keys of the postgres adapter", PostgresConfig),
                                ("## Keys of the sqlite adapter", SqliteConfig)):
        fields = {f.alias or name: f for name, f in model_type.model_fields.items()}
        for key, (cell, _, reload) in table_rows(readme_section(heading)).items():
            assert reload.startswith("yes"), key
            if cell == "(required)":
                assert fields[key].is_required(), key
            else:
                assert readme_default(cell) == fields[key].default, key


@pytest.mark.parametrize("key", sorted(EXTENSION_KEYS))
def test_each_extra_key_is_optional_and_absent_means_the_default(key: str, tmp_path: Path) -> None:
    # Prevents: a key of ours made required (a stored value the Rust worker wrote, which cannot
    # carry it, would then be refused here), or an absent key meaning anything but its default, or
    # a default value written out (the Rust worker would refuse it).
    field = WorkerConfig.model_fields[key]
    assert not field.is_required()
    without = {"adapter": {"name": "fs", "config": {"data_dir": str(tmp_path)}}, "max_list_limit": 7}
    parsed = parse_config(without)
    assert getattr(parsed, key) == field.default
    assert parsed == parse_config({**without, key: field.default})
    assert key not in parsed.to_value() and key not in parse_config({**without, key: field.default}).to_value()
    assert getattr(parse_config({}), key) == field.default and getattr(parse_config(None), key) == field.default


# -- hot reload, one case per extra key ----------------------------------------------------------


@dataclass(frozen=True)
class Reload:
    value: Any  # a value away from the default
    bad: Any  # a value the model refuses
    # Given the host, whether the value in force is `value` (True) or the default (False),
    # observed through behaviour, not the parsed config.
    in_force: Callable[[FakeEngine, IIIHost], bool]


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 5}


def _refused(fake: FakeEngine, function_id: str, payload: dict[str, Any], needle: str) -> bool:
    try:
        fake.invoke(function_id, payload)
    except InvocationError as e:
        assert "session/invalid_request" in str(e) and needle in str(e), e
        return True
    return False


def _request_cap(fake: FakeEngine, host: IIIHost) -> bool:
    return _refused(fake, "session::append", {"session_id": "s_001", "message": _user("y" * 600)},
                    "max_request_bytes")


def _batch_cap(fake: FakeEngine, host: IIIHost) -> bool:
    return _refused(fake, "session::append-many", {"session_id": "s_001", "messages": [_user("b")] * 3},
                    "max_batch_entries")


_fsyncs = [0]


def _synced(fake: FakeEngine, host: IIIHost) -> bool:
    before = _fsyncs[0]
    fake.invoke("session::append", {"session_id": "s_001", "message": _user("d")})
    return _fsyncs[0] > before


def _uncached(fake: FakeEngine, host: IIIHost) -> bool:
    # A read leaves its session charged at the next touch of any session: past a zero budget,
    # reading another drops the first; the default budget keeps both.
    fake.invoke("session::get", {"session_id": "s_001"})
    fake.invoke("session::get", {"session_id": "s_002"})
    store = host.runtime.store
    assert isinstance(store, FsStore)
    return "s_001" not in store._sessions


def _value(config: WorkerConfig, key: str) -> Any:
    """A key's value as written in the stored configuration (a nested model as its JSON)."""
    return config.model_dump(mode="json", exclude_none=True)[key]


def _retained(fake: FakeEngine, host: IIIHost) -> bool:
    # The sweep itself is tested in test_erasure_retention.py; here: the policy it reads next.
    return host.retention.policy == RetentionPolicy(idle_days=1)


RELOADS = {
    "max_request_bytes": Reload(500, -1, _request_cap),
    "max_batch_entries": Reload(2, "2", _batch_cap),
    "durability": Reload("fsync", "sync", _synced),
    "cache_bytes": Reload(0, 2**64, _uncached),
    "retention": Reload({"idle_days": 1}, {"idle_days": 0}, _retained),
}


@pytest.fixture
def counted_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.fsync

    def counting(fd: int) -> None:
        _fsyncs[0] += 1
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)


def _boot(fake: FakeEngine, seed: dict[str, Any] | None) -> IIIHost:
    host = start(fake, seed, retry=NO_WAIT, ids=SequentialIds(), clock=ManualClock(1_000))
    host.reloader._retry = NO_WAIT
    return host


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[tuple[FakeEngine, list[IIIHost]]]:
    fake = FakeEngine()
    hosts: list[IIIHost] = []
    yield fake, hosts
    for host in hosts:
        host.close()


def test_reload_cases_cover_every_extra_key() -> None:
    # Prevents: a new key of ours shipping without a hot-reload test below.
    assert set(RELOADS) == extra_top_keys()


@pytest.mark.parametrize("key", sorted(RELOADS))
def test_each_extra_key_hot_reloads_and_a_bad_value_keeps_the_running_one(
        key: str, tmp_path: Path, engine: tuple[FakeEngine, list[IIIHost]], counted_fsync: None) -> None:
    # Prevents: a key of ours that needs a restart to change (or rebuilds and replays the store for
    # it), a bad value half-applied or taking the worker down, a rejection whose error does not name
    # the key, and a key dropped from the value not going back to its default.
    case = RELOADS[key]
    fake, hosts = engine
    base = {"adapter": {"name": "fs", "config": {"data_dir": str(tmp_path / "d")}}}
    host = _boot(fake, base)
    hosts.append(host)
    fake.invoke("session::create", {"title": "t"})
    fake.invoke("session::create", {"title": "u"})
    store = host.runtime.store
    assert not case.in_force(fake, host)
    for fid in ev.EVENT_FUNCTIONS:
        fake.add_observer(fid)
    host.emitter.flush()
    fake.triggers.clear()

    fake.set_config({**base, key: case.value})
    host.emitter.flush()
    assert fake.event_calls() == []  # a tuning reload replays nothing
    assert host.runtime.store is store and _value(host.runtime.config, key) == case.value
    assert fake.invoke("session::config-status", {})["last_outcome"] == "applied"
    assert case.in_force(fake, host)

    fake.set_config({**base, key: case.bad})
    status = fake.invoke("session::config-status", {})
    assert status["last_outcome"] == "rejected" and status["rejected_reloads"] == 1
    assert key in status["last_error"], status["last_error"]
    assert host.runtime.store is store and _value(host.runtime.config, key) == case.value
    assert case.in_force(fake, host)  # the running value kept

    # A restart on the stored bad value is fatal and names the key (never defaults silently);
    # on the good value it runs with it. (A fresh engine: a closed host leaves its functions.)
    host.close()
    hosts.remove(host)
    restarted = FakeEngine()
    restarted.config_store["session-manager"] = {"value": {**base, key: case.bad}}
    with pytest.raises(ConfigError, match=key):
        _boot(restarted, None)
    restarted.config_store["session-manager"] = {"value": {**base, key: case.value}}
    fake, host = restarted, _boot(restarted, None)
    hosts.append(host)
    assert _value(host.runtime.config, key) == case.value and case.in_force(fake, host)

    fake.set_config(base)  # the key removed: back to the default, live
    assert getattr(host.runtime.config, key) == WorkerConfig.model_fields[key].default
    assert not case.in_force(fake, host)
    assert fake.invoke("session::get", {"session_id": "s_001"})["meta"]["title"] == "t"


def readme_seed_example() -> str:
    text = CONFIG_DOC.read_text(encoding="utf-8")
    start = text.index("```yaml\n# seed.yaml")
    return text[start + len("```yaml\n"):text.index("```", start + 3)]


def test_the_readme_seed_example_is_one_the_rust_worker_reads() -> None:
    # Prevents: the README's seed (which the worker stores verbatim as the first value) naming our
    # keys, even at their defaults: an operator copying it stores a value the Rust worker refuses
    # (it denies unknown fields) while the switch-back note says a default value is readable there.
    example = readme_seed_example()
    value = yaml.safe_load(example)
    assert set(value) <= REFERENCE_TOP, set(value) - REFERENCE_TOP
    assert parse_config(value) == WorkerConfig()  # the defaults, spelled out
    # Our keys are shown, commented out, each with its default.
    shown = dict(re.findall(r"^# ([a-z_]+): (\S+)", example, re.M))
    assert set(shown) == extra_top_keys()
    for key, default in shown.items():
        assert yaml.safe_load(default) == WorkerConfig.model_fields[key].default, key


def test_a_seed_naming_our_keys_at_their_defaults_is_stored_as_written(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the switch-back note promising that a stored value holds our keys only when they
    # are away from their defaults: the worker writes such a value only for its own first-boot
    # default; a seed (like any operator's value) is stored as written, so its keys must be removed.
    fake = FakeEngine()
    seed = {"adapter": {"name": "fs", "config": {"data_dir": str(tmp_path / "d")}}, "durability": "flush"}
    host = _boot(fake, seed)
    try:
        assert fake.config_store["session-manager"]["value"] == seed
        assert host.runtime.config == parse_config({"adapter": seed["adapter"]})
    finally:
        host.close()
    monkeypatch.setenv("III_COMPOSE_DIR", str(tmp_path))  # the default data_dir lands here
    bare = FakeEngine()
    host = _boot(bare, None)
    try:
        assert set(bare.config_store["session-manager"]["value"]) == REFERENCE_TOP
    finally:
        host.close()
