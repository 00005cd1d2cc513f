"""The bridge topology over fake engines: the store protocol a main serves,
the BridgeStore over it, event publish/relay fan-out, modes and reloads.

A main is an fs IIIHost on one FakeEngine; each bridged instance is an IIIHost
on a FakeEngine of its own whose bridge connector returns a second client of
the main's fake engine (``FakeEngine.connection``), as a real bridge opens a
dedicated connection to the main's engine.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from iii import InvocationError
from jsonschema import Draft202012Validator

from session_manager._wire import events as ev
from session_manager._worker.bridge_link import RELAY_PREFIX
from session_manager._worker.config_client import ON_CONFIG_CHANGE, Retry
from session_manager._worker.config_value import parse_config
from session_manager._worker.iii_host import IIIHost
from session_manager.clock import ManualClock
from session_manager.errors import StoreError
from session_manager.ids import SequentialIds
from session_manager.store import FsStore
from session_manager.store.base import Commit, SessionStore
from session_manager.store.bridge import BridgeStore
from session_manager.store.bridge import protocol as sp
from session_manager.store.bridge import protocol_cas as atomic
from session_manager.store.bridge import protocol_search as searching
from session_manager.store.bridge import server as ss
from session_manager.store.fs._encoding import encode_id
from session_manager.testing import FakeConnection, FakeEngine
from session_manager.testing.contract import StoreContract
from session_manager.testing.contract import custom as custom_entry
from session_manager.testing.contract import message as message_entry
from session_manager.testing.contract import meta as meta_of

START_MS = 1_000_000
MAIN_URL = "ws://main-engine:49134"
NO_WAIT = Retry(attempts=1, delays=(0.0,), sleep=lambda s: None)


def fs_value(data_dir: Path) -> dict[str, Any]:
    return {"adapter": {"name": "fs", "config": {"data_dir": str(data_dir)}}}


def bridge_value(url: str = MAIN_URL, timeout_ms: int = 700) -> dict[str, Any]:
    return {"adapter": {"name": "bridge", "config": {"url": url, "timeout_ms": timeout_ms}}}


def user(text: str, ts: int = 5) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}], "stop_reason": "end",
            "model": "m", "provider": "p", "timestamp": 6}


class Topology:
    """One main and any number of bridged instances, sharing ids and clock."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ids = SequentialIds()
        self.clock = ManualClock(START_MS)
        self.main_fake = FakeEngine()
        self.main = IIIHost(self.main_fake, parse_config(fs_value(tmp / "main")), ids=self.ids,
                            clock=self.clock, local_url=MAIN_URL)
        self.main.register()
        self.hosts: list[IIIHost] = [self.main]
        self.connections: list[FakeConnection] = []

    def connect(self, config: Any) -> FakeConnection:
        if config.url != MAIN_URL:
            raise ConnectionError(f"the main engine at {config.url} is unreachable")
        conn = self.main_fake.connection()
        self.connections.append(conn)
        return conn

    def bridged(self, value: dict[str, Any] | None = None) -> tuple[IIIHost, FakeEngine]:
        local = FakeEngine()
        host = IIIHost(local, parse_config(value or bridge_value()), ids=self.ids, clock=self.clock,
                       local_url=f"ws://local-{len(self.hosts)}:49134", bridge_connector=self.connect,
                       reloader_retry=NO_WAIT)
        host.register()
        local.config_store["session-manager"] = {"value": value or bridge_value()}
        host.observe_configuration()  # reloads arrive as on the engine: configuration::set -> on-updated
        self.hosts.append(host)
        return host, local

    def settle(self) -> None:
        """Publishes, then the main's fan-out, then every relay's local calls."""
        for host in self.hosts[1:]:
            host.flush()
        self.main.flush()
        for host in self.hosts[1:]:
            host.flush()

    def close(self) -> None:
        for host in reversed(self.hosts):
            host.close()


@pytest.fixture
def topo(tmp_path: Path) -> Iterator[Topology]:
    t = Topology(tmp_path)
    yield t
    t.close()


def call_error(fake: FakeEngine, fid: str, payload: Any) -> InvocationError:
    with pytest.raises(InvocationError) as err:
        fake.invoke(fid, payload)
    return err.value


def records(data_dir: Path, session_id: str) -> list[dict[str, Any]]:
    path = data_dir / f"{encode_id(session_id)}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# -- the BridgeStore over a main: the adapter contract -------------------------------------


def open_bridge_store(tmp_path: Path) -> Iterator[BridgeStore]:
    """A BridgeStore over an fs main (its files under ``tmp_path/data``) on a fake engine."""
    fake = FakeEngine()
    main = IIIHost(fake, parse_config(fs_value(tmp_path / "data")), ids=SequentialIds(),
                   clock=ManualClock(START_MS))
    main.register()
    yield BridgeStore(fake.connection(), 700)
    main.close()


class TestBridgeStore(StoreContract):
    """The adapter contract, over the bridge."""

    def open_store(self, tmp_path: Path) -> Iterator[SessionStore]:
        yield from open_bridge_store(tmp_path)

    def reopened(self, tmp_path: Path) -> list[SessionStore]:
        return [FsStore(tmp_path / "data", read_only=True)]  # what the main wrote (the main still owns it)

    def second_writer(self, store: SessionStore) -> SessionStore:
        """A second bridged instance's link: its own connection to the same main."""
        assert isinstance(store, BridgeStore)
        return BridgeStore(store.client.engine.connection("second-bridge"), store.timeout_ms)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[BridgeStore]:
    yield from open_bridge_store(tmp_path)


