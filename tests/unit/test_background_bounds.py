"""Bounded background work: the event queue's full-queue policy, the publish
queue's backpressure, flush timeouts, per-session resync and the counters."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from iii import InvocationError

from session_manager._service.stats import Stats
from session_manager._wire import events as ev
from session_manager._wire.events import Event
from session_manager._worker import bridge_link
from session_manager._worker.background import SerialWorker
from session_manager._worker.event_queue import EventQueue
from session_manager._worker.runtime import resync_batches
from session_manager.store import MemoryStore
from session_manager.store.base import Commit
from session_manager.store.bridge import BridgeStore
from tests.unit.test_bridge import Topology, user
from tests.unit.test_store_conformance import message, meta


class Gate:
    """A delivery that blocks until opened, recording what it delivered."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        self.delivered: list[tuple[str, Any]] = []

    def __call__(self, event: Event, fanout: bool) -> None:
        self.entered.set()
        assert self.open.wait(10)
        p = event.payload
        what = p.get("revision", p.get("entry_id", p.get("status", p.get("session_id"))))
        self.delivered.append((event.function_id, what))


def added(entry_id: str) -> Event:
    return ev.message_added("s", message(entry_id, None), None)


def updated(entry_id: str, revision: int) -> Event:
    return ev.message_updated("s", message(entry_id, None, revision=revision), None, 1, None)


def status(value: str) -> Event:
    return ev.status_changed({**meta("s"), "status": value}, "idle", 1)


@pytest.fixture
def gated() -> Iterator[tuple[EventQueue, Gate, Stats]]:
    gate, stats = Gate(), Stats()
    queue = EventQueue(gate, stats, bound=4)
    queue.put(added("blocker"), False)
    assert gate.entered.wait(10)  # the delivery thread now holds "blocker"; 4 slots stay
    yield queue, gate, stats
    gate.open.set()
    queue.close()


def test_a_full_queue_coalesces_updates_per_entry_keeping_the_highest_revision(
        gated: tuple[EventQueue, Gate, Stats]) -> None:
    # Prevents: a streamed reply filling the queue with stale revisions, or a lower revision winning.
    queue, gate, stats = gated
    for e in (added("e1"), updated("e1", 1), updated("e2", 1), added("e3")):
        queue.put(e, False)
    queue.put(updated("e1", 2), False)  # full: replaces revision 1 in place
    queue.put(updated("e1", 1), False)  # an older revision never wins
    queue.put(updated("e2", 5), False)
    gate.open.set()
    assert queue.flush(10)
    assert gate.delivered == [(ev.ON_MESSAGE_ADDED, "blocker"), (ev.ON_MESSAGE_ADDED, "e1"),
                              (ev.ON_MESSAGE_UPDATED, 2), (ev.ON_MESSAGE_UPDATED, 5), (ev.ON_MESSAGE_ADDED, "e3")]
    assert stats.snapshot()["events_coalesced"] == 3 and stats.snapshot()["events_dropped"] == 0


def test_a_full_queue_drops_only_droppable_events_and_never_added_created_deleted(
        gated: tuple[EventQueue, Gate, Stats]) -> None:
    # Prevents: a slow observer growing memory without bound, or a lost on-message-added / on-deleted.
    queue, gate, stats = gated
    for e in (status("working"), status("done"), added("e1"), added("e2")):
        queue.put(e, False)
    queue.put(status("error"), False)  # full and droppable: dropped
    queue.put(added("e3"), False)  # never dropped: the oldest droppable one makes room
    queue.put(added("e4"), False)
    deleted = ev.deleted("s", 1, None)
    queue.put(deleted, False)  # nothing droppable left: past the bound, still kept
    assert len(queue) == 5
    gate.open.set()
    assert queue.flush(10)
    assert gate.delivered == [(ev.ON_MESSAGE_ADDED, "blocker"), (ev.ON_MESSAGE_ADDED, "e1"),
                              (ev.ON_MESSAGE_ADDED, "e2"), (ev.ON_MESSAGE_ADDED, "e3"),
                              (ev.ON_MESSAGE_ADDED, "e4"), (ev.ON_DELETED, "s")]
    assert stats.snapshot()["events_dropped"] == 3


def test_flush_and_a_bounded_submit_give_up_after_their_timeout() -> None:
    # Prevents: shutdown or a publisher hanging for ever behind a stuck remote call.
    worker = SerialWorker("t", bound=1)
    release = threading.Event()
    worker.submit(lambda: release.wait(10) and None)
    assert worker.submit(lambda: None)  # waits in the one slot
    assert worker.submit(lambda: None, timeout_s=0.05) is False  # full: refused after the wait
    assert worker.flush(timeout_s=0.05) is False
    release.set()
    assert worker.flush(timeout_s=10) is True
    worker.close()


