"""A bridged mutation whose answer is lost after the main applied it (the call
timed out on the way back): the caller's retry must see neither a duplicate
nor a lost write, and the mutation's events must fire exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from iii import InvocationError

from session_manager._wire import events as ev
from session_manager.store import FsStore
from session_manager.store.bridge import protocol_cas as atomic
from session_manager.testing import FakeConnection
from tests.unit.test_bridge import Topology, records, user


@pytest.fixture
def topo(tmp_path: Path) -> Iterator[Topology]:
    t = Topology(tmp_path)
    yield t
    t.close()


def lose_answers(conn: FakeConnection, function_id: str, times: int = 1) -> list[int]:
    """The next ``times`` calls of ``function_id`` reach the main and are applied
    there, but their answer never comes back (a timeout on the return leg)."""
    original = conn.trigger
    lost = [0]

    def trigger(request: dict[str, Any]) -> Any:
        answer = original(request)
        if request["function_id"] == function_id and lost[0] < times:
            lost[0] += 1
            raise InvocationError("timeout", "invocation timed out after 700ms")
        return answer

    conn.trigger = trigger  # type: ignore[method-assign]
    return lost


def _first_attempt(fake: Any, function: str, payload: dict[str, Any]) -> Any:
    """The call whose answer is lost: its result, or the honest "in doubt" error it may
    answer instead (the retry that follows must settle it)."""
    try:
        return fake.invoke(function, payload)
    except InvocationError as e:
        return e


def test_an_append_applied_on_the_main_whose_answer_was_lost_fires_its_event_once(topo: Topology) -> None:
    # Prevents: a bridged append that the main stored but whose answer timed out answering
    # session/storage and never publishing its event; the caller's retry (same entry_id) was then
    # an idempotent replay that fires nothing, so no observer anywhere ever heard of the message.
    _b1, l1 = topo.bridged()
    sid = l1.invoke("session::create", {"metadata": {"owner": "u_1"}})["session_id"]
    topo.settle()
    main_added = topo.main_fake.add_observer(ev.ON_MESSAGE_ADDED)
    local_added = l1.add_observer(ev.ON_MESSAGE_ADDED)
    lost = lose_answers(topo.connections[0], atomic.COMMIT)
    request = {"session_id": sid, "message": user("once"), "entry_id": "u-1"}
    first = _first_attempt(l1, "session::append", request)
    retry = l1.invoke("session::append", request)
    topo.settle()
    assert lost == [1]
    assert retry == {"entry_id": "u-1", "parent_id": None, "timestamp": 1_000_000}
    if not isinstance(first, InvocationError):
        assert first == retry
    # exactly one write: on the main's disk and through every instance's reads
    assert [r["entry"]["id"] for r in records(topo.tmp / "main", sid) if "entry" in r] == ["u-1"]
    for fake in (l1, topo.main_fake):
        assert [m["entry_id"] for m in fake.invoke("session::messages", {"session_id": sid})["messages"]] == ["u-1"]
        assert fake.invoke("session::get", {"session_id": sid})["meta"]["message_count"] == 1
    # exactly one event, at the main and at the originating bridge, with its tenancy
    for obs in (main_added, local_added):
        assert [(e["entry_id"], e["session_metadata"]) for e in obs.delivered] == [("u-1", {"owner": "u_1"})]


def test_a_delete_applied_on_the_main_whose_answer_was_lost_fires_on_deleted_once(topo: Topology) -> None:
    # Prevents: a bridged delete that the main carried out but whose answer timed out answering
    # session/storage; the retry then found nothing (deleted: false) and on-deleted never fired.
    _b1, l1 = topo.bridged()
    sid = l1.invoke("session::create", {"metadata": {"owner": "u_1"}})["session_id"]
    topo.settle()
    main_deleted = topo.main_fake.add_observer(ev.ON_DELETED)
    local_deleted = l1.add_observer(ev.ON_DELETED)
    lost = lose_answers(topo.connections[0], atomic.DELETE_SESSION)
    first = _first_attempt(l1, "session::delete", {"session_id": sid})
    retry = l1.invoke("session::delete", {"session_id": sid})
    topo.settle()
    assert lost == [1]
    # one of the two answers says it deleted the session, never both
    answers = [a["deleted"] for a in (first, retry) if not isinstance(a, InvocationError)]
    assert answers.count(True) == 1 and answers[-1] is False
    assert not (topo.tmp / "main" / f"{sid}.jsonl").exists()
    assert l1.invoke("session::get", {"session_id": sid}) is None
    for obs in (main_deleted, local_deleted):
        assert [(e["session_id"], e["session_metadata"]) for e in obs.delivered] == [(sid, {"owner": "u_1"})]


def test_an_update_and_a_set_meta_whose_answers_were_lost_answer_as_applied(topo: Topology) -> None:
    # Prevents: a revision bump or a meta write that the main stored answering session/storage with
    # no event; a retry of update-message with expected_revision then answered updated: false.
    _b1, l1 = topo.bridged()
    sid = l1.invoke("session::create", {})["session_id"]
    l1.invoke("session::append", {"session_id": sid, "message": user("v0"), "entry_id": "u-1"})
    topo.settle()
    updated = l1.add_observer(ev.ON_MESSAGE_UPDATED)
    meta_updated = topo.main_fake.add_observer(ev.ON_META_UPDATED)
    lost = lose_answers(topo.connections[0], atomic.COMMIT)
    content = [{"type": "text", "text": "v1"}]
    answer = l1.invoke("session::update-message", {"session_id": sid, "entry_id": "u-1", "content": content,
                                                   "expected_revision": 0})
    assert answer == {"updated": True, "revision": 1}
    lost_meta = lose_answers(topo.connections[0], atomic.COMMIT)
    assert l1.invoke("session::set-meta", {"session_id": sid, "title": "kept"})["meta"]["title"] == "kept"
    topo.settle()
    assert lost == [1] and lost_meta == [1]
    message = topo.main_fake.invoke("session::get-message", {"session_id": sid, "entry_id": "u-1"})["entry"]
    assert message["revision"] == 1 and message["message"]["content"] == content
    assert topo.main_fake.invoke("session::get", {"session_id": sid})["meta"]["title"] == "kept"
    assert [(e["entry_id"], e["revision"]) for e in updated.delivered] == [("u-1", 1)]
    assert [e["title"] for e in meta_updated.delivered] == ["kept"]


def test_a_commit_lost_on_the_way_applies_once_and_a_dead_main_still_answers_storage(topo: Topology) -> None:
    # Prevents: the settling replay of a commit the main never received writing nothing (or twice),
    # and a main that stays unreachable being reported as anything but session/storage.
    _b1, l1 = topo.bridged()
    sid = l1.invoke("session::create", {})["session_id"]
    conn = topo.connections[0]
    original = conn.trigger
    dropped = [0]

    def drop_first_commit(request: dict[str, Any]) -> Any:
        if request["function_id"] == atomic.COMMIT and not dropped[0]:
            dropped[0] += 1
            raise InvocationError("timeout", "invocation timed out after 700ms")
        return original(request)

    conn.trigger = drop_first_commit  # type: ignore[method-assign]
    added = l1.add_observer(ev.ON_MESSAGE_ADDED)
    assert l1.invoke("session::append", {"session_id": sid, "message": user("a")})["entry_id"] == "e_001"
    conn.trigger = original  # type: ignore[method-assign]
    conn.failure = InvocationError("timeout", "invocation timed out after 700ms")  # every call, both legs
    with pytest.raises(InvocationError) as err:
        l1.invoke("session::append", {"session_id": sid, "message": user("b"), "entry_id": "u-2"})
    assert str(err.value.message).startswith("session/storage")
    conn.failure = None
    topo.settle()
    assert [r["entry"]["id"] for r in records(topo.tmp / "main", sid) if "entry" in r] == ["e_001"]
    assert topo.main_fake.invoke("session::get", {"session_id": sid})["meta"]["message_count"] == 1
    assert [e["entry_id"] for e in added.delivered] == ["e_001"]


def test_a_session_created_while_a_reload_builds_the_new_store_is_announced_deleted(tmp_path: Path) -> None:
    # Prevents: a reload listing the old store's sessions before building the new one, so a session
    # created in the old data_dir meanwhile (its on-created already fired) was never announced as
    # gone when the new data_dir, which lacks it, took over; observers kept a phantom session.
    from session_manager._worker.config_value import parse_config
    from session_manager._worker.iii_host import IIIHost
    from session_manager.clock import ManualClock
    from session_manager.ids import SequentialIds
    from session_manager.testing import FakeEngine
    from tests.unit.test_bridge import NO_WAIT, fs_value

    fake = FakeEngine()
    host = IIIHost(fake, parse_config(fs_value(tmp_path / "a")), ids=SequentialIds(), clock=ManualClock(1_000),
                   reloader_retry=NO_WAIT)
    host.register()
    fake.config_store["session-manager"] = {"value": fs_value(tmp_path / "a")}
    host.observe_configuration()
    created, deleted = fake.add_observer(ev.ON_CREATED), fake.add_observer(ev.ON_DELETED)
    before = fake.invoke("session::create", {"metadata": {"owner": "u_1"}})["session_id"]
    real_build = host._build
    during: list[str] = []

    def build(config: Any) -> Any:
        # A call served by the running (old) store while the new one is being built.
        during.append(fake.invoke("session::create", {"metadata": {"owner": "u_2"}})["session_id"])
        return real_build(config)

    host._build = build  # type: ignore[method-assign]
    try:
        fake.set_config(fs_value(tmp_path / "b"))
        host.flush()
        assert host.runtime.config.adapter_value() == fs_value(tmp_path / "b")["adapter"]
        assert fake.invoke("session::list", {})["sessions"] == []
        assert [e["session_id"] for e in created.delivered] == [before, *during]
        assert sorted((e["session_id"], e["session_metadata"]["owner"]) for e in deleted.delivered) == sorted(
            [(before, "u_1"), (during[0], "u_2")])
        # the old data_dir keeps both (nothing is removed from it), readable by its next owner
        old = FsStore(tmp_path / "a")
        assert sorted(m["session_id"] for m in old.list_metas()) == sorted([before, *during])
        old.close()
    finally:
        host.close()


def test_a_call_outlasting_the_reload_drain_keeps_the_old_data_dir_owned_until_it_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a reload whose drain timed out closing the old fs store under a call still writing
    # to it: the data_dir's lock was released, so the late write landed in a directory a second
    # owner (another worker, or this one reloading back) could already hold.
    import threading

    from session_manager._worker import iii_host
    from session_manager._worker.config_value import parse_config
    from session_manager._worker.iii_host import IIIHost
    from session_manager.clock import ManualClock
    from session_manager.ids import SequentialIds
    from session_manager.store.fs import DataDirLocked
    from session_manager.testing import FakeEngine
    from tests.unit.test_bridge import NO_WAIT, fs_value

    monkeypatch.setattr(iii_host, "DRAIN_TIMEOUT_S", 0.2)
    fake = FakeEngine()
    host = IIIHost(fake, parse_config(fs_value(tmp_path / "a")), ids=SequentialIds(), clock=ManualClock(1_000),
                   reloader_retry=NO_WAIT)
    host.register()
    fake.config_store["session-manager"] = {"value": fs_value(tmp_path / "a")}
    host.observe_configuration()
    sid = fake.invoke("session::create", {})["session_id"]
    added = fake.add_observer(ev.ON_MESSAGE_ADDED)
    old = host.runtime.store
    in_commit, proceed = threading.Event(), threading.Event()
    real_commit = old.commit

    def slow_commit(session_id: str, commit: Any) -> Any:
        in_commit.set()
        assert proceed.wait(10)
        return real_commit(session_id, commit)

    old.commit = slow_commit  # type: ignore[method-assign]
    outcome: dict[str, Any] = {}

    def append() -> None:
        try:
            outcome["r"] = fake.invoke("session::append", {"session_id": sid, "message": user("late")})
        except Exception as e:  # reported by the asserts below
            outcome["e"] = e

    caller = threading.Thread(target=append)
    caller.start()
    try:
        assert in_commit.wait(10)
        fake.set_config(fs_value(tmp_path / "b"))  # acknowledged after the (short) drain gave up
        assert host.runtime.config.adapter_value() == fs_value(tmp_path / "b")["adapter"]
        # the late call still owns the old data_dir: no second owner can take it meanwhile
        with pytest.raises(DataDirLocked):
            FsStore(tmp_path / "a")
    finally:
        proceed.set()
        caller.join(10)
    try:
        assert "e" not in outcome and outcome["r"]["entry_id"] == "e_001"
        host.flush()
        assert [e["entry_id"] for e in added.delivered] == ["e_001"]
        # once it ended the old data_dir was released, with the late write in it
        reopened = FsStore(tmp_path / "a")
        assert [e["id"] for e in reopened.entries(sid)] == ["e_001"]
        assert reopened.get_meta(sid)["message_count"] == 1  # type: ignore[index]
        reopened.close()
    finally:
        host.close()
