"""Issue 25 #4: a bridged mutation whose answer is lost, while the main can
still be read, is settled by one mechanism (:mod:`session_manager.store.bridge.settle`):
it answers as applied, fires its events once, and the whole call ends within
2.5x ``timeout_ms`` (a deadline of the contract, not a speed figure).

The main applies every call; the answers of one function never come back: the
engine gives up after the ``timeout_ms`` the bridge sent (so the replay's
answer is lost as well, and only a read-back can settle it)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from iii import InvocationError

from session_manager._wire import events as ev
from session_manager.store import FsStore
from session_manager.store.bridge import protocol as sp
from session_manager.store.bridge import protocol_cas as atomic
from session_manager.testing import FakeConnection, FakeEngine
from tests.unit.test_bridge import Topology, bridge_value, records, user

TIMEOUT_MS = 400
CONTRACT = 2.5  # x timeout_ms: the longest a bridged call may take when its answer is lost


@pytest.fixture
def topo(tmp_path: Path) -> Iterator[Topology]:
    t = Topology(tmp_path)
    yield t
    t.close()


def answers_never_return(conn: FakeConnection, function_id: str) -> list[int]:
    """Every call of ``function_id`` is applied on the main, and its answer is lost: the
    caller waits its whole ``timeout_ms``, then hears a timeout. Returns the call count."""
    original = conn.trigger
    calls = [0]

    def trigger(request: dict[str, Any]) -> Any:
        answer = original(request)
        if request["function_id"] != function_id:
            return answer
        calls[0] += 1
        time.sleep(request["timeout_ms"] / 1000)
        raise InvocationError("timeout", f"invocation timed out after {request['timeout_ms']}ms")

    conn.trigger = trigger  # type: ignore[method-assign]
    return calls


def timed(fake: FakeEngine, function_id: str, payload: dict[str, Any]) -> tuple[Any, float]:
    started = time.monotonic()
    answer = fake.invoke(function_id, payload)
    return answer, time.monotonic() - started


def bridged_session(topo: Topology) -> tuple[FakeEngine, str]:
    _host, local = topo.bridged(bridge_value(timeout_ms=TIMEOUT_MS))
    sid = local.invoke("session::create", {"metadata": {"owner": "u_1"}})["session_id"]
    local.invoke("session::append", {"session_id": sid, "message": user("first"), "entry_id": "u-0"})
    topo.settle()
    return local, sid


def main_store(topo: Topology) -> FsStore:
    return FsStore(topo.tmp / "main", read_only=True)


# (function, payload beyond session_id, the store call whose answer is lost, the event it fires)
MUTATIONS = [
    ("session::append", {"message": user("x"), "entry_id": "u-1"}, atomic.COMMIT, ev.ON_MESSAGE_ADDED),
    ("session::append-many", {"messages": [user("a"), user("b"), user("c")]}, atomic.COMMIT,
     ev.ON_MESSAGE_ADDED),
    ("session::update-message", {"entry_id": "u-0", "content": [{"type": "text", "text": "v1"}],
                                 "expected_revision": 0}, atomic.COMMIT, ev.ON_MESSAGE_UPDATED),
    ("session::set-meta", {"title": "kept"}, atomic.COMMIT, ev.ON_META_UPDATED),
    ("session::set-status", {"status": "working"}, atomic.COMMIT, ev.ON_STATUS_CHANGED),
    ("session::delete", {}, atomic.DELETE_SESSION, ev.ON_DELETED),
]


@pytest.mark.parametrize(("function_id", "extra", "lossy", "event"), MUTATIONS,
                         ids=[m[0].split("::")[1] for m in MUTATIONS])
def test_a_bridged_mutation_whose_answers_are_lost_answers_as_applied_within_the_deadline(
        topo: Topology, function_id: str, extra: dict[str, Any], lossy: str, event: str) -> None:
    # Prevents: a mutation the main applied answered session/storage after 2x timeout_ms (the
    # settling replay's answer was lost too and nothing read the main back), its events never fired.
    local, sid = bridged_session(topo)
    before = main_store(topo).get_meta(sid)
    fired = {name: fake.add_observer(event) for name, fake in (("main", topo.main_fake), ("bridge", local))}
    others = [fake.add_observer(fid) for fake in (topo.main_fake, local) for fid in
              (ev.ON_CREATED, ev.ON_DELETED, ev.ON_MESSAGE_ADDED, ev.ON_MESSAGE_UPDATED, ev.ON_META_UPDATED,
               ev.ON_STATUS_CHANGED) if fid != event]
    calls = answers_never_return(topo.connections[0], lossy)
    answer, took = timed(local, function_id, {"session_id": sid, **extra})
    topo.settle()
    assert calls[0] >= 1
    assert took < CONTRACT * TIMEOUT_MS / 1000, f"{took:.3f}s"
    store = main_store(topo)
    meta = store.get_meta(sid)
    if function_id == "session::delete":
        assert answer == {"deleted": True} and meta is None
        expected = 1
    else:
        assert meta is not None and before is not None
        if function_id == "session::append":
            assert answer["entry_id"] == "u-1"
            assert [r["entry"]["id"] for r in records(topo.tmp / "main", sid) if "entry" in r] == ["u-0", "u-1"]
        elif function_id == "session::append-many":
            assert len(answer["entry_ids"]) == 3 and meta["message_count"] == 4
        elif function_id == "session::update-message":
            assert answer == {"updated": True, "revision": 1}
            assert (store.get_entry(sid, "u-0") or {})["revision"] == 1
        elif function_id == "session::set-meta":
            assert answer["meta"]["title"] == "kept" and meta["title"] == "kept"
        else:
            assert answer == {"status": "working", "previous_status": "idle"} and meta["status"] == "working"
        expected = 3 if function_id == "session::append-many" else 1
    # its events once, at the main and at the originating bridge; nothing else fired
    for name, obs in fired.items():
        assert len(obs.delivered) == expected, name
        assert {e["session_id"] for e in obs.delivered} == {sid}
    assert [o.delivered for o in others] == [[] for _ in others]


def test_a_create_whose_answers_are_lost_answers_the_new_session(topo: Topology) -> None:
    # Prevents: a create the main stored answered session/storage (its session an orphan no one
    # was told of: on-created never fired).
    _host, local = topo.bridged(bridge_value(timeout_ms=TIMEOUT_MS))
    created = {name: fake.add_observer(ev.ON_CREATED) for name, fake in (("main", topo.main_fake), ("b", local))}
    answers_never_return(topo.connections[0], atomic.COMMIT)
    answer, took = timed(local, "session::create", {"title": "t", "metadata": {"owner": "u_1"}})
    topo.settle()
    assert took < CONTRACT * TIMEOUT_MS / 1000, f"{took:.3f}s"
    assert main_store(topo).get_meta(answer["session_id"]) == answer["meta"]
    for name, obs in created.items():
        assert [e["session_id"] for e in obs.delivered] == [answer["session_id"]], name


def test_attachment_put_and_delete_whose_answers_are_lost_answer_as_applied(topo: Topology) -> None:
    # Prevents: an upload (or a removal) the main carried out answered session/storage.
    local, sid = bridged_session(topo)
    conn = topo.connections[0]
    original = conn.trigger
    answers_never_return(conn, sp.PUT_ATTACHMENT)
    put, took = timed(local, "session::put-attachment", {"session_id": sid, "name": "a", "mime": "", "data": "aGk="})
    assert took < CONTRACT * TIMEOUT_MS / 1000, f"{took:.3f}s"
    aid = put["attachment"]["attachment_id"]
    assert main_store(topo).read_attachment(sid, aid) == b"hi"
    conn.trigger = original  # type: ignore[method-assign]
    answers_never_return(conn, sp.DELETE_ATTACHMENT)
    gone, took = timed(local, "session::delete-attachment", {"session_id": sid, "attachment_id": aid})
    assert took < CONTRACT * TIMEOUT_MS / 1000, f"{took:.3f}s"
    assert gone == {"deleted": True}
    assert main_store(topo).list_attachments(sid) == []
    conn.trigger = original  # type: ignore[method-assign]
    # a second delete of it (a new op) finds nothing: deleted is exact
    assert local.invoke("session::delete-attachment", {"session_id": sid, "attachment_id": aid}) == {"deleted": False}


def test_a_main_that_stops_answering_mid_commit_answers_storage_within_the_deadline(topo: Topology) -> None:
    # Prevents: a settle with no bound (each of its calls waiting a whole timeout_ms), and an
    # outcome the main cannot confirm reported as anything but session/storage.
    local, sid = bridged_session(topo)
    conn = topo.connections[0]
    original = conn.trigger

    def silent_from_the_commit_on(request: dict[str, Any]) -> Any:
        if request["function_id"] == atomic.COMMIT or conn.failure is not None:
            conn.failure = InvocationError("timeout", "no answer")
            time.sleep(request["timeout_ms"] / 1000)
            raise conn.failure
        return original(request)

    conn.trigger = silent_from_the_commit_on  # type: ignore[method-assign]
    added = local.add_observer(ev.ON_MESSAGE_ADDED)
    started = time.monotonic()
    with pytest.raises(InvocationError) as err:
        local.invoke("session::append", {"session_id": sid, "message": user("lost")})
    took = time.monotonic() - started
    conn.trigger, conn.failure = original, None  # type: ignore[method-assign]
    topo.settle()
    assert str(err.value.message).startswith("session/storage")
    assert took < CONTRACT * TIMEOUT_MS / 1000, f"{took:.3f}s"
    assert added.delivered == []
    assert [e["id"] for e in main_store(topo).entries(sid)] == ["u-0"]  # never reached the main


def test_the_main_answers_a_repeated_delete_op_as_the_first_and_no_other_caller(topo: Topology) -> None:
    # Prevents: a settling bridge hearing deleted: false for the delete it made itself (its first
    # answer lost), or hearing deleted: true for one another bridge made (on-deleted twice).
    conn = topo.main_fake.connection()
    sid = topo.main_fake.invoke("session::create", {})["session_id"]

    def delete(op: str | None) -> Any:
        payload = {"session_id": sid} if op is None else {"session_id": sid, "op": op}
        return conn.trigger({"function_id": atomic.DELETE_SESSION, "payload": payload, "timeout_ms": 700})

    assert delete("op-a") == {"deleted": True}
    assert delete("op-a") == {"deleted": True}  # the same delete, repeated: as it answered first
    assert delete("op-b") == {"deleted": False}  # another caller's: it removed nothing
    assert delete(None) == {"deleted": False}
    assert main_store(topo).get_meta(sid) is None


def test_the_record_of_recent_deletes_is_bounded() -> None:
    # Prevents: the main's memory of delete ops growing with every delete it serves.
    from session_manager.store.bridge.server_atomic import RecentDeletes

    recent = RecentDeletes(size=3)
    for n in range(5):
        assert recent.once(("session", f"s_{n}", "op"), lambda: True) is True
    assert recent.once(("session", "s_4", "op"), lambda: False) is True  # remembered
    assert recent.once(("session", "s_0", "op"), lambda: False) is False  # forgotten: the oldest went
    assert recent.once(None, lambda: False) is False  # no op: never remembered


def first_answer_lost(conn: FakeConnection, function_id: str) -> None:
    """The first call of ``function_id`` is applied on the main and its answer lost (the caller
    waits its ``timeout_ms``); the replay's answer comes back."""
    original = conn.trigger
    calls = [0]

    def trigger(request: dict[str, Any]) -> Any:
        answer = original(request)
        if request["function_id"] == function_id:
            calls[0] += 1
            if calls[0] == 1:
                time.sleep(request["timeout_ms"] / 1000)
                raise InvocationError("timeout", f"invocation timed out after {request['timeout_ms']}ms")
        return answer

    conn.trigger = trigger  # type: ignore[method-assign]