def test_a_full_publish_queue_answers_session_storage_and_counts_it(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: an unbounded publish backlog when the main is slow, or a caller told "ok" whose events
    # can no longer be queued.
    monkeypatch.setattr(bridge_link, "PUBLISH_QUEUE_LIMIT", 1)
    topo = Topology(tmp_path)
    try:
        host, local = topo.bridged({"adapter": {"name": "bridge", "config": {"url": "ws://main-engine:49134",
                                                                             "timeout_ms": 100}}})
        assert host.runtime.bridge is not None
        conn = topo.connections[0]
        original, release = conn.trigger, threading.Event()

        def slow(request: dict[str, Any]) -> Any:
            if request["function_id"] == "session::store::publish-events":
                release.wait(10)
            return original(request)

        conn.trigger = slow  # type: ignore[method-assign]
        sid = local.invoke("session::create", {})["session_id"]  # its publish now blocks the worker
        local.invoke("session::append", {"session_id": sid, "message": user("queued")})  # fills the slot
        with pytest.raises(InvocationError) as err:
            local.invoke("session::append", {"session_id": sid, "message": user("refused")})
        assert err.value.message.startswith("session/storage: publishing events to the main")
        release.set()
        topo.settle()
        status_now = local.invoke("session::config-status", {})
        assert status_now["publish_timeouts"] == 1 and status_now["cas_retries"] == 0
        # the refused call's mutation is stored (its events are what was lost)
        texts = [m["message"]["content"][0]["text"]
                 for m in local.invoke("session::messages", {"session_id": sid})["messages"]]
        assert texts == ["queued", "refused"]
    finally:
        topo.close()


def test_cas_retries_are_counted_in_config_status(tmp_path: Path) -> None:
    # Prevents: contention between bridges that no operator can see.
    topo = Topology(tmp_path)
    try:
        host, local = topo.bridged()
        sid = local.invoke("session::create", {})["session_id"]
        store = host.runtime.store
        assert isinstance(store, BridgeStore)
        real = store.get_meta
        stale = {"left": 2}

        def sometimes_stale(session_id: str) -> Any:
            found = real(session_id)
            if stale["left"] and found is not None:
                stale["left"] -= 1
                return {**found, "title": "stale"}
            return found

        store.get_meta = sometimes_stale  # type: ignore[method-assign]
        assert local.invoke("session::set-meta", {"session_id": sid, "title": "t"})["meta"]["title"] == "t"
        assert local.invoke("session::config-status", {})["cas_retries"] == 2
    finally:
        topo.close()


def test_resync_streams_one_session_at_a_time() -> None:
    # Prevents: a resync materializing every event of every session at once.
    store = MemoryStore()
    for sid in ("a", "b"):
        store.commit(sid, Commit(meta=meta(sid)))
        store.commit(sid, Commit(entries=(message(f"{sid}1", None, revision=2),), leaf=f"{sid}1",
                                 meta=meta(sid, message_count=1)))
    batches = resync_batches(store, [meta("gone")], 5)
    assert [(e.function_id, e.payload["session_id"]) for e in next(batches)] == [(ev.ON_DELETED, "gone")]
    first = next(batches)
    assert [e.function_id for e in first] == [ev.ON_CREATED, ev.ON_MESSAGE_ADDED, ev.ON_MESSAGE_UPDATED]
    assert {e.payload["session_id"] for e in first} == {first[0].payload["session_id"]}
    assert len(list(batches)) == 1


def test_compactions_are_counted_in_config_status(tmp_path: Path) -> None:
    # Prevents: logs rewritten as their live state that no operator can see.
    from session_manager._worker.config_value import parse_config
    from session_manager._worker.iii_host import IIIHost
    from session_manager.testing import FakeEngine

    fake = FakeEngine()
    host = IIIHost(fake, parse_config({"adapter": {"name": "fs", "config": {"data_dir": str(tmp_path / "d")}}}))
    host.register()
    try:
        sid = fake.invoke("session::create", {})["session_id"]
        eid = fake.invoke("session::append", {"session_id": sid, "message": user("v0")})["entry_id"]
        assert fake.invoke("session::config-status", {})["compactions"] == 0
        for n in range(400):  # a streamed reply: one snapshot per update
            fake.invoke("session::update-message", {"session_id": sid, "entry_id": eid,
                                                    "content": [{"type": "text", "text": f"v{n + 1}"}]})
        assert fake.invoke("session::config-status", {})["compactions"] >= 1
        assert fake.invoke("session::get-message", {"session_id": sid, "entry_id": eid})["entry"]["revision"] == 400
    finally:
        host.close()