def test_bridge_store_maps_each_method_to_the_protocol(store: BridgeStore, tmp_path: Path) -> None:
    # Prevents: a store method that skips the main, caches, or calls without the configured timeout.
    conn = store.client
    store.commit("s_1", Commit(meta=meta_of("s_1")))
    store.commit("s_1", Commit(entries=(message_entry("e_1", None),), leaf="e_1",
                               meta=meta_of("s_1", message_count=1)))
    store.commit("s_1", Commit(entries=(message_entry("e_1", None, "v2", revision=1),),
                               meta=meta_of("s_1", message_count=1, updated_at=START_MS + 1)))
    store.commit("s_1", Commit(entries=(custom_entry("c_1", "e_1"), custom_entry("c_2", "c_1")), leaf="c_2",
                               meta=meta_of("s_1", message_count=1)))
    store.get_meta("s_1")
    store.get_meta("s_1")  # nothing cached: a second read is a second call
    store.put_attachment({"attachment_id": "a_1", "session_id": "s_1", "name": "n", "mime": "text/plain",
                          "size": 2, "sha256": "", "created_at": 1}, [b"h", b"i"])
    assert store.read_attachment("s_1", "a_1") == b"hi"
    store.delete_session("s_1")
    # one call per commit and per delete, whatever they carry
    assert [t["function_id"] for t in conn.triggers] == [
        atomic.COMMIT, atomic.COMMIT, atomic.COMMIT, atomic.COMMIT,
        sp.GET_META, sp.GET_META, sp.PUT_ATTACHMENT, sp.GET_ATTACHMENT, atomic.DELETE_SESSION]
    assert {t["timeout_ms"] for t in conn.triggers} == {700}
    assert list((tmp_path / "data").glob("*.jsonl")) == []


def rust_like(fake: FakeEngine) -> None:
    """A main without our atomic calls, as a Rust main is."""
    for fid in (atomic.COMMIT, atomic.DELETE_SESSION, atomic.READ_PATH, searching.SEARCH):
        fake.unregister(fid)