# (function, its payload given the session, the event it fires or None): the commits MUTATIONS leaves out
OTHER_COMMITS = [
    ("session::fork", lambda sid: {"session_id": sid, "entry_id": "u-0"}, ev.ON_CREATED),
    ("session::ensure", lambda sid: {"session_id": "s-ensured", "title": "e"}, ev.ON_CREATED),
    ("session::set-active-leaf", lambda sid: {"session_id": sid, "entry_id": "u-0"}, None),
    ("session::set-draft", lambda sid: {"session_id": sid, "draft": "d"}, None),
]
EVERY_EVENT = (ev.ON_CREATED, ev.ON_DELETED, ev.ON_MESSAGE_ADDED, ev.ON_MESSAGE_UPDATED, ev.ON_META_UPDATED,
               ev.ON_STATUS_CHANGED)


@pytest.mark.parametrize("lost", ["every answer", "the first answer"])
@pytest.mark.parametrize(("function_id", "payload", "event"), OTHER_COMMITS, ids=[c[0] for c in OTHER_COMMITS])
def test_every_bridged_commit_whose_answer_is_lost_answers_as_applied_and_fires_once(
        topo: Topology, function_id: str, payload: Any, event: str | None, lost: str) -> None:
    # Prevents: a fork, ensure, leaf move or draft the main applied answered session/storage (or
    # its event fired twice, by the first call and its replay) when its answer was lost.
    local, sid = bridged_session(topo)
    local.invoke("session::append", {"session_id": sid, "message": user("second"), "entry_id": "u-1"})
    topo.settle()
    fired = {(name, fid): fake.add_observer(fid) for name, fake in (("main", topo.main_fake), ("bridge", local))
             for fid in EVERY_EVENT}
    if lost == "every answer":
        answers_never_return(topo.connections[0], atomic.COMMIT)
    else:
        first_answer_lost(topo.connections[0], atomic.COMMIT)
    answer, took = timed(local, function_id, payload(sid))
    topo.settle()
    assert took < CONTRACT * TIMEOUT_MS / 1000, f"{took:.3f}s"
    store = main_store(topo)
    if function_id == "session::fork":
        assert [e["message"] for e in store.entries(answer["session_id"])] == [user("first")]
    elif function_id == "session::ensure":
        assert answer["created"] is True and (store.get_meta("s-ensured") or {})["title"] == "e"
    elif function_id == "session::set-active-leaf":
        assert store.get_leaf(sid) == "u-0"
    else:
        assert (store.get_meta(sid) or {})["draft"] == "d"
    got = {key: len(obs.delivered) for key, obs in fired.items() if obs.delivered}
    assert got == ({} if event is None else {("main", event): 1, ("bridge", event): 1})