def test_a_main_without_the_atomic_calls_gets_the_reference_calls(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: a bridge that cannot store on a Rust main (no session::store::commit there), or that
    # stops using the atomic calls for good after one function_not_found.
    fake = FakeEngine()
    main = IIIHost(fake, parse_config(fs_value(tmp_path / "data")), ids=SequentialIds(),
                   clock=ManualClock(START_MS))
    main.register()
    rust_like(fake)
    store = BridgeStore(fake.connection(), 700)
    conn = store.client
    with caplog.at_level(logging.WARNING, logger="session_manager.store.bridge"):
        store.commit("s_1", Commit(meta=meta_of("s_1")))
        applied = store.commit("s_1", Commit(entries=(message_entry("e_1", None),), leaf="e_1",
                                             meta=meta_of("s_1", message_count=1), append=True, chain=True))
        store.commit("s_1", Commit(entries=(custom_entry("c_1", "e_1"), custom_entry("c_2", "c_1")), leaf="c_2",
                                   meta=meta_of("s_1", message_count=1)))
        assert [e["id"] for e in store.path("s_1", "c_2")] == ["e_1", "c_1", "c_2"]
        store.delete_session("s_1")
    assert applied.meta == meta_of("s_1", message_count=1) and applied.entries[0]["parent_id"] is None
    assert [t["function_id"] for t in conn.triggers] == [
        atomic.COMMIT, sp.PUT_META, sp.COMMIT_APPEND, sp.PUT_ENTRY, sp.PUT_ENTRY, sp.SET_ACTIVE_LEAF, sp.PUT_META,
        sp.LIST_ENTRIES, sp.DELETE_ATTACHMENTS, sp.DELETE_ACTIVE_LEAF, sp.DELETE_ENTRIES, sp.DELETE_META]
    assert conn.triggers[2]["payload"]["parent_explicit"] is False
    assert caplog.text.count("falling back to multi-call writes") == 1
    assert not store.atomic
    store._legacy_until = 0.0  # the re-check interval has passed: the main is asked again
    assert store.atomic
    store.commit("s_3", Commit(meta=meta_of("s_3")))
    store.commit("s_3", Commit(entries=(message_entry("e_9", None),), leaf="e_9", meta=meta_of("s_3", message_count=1)))
    store._legacy_until = 0.0  # a read first, this time
    assert [e["id"] for e in store.path("s_3", "e_9")] == ["e_9"]
    assert [t["function_id"] for t in conn.triggers[-2:]] == [atomic.READ_PATH, sp.LIST_ENTRIES]
    store._legacy_until = 0.0
    store.commit("s_2", Commit(meta=meta_of("s_2")))
    assert [t["function_id"] for t in conn.triggers[-2:]] == [atomic.COMMIT, sp.PUT_META]
    main.close()


def test_bridge_writes_land_in_the_main_files(store: BridgeStore, tmp_path: Path) -> None:
    # Prevents: a bridged write the main acknowledges but does not persist, or persists altered.
    store.commit("s_1", Commit(meta=meta_of("s_1")))
    store.commit("s_1", Commit(entries=(message_entry("e_1", None),), leaf="e_1",
                               meta=meta_of("s_1", message_count=1)))
    fresh = FsStore(tmp_path / "data", read_only=True)
    assert fresh.get_entry("s_1", "e_1") == message_entry("e_1", None)  # explicit null parent kept
    assert fresh.get_leaf("s_1") == "e_1"
    assert fresh.get_meta("s_1") == meta_of("s_1", message_count=1)
    assert [r["type"] for r in records(tmp_path / "data", "s_1")][-1] in ("append", "commit")


class ScriptedClient:
    """A main that answers every call with one fixed value."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def trigger(self, request: dict[str, Any]) -> Any:
        return self.answer


@pytest.mark.parametrize(("answer", "call"), [
    ({"title": "no id"}, lambda s: s.get_meta("s_1")),
    ({}, lambda s: s.list_metas()),
    ({"metas": [{"session_id": 1}]}, lambda s: s.list_metas()),
    ({"kind": "message", "id": "e"}, lambda s: s.get_entry("s_1", "e")),
    ({"entry_id": 5}, lambda s: s.get_leaf("s_1")),
    ("nope", lambda s: s.get_leaf("s_1")),
    ({"entries": "x"}, lambda s: s.entries("s_1")),
    ({"ok": False}, lambda s: s.commit("s_1", Commit(meta=meta_of("s_1")))),
    (None, lambda s: s.commit("s_1", Commit(entries=(message_entry("e", None),), leaf="e",
                                             meta=meta_of("s_1")))),
    ({"meta": {}, "data": "not base64!"}, lambda s: s.read_attachment("s_1", "a")),
    ({"deleted": "yes"}, lambda s: s.delete_attachment("s_1", "a")),
    ({"attachments": [{"attachment_id": "a"}]}, lambda s: s.list_attachments("s_1")),
])
def test_malformed_answers_are_storage_errors(answer: Any, call: Any) -> None:
    # Prevents: a garbled reply from the main reaching the domain as if it were data.
    with pytest.raises(StoreError, match="returned malformed data"):
        call(BridgeStore(ScriptedClient(answer), 50))


def test_failures_surface_as_session_storage_through_the_service(topo: Topology) -> None:
    # Prevents: an unreachable main or a timeout escaping as anything but session/storage.
    _host, local = topo.bridged()
    sid = local.invoke("session::create", {"title": "t"})["session_id"]
    conn = topo.connections[0]
    conn.failure = InvocationError("TIMEOUT", "invocation timed out after 700ms")
    calls = [
        ("session::create", {}), ("session::get", {"session_id": sid}), ("session::list", {}),
        ("session::append", {"session_id": sid, "message": user("x")}),
        ("session::messages", {"session_id": sid}), ("session::messages-tail", {"session_id": sid}),
        ("session::set-status", {"session_id": sid, "status": "working"}),
        ("session::put-attachment", {"session_id": sid, "name": "a", "mime": "text/plain", "data": "aGk="}),
        ("session::list-attachments", {"session_id": sid}),
        ("session::get-attachment", {"session_id": sid, "attachment_id": "a_1"}),
        ("session::delete", {"session_id": sid}),
    ]
    for fid, payload in calls:
        error = call_error(local, fid, payload)
        assert error.message.startswith("session/storage: bridge session::store::"), (fid, error.message)
        assert "TIMEOUT" in error.message
    conn.failure = None
    assert local.invoke("session::get", {"session_id": sid})["meta"]["title"] == "t"  # nothing half-done


# -- the protocol on the main --------------------------------------------------------------------


def test_protocol_registrations(topo: Topology) -> None:
    # Prevents: store plumbing discoverable by agents, or registered without schemas.
    fake = topo.main_fake
    for fid in [f.id for f in ss.STORE_FUNCTIONS] + [sp.PUBLISH_EVENTS]:
        reg = fake.functions[fid]
        assert reg.metadata == {"internal": True, "trace_hidden": True}, fid
        Draft202012Validator.check_schema(reg.request_format)
        Draft202012Validator.check_schema(reg.response_format)
        assert reg.description and "fs instances only" in reg.description
    on_events = fake.functions[sp.ON_EVENTS]
    assert on_events.metadata == {"internal": True, "trace_hidden": True, "private": True}
    assert on_events.observe is not None
    assert len(ss.STORE_FUNCTIONS) == 21  # 20 before session::store::search


def test_raw_reads_and_writes(topo: Topology) -> None:
    # Prevents: a protocol function that answers but does not reach (or read) the fs store.
    f = topo.main_fake
    assert f.invoke(sp.GET_META, {"session_id": "s_9"}) is None
    assert f.invoke(sp.PUT_META, {"meta": meta_of("s_9")}) == {"ok": True}
    assert f.invoke(sp.GET_META, {"session_id": "s_9"}) == meta_of("s_9")
    assert f.invoke(sp.LIST_METAS, {}) == {"metas": [meta_of("s_9")]}
    assert f.invoke(sp.PUT_ENTRY, {"session_id": "s_9", "entry": message_entry("e_1", None)}) == {"ok": True}
    assert f.invoke(sp.PUT_ENTRY, {"session_id": "s_9", "entry": custom_entry("c_1", "e_1")}) == {"ok": True}
    assert f.invoke(sp.GET_ENTRY, {"session_id": "s_9", "entry_id": "c_1"}) == custom_entry("c_1", "e_1")
    assert f.invoke(sp.GET_ENTRY, {"session_id": "s_9", "entry_id": "nope"}) is None
    assert f.invoke(sp.GET_ACTIVE_LEAF, {"session_id": "s_9"}) == {"entry_id": None}
    assert f.invoke(sp.SET_ACTIVE_LEAF, {"session_id": "s_9", "entry_id": "c_1"}) == {"ok": True}
    assert f.invoke(sp.GET_ACTIVE_LEAF, {"session_id": "s_9"}) == {"entry_id": "c_1"}
    assert f.invoke(sp.LIST_ENTRIES, {"session_id": "s_9"}) == {
        "entries": [message_entry("e_1", None), custom_entry("c_1", "e_1")]}
    a = {"attachment_id": "a_1", "session_id": "s_9", "name": "n", "mime": "text/plain", "size": 2,
         "sha256": "x", "created_at": 1}
    assert f.invoke(sp.PUT_ATTACHMENT, {"meta": a, "data": "aGk="}) == {"ok": True}
    assert f.invoke(sp.GET_ATTACHMENT, {"session_id": "s_9", "attachment_id": "a_1"}) == {"meta": a,
                                                                                         "data": "aGk="}
    assert f.invoke(sp.LIST_ATTACHMENTS, {"session_id": "s_9"}) == {"attachments": [a]}
    assert f.invoke(sp.DELETE_ATTACHMENT, {"session_id": "s_9", "attachment_id": "a_1"}) == {"deleted": True}
    assert f.invoke(sp.DELETE_ATTACHMENT, {"session_id": "s_9", "attachment_id": "a_1"}) == {"deleted": False}
    assert f.invoke(sp.GET_ATTACHMENT, {"session_id": "s_9", "attachment_id": "a_1"}) is None
    # read back from disk by a fresh store
    fresh = FsStore(topo.tmp / "main", read_only=True)
    assert fresh.get_leaf("s_9") == "c_1" and fresh.get_meta("s_9") == meta_of("s_9")
    for fid in (sp.DELETE_ATTACHMENTS, sp.DELETE_ACTIVE_LEAF, sp.DELETE_ENTRIES, sp.DELETE_META):
        assert f.invoke(fid, {"session_id": "s_9"}) == {"ok": True}
    assert f.invoke(sp.LIST_METAS, {}) == {"metas": []}
    assert not (topo.tmp / "main" / "s_9.jsonl").exists()
    # the main's own domain sees protocol writes
    assert f.invoke("session::get", {"session_id": "s_9"}) is None


def test_bad_requests_are_invalid_request(topo: Topology) -> None:
    # Prevents: a malformed protocol call writing garbage or crashing the handler.
    f = topo.main_fake
    assert call_error(f, sp.PUT_META, {"meta": {"session_id": "s"}}).message.startswith(
        "session/invalid_request: meta.")
    assert call_error(f, sp.PUT_ENTRY, {"session_id": "s", "entry": {"kind": "x"}}).message.startswith(
        "session/invalid_request")
    assert call_error(f, sp.GET_META, {}).message.startswith("session/invalid_request: session_id")
    a = {"attachment_id": "a", "session_id": "s", "name": "n", "mime": "m", "size": 1, "sha256": "", "created_at": 1}
    assert call_error(f, sp.PUT_ATTACHMENT, {"meta": a, "data": "***"}).message.startswith(
        "session/invalid_request: data")
    assert f.invoke(sp.LIST_METAS, {}) == {"metas": []}


def test_store_commit_is_whole_compare_and_set_and_replay_safe(topo: Topology) -> None:
    # Prevents: a stale or replayed commit written (a reverted title, a doubled append), or a batch
    # applied in part; the refusals are typed answers, not errors to parse.
    from session_manager.store._core.cas import meta_version

    f = topo.main_fake
    log = topo.tmp / "main" / "s_1.jsonl"
    assert f.invoke(atomic.COMMIT, {"session_id": "s_1", "meta": meta_of("s_1"), "expect_meta_version": None})[
        "committed"] is True
    # null: the session must not exist -- it does now
    again = f.invoke(atomic.COMMIT, {"session_id": "s_1", "meta": meta_of("s_1", title="x"),
                                     "expect_meta_version": None})
    assert again == {"committed": False, "conflict": "the session meta changed since the commit was decided"}
    # an append: parent and counts from the main, whatever was sent
    first = {**message_entry("e_1", "stale"), "timestamp": START_MS + 5}
    answer = f.invoke(atomic.COMMIT, {"session_id": "s_1", "entries": [first], "leaf": "e_1",
                                      "meta": meta_of("s_1", title="bridge copy", message_count=9),
                                      "append": True, "chain": True})
    assert answer["committed"] is True and answer["entries"][0]["parent_id"] is None
    assert answer["meta"] == meta_of("s_1", message_count=1, updated_at=START_MS + 5)
    before = log.read_bytes()
    replay = f.invoke(atomic.COMMIT, {"session_id": "s_1", "entries": [first], "leaf": "e_1", "append": True,
                                      "chain": True})
    assert replay["committed"] is False and "already exists" in replay["conflict"]
    # a stale meta version, and a stale revision: refused, nothing written
    stale = f.invoke(atomic.COMMIT, {"session_id": "s_1", "meta": meta_of("s_1", title="late"),
                                     "expect_meta_version": meta_version(meta_of("s_1"))})
    assert stale["committed"] is False
    rewrite = {**message_entry("e_1", None, "v2", revision=1), "timestamp": START_MS + 5}
    old_revision = f.invoke(atomic.COMMIT, {"session_id": "s_1", "entries": [rewrite],
                                            "expect_revisions": {"e_1": 3}})
    assert old_revision["committed"] is False and "entry e_1 changed" in old_revision["conflict"]
    # a batch with one bad entry: invalid_request, none of it written
    bad = call_error(f, atomic.COMMIT, {"session_id": "s_1", "entries": [message_entry("e_2", "e_1"), {"kind": "x"}],
                                        "leaf": "e_2", "append": True})
    assert bad.message.startswith("session/invalid_request: entries.1")
    assert log.read_bytes() == before
    fresh = FsStore(topo.tmp / "main", read_only=True)
    assert fresh.get_meta("s_1") == meta_of("s_1", message_count=1, updated_at=START_MS + 5)
    assert [e["id"] for e in fresh.entries("s_1")] == ["e_1"] and fresh.get_leaf("s_1") == "e_1"
    # one call deletes everything; a second finds nothing
    assert f.invoke(atomic.DELETE_SESSION, {"session_id": "s_1"}) == {"deleted": True}
    assert f.invoke(atomic.DELETE_SESSION, {"session_id": "s_1"}) == {"deleted": False}
    assert not log.exists()
    # an append to a session that is gone is a conflict (the bridge re-reads: not found), never a headless log
    gone = f.invoke(atomic.COMMIT, {"session_id": "s_1", "entries": [first], "leaf": "e_1", "append": True})
    assert gone["committed"] is False and not log.exists()


def test_commit_append_is_atomic_and_idempotent(topo: Topology) -> None:
    # Prevents: a bridged append that double-counts on replay, loses the leaf, or misplaces its parent.
    f = topo.main_fake
    f.invoke(sp.PUT_META, {"meta": meta_of("s_1")})
    first = {**message_entry("e_1", None), "timestamp": START_MS + 10}
    answer = f.invoke(sp.COMMIT_APPEND, {"session_id": "s_1", "entry": first, "parent_explicit": False})
    assert answer == {"committed": True, "entry": first,
                      "meta": meta_of("s_1", message_count=1, updated_at=START_MS + 10)}
    # not explicit: the parent is the leaf, whatever the bridge thought
    second = {**custom_entry("c_1", "stale"), "timestamp": START_MS + 20}
    answer = f.invoke(sp.COMMIT_APPEND, {"session_id": "s_1", "entry": second, "parent_explicit": False})
    assert answer["entry"]["parent_id"] == "e_1" and answer["committed"] is True
    assert answer["meta"]["message_count"] == 1  # custom entries are not messages
    assert answer["meta"]["updated_at"] == START_MS + 20
    # explicit: kept as sent (a branch from the root)
    branch = {**message_entry("e_2", None), "timestamp": START_MS + 30}
    answer = f.invoke(sp.COMMIT_APPEND, {"session_id": "s_1", "entry": branch, "parent_explicit": True})
    assert answer["entry"]["parent_id"] is None and answer["meta"]["message_count"] == 2
    # replay of an existing id: the original back, nothing written
    before = (topo.tmp / "main" / "s_1.jsonl").read_bytes()
    replay = {**message_entry("e_1", "c_1", "other"), "timestamp": START_MS + 40}
    answer = f.invoke(sp.COMMIT_APPEND, {"session_id": "s_1", "entry": replay, "parent_explicit": False})
    assert answer == {"committed": False, "entry": first,
                      "meta": meta_of("s_1", message_count=2, updated_at=START_MS + 30)}
    assert (topo.tmp / "main" / "s_1.jsonl").read_bytes() == before
    fresh = FsStore(topo.tmp / "main", read_only=True)
    assert fresh.get_leaf("s_1") == "e_2"
    assert (fresh.get_meta("s_1") or {}).get("message_count") == 2
    # unknown session, unknown explicit parent
    assert call_error(f, sp.COMMIT_APPEND, {"session_id": "nope", "entry": first, "parent_explicit": False}
                      ).message.startswith("session/not_found")
    orphan = message_entry("e_9", "missing")
    assert call_error(f, sp.COMMIT_APPEND, {"session_id": "s_1", "entry": orphan, "parent_explicit": True}
                      ).message.startswith("session/parent_not_found")
    assert f.invoke(sp.GET_ENTRY, {"session_id": "s_1", "entry_id": "e_9"}) is None


def test_bridge_mode_refuses_the_protocol(topo: Topology) -> None:
    # Prevents: a bridged instance serving raw storage (it would forward to itself or a stale store).
    _host, local = topo.bridged()
    payloads: dict[str, Any] = {fid: {"session_id": "s_1"} for fid in [f.id for f in ss.STORE_FUNCTIONS]}
    payloads[sp.LIST_METAS] = {}
    payloads[sp.PUBLISH_EVENTS] = {"events": []}
    for fid, payload in payloads.items():
        error = call_error(local, fid, payload)
        assert error.message.startswith(f"session/storage: {fid}: {sp.FS_ONLY}"), error.message
    assert topo.connections[0].triggers[0]["function_id"] == sp.LIST_METAS  # only the boot probe reached the main
    assert len(topo.connections[0].triggers) == 1


# -- events ---------------------------------------------------------------------------------------


def test_on_events_is_called_once_per_event_only_while_observed(topo: Topology) -> None:
    # Prevents: the bridge feed firing with nobody attached, or missing/duplicating events.
    f = topo.main_fake
    f.invoke("session::create", {"title": "a", "metadata": {"owner": "u_1"}})
    topo.main.flush()
    assert f.event_calls() == []
    feed = f.add_observer(sp.ON_EVENTS)
    f.invoke("session::append", {"session_id": "s_001", "message": user("hi")})
    topo.main.flush()
    assert [t["function_id"] for t in f.triggers if t["function_id"].startswith("session::store::")] == [
        sp.ON_EVENTS]
    stream = feed.delivered[0]["stream"]  # numbered, so receivers across the engine keep the order
    assert isinstance(stream, str) and stream
    assert feed.delivered == [{
        "function_id": ev.ON_MESSAGE_ADDED,
        "payload": {"session_id": "s_001", "entry_id": "e_001", "parent_id": None, "message": user("hi"),
                    "timestamp": START_MS},
        "session_metadata": {"owner": "u_1"}, "stream": stream, "seq": 1}]
    assert f.event_calls() == []  # the event function itself is still unobserved


def test_publish_events_fans_out_on_the_main(topo: Topology) -> None:
    # Prevents: a bridged mutation's events missing the main's observers or the bridges' feed.
    f = topo.main_fake
    added = f.add_observer(ev.ON_MESSAGE_ADDED, {"input.session_metadata.owner": {"$eq": "u_1"}})
    feed = f.add_observer(sp.ON_EVENTS)
    payload = {"session_id": "s_1", "entry_id": "e_1", "parent_id": None, "message": user("x"), "timestamp": 7}
    answer = f.invoke(sp.PUBLISH_EVENTS, {"events": [
        {"function_id": ev.ON_MESSAGE_ADDED, "payload": payload, "session_metadata": {"owner": "u_1"}},
        {"trigger_type": "session::deleted", "payload": {"session_id": "s_2", "timestamp": 8}},
        {"function_id": "session::on-nothing", "payload": {}},
        {"function_id": ev.ON_DELETED, "payload": {"timestamp": 8}},
    ]})
    assert answer == {"published": 2}
    topo.main.flush()
    assert added.delivered == [{**payload, "session_metadata": {"owner": "u_1"}}]
    stream = feed.delivered[0]["stream"]
    assert feed.delivered == [
        {"function_id": ev.ON_MESSAGE_ADDED, "payload": payload, "session_metadata": {"owner": "u_1"},
         "stream": stream, "seq": 1},
        {"function_id": ev.ON_DELETED, "payload": {"session_id": "s_2", "timestamp": 8}, "stream": stream, "seq": 2}]


def observe_all(fake: FakeEngine) -> dict[str, Any]:
    return {
        "added": fake.add_observer(ev.ON_MESSAGE_ADDED),
        "created": fake.add_observer(ev.ON_CREATED),
        "u1": fake.add_observer(ev.ON_MESSAGE_ADDED, {"input.session_metadata.owner": {"$eq": "u_1"}}),
        "u2": fake.add_observer(ev.ON_MESSAGE_ADDED, {"input.session_metadata.owner": {"$eq": "u_2"}}),
        "users": fake.add_observer(ev.ON_MESSAGE_ADDED, {"input.message.role": {"$eq": "user"}}),
    }


def test_a_bridged_mutation_reaches_every_instance_exactly_once(topo: Topology) -> None:
    # Prevents: the originator's observers missing (or doubling) its own events, other bridges or the
    # main missing them, or session_metadata filters not applying after the round trip.
    _b1, l1 = topo.bridged()
    _b2, l2 = topo.bridged()
    seen = {"main": observe_all(topo.main_fake), "b1": observe_all(l1), "b2": observe_all(l2)}
    sid = l1.invoke("session::create", {"title": "t", "metadata": {"owner": "u_1"}})["session_id"]
    l1.invoke("session::append", {"session_id": sid, "message": user("hello"), "entry_id": "u-1"})
    l1.invoke("session::append", {"session_id": sid, "message": assistant("hi")})
    topo.settle()  # (a local call at mutation time would show up twice at b1)
    for name, obs in seen.items():
        assert [e["session_id"] for e in obs["created"].delivered] == [sid], name
        assert [e["entry_id"] for e in obs["added"].delivered] == ["u-1", "e_001"], name
        assert [e["entry_id"] for e in obs["u1"].delivered] == ["u-1", "e_001"], name
        assert obs["u2"].delivered == [], name
        assert [e["entry_id"] for e in obs["users"].delivered] == ["u-1"], name
        assert obs["added"].delivered[0] == {"session_id": sid, "entry_id": "u-1", "parent_id": None,
                                             "message": user("hello"), "timestamp": START_MS,
                                             "session_metadata": {"owner": "u_1"}}
    # the write is the main's: in its JSONL, and visible to the other bridge and the main
    assert any(r.get("entry", {}).get("id") == "u-1" for r in records(topo.tmp / "main", sid))
    assert l2.invoke("session::get", {"session_id": sid})["meta"]["message_count"] == 2
    assert topo.main_fake.invoke("session::messages", {"session_id": sid})["messages"][0]["entry_id"] == "u-1"


def test_a_main_mutation_reaches_the_bridges(topo: Topology) -> None:
    # Prevents: bridges seeing only bridged mutations.
    _b1, l1 = topo.bridged()
    added = l1.add_observer(ev.ON_STATUS_CHANGED)
    main_obs = topo.main_fake.add_observer(ev.ON_STATUS_CHANGED)
    sid = topo.main_fake.invoke("session::create", {})["session_id"]
    topo.main_fake.invoke("session::set-status", {"session_id": sid, "status": "working"})
    topo.settle()
    assert [e["status"] for e in added.delivered] == ["working"]
    assert [e["status"] for e in main_obs.delivered] == ["working"]


def test_publish_failure_is_logged_and_the_mutation_stands(topo: Topology,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: an unreachable main at publish time failing or undoing an acknowledged mutation.
    _b1, l1 = topo.bridged()
    obs = l1.add_observer(ev.ON_CREATED)
    conn = topo.connections[0]
    original = conn.trigger

    def no_publish(request: dict[str, Any]) -> Any:
        if request["function_id"] == sp.PUBLISH_EVENTS:
            raise InvocationError("TIMEOUT", "invocation timed out after 700ms")
        return original(request)

    conn.trigger = no_publish  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="session_manager.bridge"):
        sid = l1.invoke("session::create", {"title": "kept"})["session_id"]
        topo.settle()
    assert "1 events not published to the main" in caplog.text
    assert obs.delivered == []  # no local call at mutation time: events only come back through the main
    assert l1.invoke("session::get", {"session_id": sid})["meta"]["title"] == "kept"
    # one publish call per mutation, with every event of it
    conn.trigger = original  # type: ignore[method-assign]
    l1.invoke("session::append-many", {"session_id": sid, "messages": [user("a"), user("b")]})
    topo.settle()
    publishes = [t for t in conn.triggers if t["function_id"] == sp.PUBLISH_EVENTS]
    assert len(publishes) == 1 and len(publishes[0]["payload"]["events"]) == 2
    assert publishes[0]["payload"]["events"][0]["trigger_type"] == "session::message-added"


# -- modes, boot and reloads ----------------------------------------------------------------------


def test_bridge_boot_attaches_a_relay_on_the_main(topo: Topology) -> None:
    # Prevents: a bridged instance that never hears the main's fan-out.
    b1, _ = topo.bridged()
    relay = b1.runtime.bridge.relay_id if b1.runtime.bridge else ""
    assert relay.startswith(RELAY_PREFIX) and relay in topo.main_fake.functions
    assert topo.main_fake.functions[relay].metadata == {"internal": True, "trace_hidden": True}
    assert (({"function_id": sp.ON_EVENTS, "deliver": "input"}, relay)) in topo.main_fake.observes
    assert topo.main.emitter.is_observed(sp.ON_EVENTS)


def test_main_without_the_protocol_is_fatal(tmp_path: Path) -> None:
    # Prevents: a bridge to an engine without a session-manager main booting and failing every call.
    empty = FakeEngine()
    from session_manager._worker.config_client import BuildError

    with pytest.raises(BuildError, match="does not serve the store protocol"):
        IIIHost(FakeEngine(), parse_config(bridge_value()), bridge_connector=lambda c: empty.connection())


def test_reload_fs_to_bridge_and_back(topo: Topology) -> None:
    # Prevents: an fs<->bridge reload that keeps the old store, skips the resync, or leaks the old link.
    sid = topo.main_fake.invoke("session::create", {"title": "on main"})["session_id"]
    local = FakeEngine()
    host = IIIHost(local, parse_config(fs_value(topo.tmp / "own")), ids=topo.ids, clock=topo.clock,
                   local_url="ws://own:1", bridge_connector=topo.connect, reloader_retry=NO_WAIT)
    host.register()
    topo.hosts.append(host)
    local.config_store["session-manager"] = {"value": fs_value(topo.tmp / "own")}
    host.observe_configuration()
    local.invoke("session::create", {"title": "own"})
    created = local.add_observer(ev.ON_CREATED)
    deleted = local.add_observer(ev.ON_DELETED)
    main_created = topo.main_fake.add_observer(ev.ON_CREATED)

    local.set_config(bridge_value())
    topo.settle()
    assert host.runtime.bridge is not None
    assert local.invoke("session::config-status", {})["last_outcome"] == "applied"
    assert local.invoke("session::get", {"session_id": sid})["meta"]["title"] == "on main"
    assert [e["session_id"] for e in created.delivered] == [sid]  # resync: local only
    assert [e["session_id"] for e in deleted.delivered] == ["s_002"]
    assert main_created.delivered == []
    assert call_error(local, sp.LIST_METAS, {}).message.startswith("session/storage")
    conn = topo.connections[-1]

    local.set_config(fs_value(topo.tmp / "own"))
    topo.settle()
    assert host.runtime.bridge is None
    assert conn.closed and not any(f.startswith(RELAY_PREFIX) for f in topo.main_fake.functions)
    assert local.invoke(sp.LIST_METAS, {})["metas"][0]["title"] == "own"
    assert [e["session_id"] for e in created.delivered] == [sid, "s_002"]


def test_unreachable_bridge_reload_keeps_last_good(topo: Topology) -> None:
    # Prevents: a reload to a dead main taking down a working bridged instance.
    host, local = topo.bridged()
    before = host.runtime
    local.set_config(bridge_value("ws://elsewhere:1"))
    status = local.invoke("session::config-status", {})
    assert status["last_outcome"] == "rejected" and "ws://elsewhere:1" in status["last_error"]
    assert host.runtime is before
    local.config_store["session-manager"]["value"] = bridge_value("ws://local-1:49134")
    local.invoke(ON_CONFIG_CHANGE, {})
    assert "self-referential" in local.invoke("session::config-status", {})["last_error"]
    assert local.invoke("session::create", {})["session_id"]
    # a new timeout is a new link: the old one is closed after the swap
    local.set_config(bridge_value(timeout_ms=900))
    assert topo.connections[0].closed and not topo.connections[-1].closed
    assert host.runtime.bridge is not None and host.runtime.bridge.timeout_ms == 900


def test_close_shuts_the_bridge_connection(topo: Topology) -> None:
    # Prevents: a stopped bridged instance leaving its relay registered on the main.
    host, _ = topo.bridged()
    host.close()
    topo.hosts.remove(host)
    assert topo.connections[0].closed
    assert not any(f.startswith(RELAY_PREFIX) for f in topo.main_fake.functions)
    assert not topo.main.emitter.is_observed(sp.ON_EVENTS)


def test_attachments_through_the_bridge(topo: Topology) -> None:
    # Prevents: attachment bytes or hashes changing on the way through the bridge.
    _, local = topo.bridged()
    sid = local.invoke("session::create", {})["session_id"]
    data = base64.b64encode(b"\x00\x01bytes").decode()
    put = local.invoke("session::put-attachment", {"session_id": sid, "name": "b.bin", "mime": "", "data": data})
    got = local.invoke("session::get-attachment", {"session_id": sid,
                                                   "attachment_id": put["attachment"]["attachment_id"]})
    assert got["data"] == data and got["attachment"] == put["attachment"]
    main = FsStore(topo.tmp / "main", read_only=True)
    assert main.read_attachment(sid, put["attachment"]["attachment_id"]) == b"\x00\x01bytes"


# -- the reference wire contract (golden-schemas/session.store.*.json) -----------------------------


@pytest.mark.reference
@pytest.mark.parametrize("reference_main", [False, True])
def test_protocol_traffic_matches_the_golden_schemas(topo: Topology, reference_main: bool) -> None:
    # Prevents: a bridge or a main of ours that a reference main or bridge cannot talk to, or
    # traffic of our own calls that does not match the schemas the main registers for them.
    from jsonschema import Draft7Validator, Draft202012Validator

    from tests.material import golden_schemas

    GOLDEN = golden_schemas()

    if reference_main:
        rust_like(topo.main_fake)
    _, local = topo.bridged()
    conn = topo.connections[0]
    traffic: list[tuple[str, Any, Any]] = []
    send = conn.trigger

    def recording(request: dict[str, Any]) -> Any:
        answer = send(request)
        traffic.append((request["function_id"], request["payload"], answer))
        return answer

    conn.trigger = recording  # type: ignore[method-assign]
    sid = local.invoke("session::create", {"title": "t", "metadata": {"k": "v"}})["session_id"]
    local.invoke("session::append", {"session_id": sid, "message": user("a"), "origin": {"turn": 1}})
    local.invoke("session::append", {"session_id": sid, "custom": {"custom_type": "note", "data": [1]}})
    local.invoke("session::update-message", {"session_id": sid, "entry_id": "e_001",
                                             "content": [{"type": "text", "text": "b"}]})
    local.invoke("session::fork", {"session_id": sid, "entry_id": "e_001"})
    local.invoke("session::set-active-leaf", {"session_id": sid, "entry_id": "e_001"})
    put = local.invoke("session::put-attachment", {"session_id": sid, "name": "x", "mime": "", "data": "aGk="})
    aid = put["attachment"]["attachment_id"]
    local.invoke("session::set-draft", {"session_id": sid, "draft": "d", "attachment_ids": [aid]})
    local.invoke("session::get-attachment", {"session_id": sid, "attachment_id": aid})
    local.invoke("session::get-attachment", {"session_id": sid, "attachment_id": "a_none"})
    local.invoke("session::get-message", {"session_id": sid, "entry_id": "nope"})
    local.invoke("session::get", {"session_id": "nope"})
    local.invoke("session::list", {})
    if reference_main:  # no session::store::search on a Rust main: session/storage naming it
        with pytest.raises(InvocationError, match="session::store::search"):
            local.invoke("session::search", {"query": "b"})
    else:
        local.invoke("session::search", {"query": "b"})
    local.invoke("session::delete-attachment", {"session_id": sid, "attachment_id": aid})
    local.invoke("session::delete", {"session_id": sid})
    topo.settle()
    seen = {fid for fid, _, _ in traffic}
    ours = {atomic.COMMIT, atomic.DELETE_SESSION, atomic.READ_PATH, searching.SEARCH}
    if reference_main:
        assert seen == {f.id for f in ss.STORE_FUNCTIONS} - ours | {sp.PUBLISH_EVENTS}
    else:
        legacy_writes = {sp.PUT_META, sp.PUT_ENTRY, sp.SET_ACTIVE_LEAF, sp.COMMIT_APPEND, sp.DELETE_META,
                         sp.DELETE_ENTRIES, sp.DELETE_ACTIVE_LEAF, sp.DELETE_ATTACHMENTS}
        assert seen == {f.id for f in ss.STORE_FUNCTIONS} - legacy_writes | {sp.PUBLISH_EVENTS}
    for fid, payload, answer in traffic:
        if fid in ours:
            reg = topo.main_fake.functions[fid]
            checks = ((Draft202012Validator, "request", reg.request_format, payload),
                      (Draft202012Validator, "response", reg.response_format, answer))
        else:
            golden = GOLDEN[fid]
            checks = ((Draft7Validator, "request", golden["request_schema"], payload),
                      (Draft7Validator, "response", golden["response_schema"], answer))
        for validator, what, schema, value in checks:
            errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                      for e in validator(schema).iter_errors(value)]
            assert errors == [], f"{fid} {what}: {value!r:.300}"


def test_real_connector_refuses_an_unreachable_main() -> None:
    # Prevents: a boot that waits forever (or falls back to fs) when the bridge url answers
    # nothing: the connector gives up after the configured call timeout (no clock asserted here).
    import socket

    from session_manager._worker.config_client import BuildError

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BuildError, match=rf"bridge to ws://127.0.0.1:{port} unavailable: .*unreachable"):
        IIIHost(FakeEngine(), parse_config(bridge_value(f"ws://127.0.0.1:{port}", timeout_ms=300)),
                local_url=MAIN_URL)


def test_a_reload_waits_for_calls_on_the_old_link_before_closing_it(topo: Topology) -> None:
    # Prevents: an adapter reload closing the old bridge link under calls still using it (they
    # hung, or failed although the main had stored their append, and lost their events).
    import threading

    host, local = topo.bridged()
    sid = local.invoke("session::create", {})["session_id"]
    old_conn = topo.connections[0]
    store = host.runtime.store
    assert isinstance(store, BridgeStore)
    in_call, proceed = threading.Event(), threading.Event()
    real_call = store._new_call

    def held(function_id: str, payload: dict[str, Any]) -> Any:
        if function_id == atomic.COMMIT:
            in_call.set()
            assert proceed.wait(10)
        return real_call(function_id, payload)

    store._new_call = held  # type: ignore[method-assign]
    outcome: dict[str, Any] = {}
    caller = threading.Thread(target=lambda: outcome.update(r=local.invoke(
        "session::append", {"session_id": sid, "message": user("mid-reload")})))
    caller.start()
    assert in_call.wait(10)
    reloader = threading.Thread(target=lambda: local.set_config(bridge_value(timeout_ms=900)))
    reloader.start()
    reloader.join(0.3)
    assert not old_conn.closed  # still in use by the held append
    proceed.set()
    caller.join(10)
    reloader.join(10)
    assert old_conn.closed and host.runtime.bridge is not None and host.runtime.bridge.timeout_ms == 900
    assert outcome["r"]["entry_id"]
    topo.settle()
    assert [m["entry_id"] for m in local.invoke("session::messages", {"session_id": sid})["messages"]] == [
        outcome["r"]["entry_id"]]


def test_no_reload_applies_after_close(topo: Topology) -> None:
    # Prevents: a reload finishing after shutdown and leaving a fresh bridge link (and its
    # non-daemon client thread) alive, so the process never exits.
    host, local = topo.bridged()
    before = len(topo.connections)
    host.close()
    topo.hosts.remove(host)
    local.config_store["session-manager"]["value"] = bridge_value(timeout_ms=901)
    assert local.invoke(ON_CONFIG_CHANGE, {}) == {"ok": True}
    assert len(topo.connections) == before and all(c.closed for c in topo.connections)


def test_close_hands_on_the_events_of_answered_calls(tmp_path: Path) -> None:
    # Prevents: shutdown stopping the event worker between a call's answer and its events.
    import threading

    fake = FakeEngine()
    host = IIIHost(fake, parse_config(fs_value(tmp_path / "d")), ids=SequentialIds(), clock=ManualClock(START_MS))
    host.register()
    observer = fake.add_observer(ev.ON_CREATED)
    in_deliver, proceed = threading.Event(), threading.Event()
    real = host.deliver

    def slow(runtime: Any, events: Any) -> None:
        in_deliver.set()
        assert proceed.wait(10)
        real(runtime, events)

    host.deliver = slow  # type: ignore[method-assign]
    answered: dict[str, Any] = {}
    caller = threading.Thread(target=lambda: answered.update(r=fake.invoke("session::create", {})))
    caller.start()
    assert in_deliver.wait(10)
    closer = threading.Thread(target=host.close)
    closer.start()
    proceed.set()
    caller.join(10)
    closer.join(10)
    assert answered["r"]["session_id"] == "s_001"
    assert [e["session_id"] for e in observer.delivered] == ["s_001"]
