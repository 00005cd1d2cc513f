"""Two bridged instances over one main (fake engines): concurrent writes
through the whole surface, and reads that fetch only what they return."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from session_manager._wire import events as ev
from session_manager.store import FsStore
from session_manager.store.bridge import protocol as sp
from session_manager.store.bridge import protocol_cas as atomic
from session_manager.store.bridge.remote_path import CHUNK
from tests.unit.test_bridge import Topology, assistant, records, user


@pytest.fixture
def topo(tmp_path: Path) -> Iterator[Topology]:
    t = Topology(tmp_path)
    yield t
    t.close()


def concurrently(*jobs: Any) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(len(jobs))

    def run(job: Any) -> None:
        try:
            start.wait()
            job()
        except BaseException as e:  # reported below
            errors.append(e)

    pool = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in pool:
        t.start()
    for t in pool:
        t.join(120)
    assert errors == []


def test_two_bridges_appending_at_once_keep_one_chain_and_fire_each_event_once(topo: Topology) -> None:
    # Prevents: two bridges forking one session (acknowledged appends off the active path, message_count
    # short), or an instance's event functions called twice or never for a bridged append.
    per_bridge = 100
    _h1, l1 = topo.bridged()
    _h2, l2 = topo.bridged()
    observed = {name: fake.add_observer(ev.ON_MESSAGE_ADDED) for name, fake in
                (("main", topo.main_fake), ("b1", l1), ("b2", l2))}
    sid = l1.invoke("session::create", {"title": "shared"})["session_id"]
    acked: dict[str, list[str]] = {"b1": [], "b2": []}

    def appender(name: str, fake: Any) -> Any:
        def run() -> None:
            for i in range(per_bridge):
                acked[name].append(fake.invoke("session::append", {"session_id": sid,
                                                                   "message": user(f"{name}-{i}")})["entry_id"])
        return run

    concurrently(appender("b1", l1), appender("b2", l2))
    topo.settle()
    fresh = FsStore(topo.tmp / "main", read_only=True)
    path = [e["id"] for e in fresh.path(sid, fresh.get_leaf(sid))]
    assert sorted(path) == sorted(acked["b1"] + acked["b2"])  # one chain, every acknowledged append on it
    assert len(fresh.entries(sid)) == 2 * per_bridge
    assert (fresh.get_meta(sid) or {})["message_count"] == 2 * per_bridge
    assert (fresh.get_meta(sid) or {})["title"] == "shared"
    for name, obs in observed.items():
        ids = [e["entry_id"] for e in obs.delivered]
        assert sorted(ids) == sorted(path), name  # called once per event, on every instance
    assert sum(1 for r in records(topo.tmp / "main", sid) if r["type"] == "append") == 2 * per_bridge


def test_a_title_set_on_the_main_survives_bridged_appends_in_flight(topo: Topology) -> None:
    # Prevents: a bridged append storing its own stale copy of the meta over a title just set on the main.
    _h1, l1 = topo.bridged()
    sid = l1.invoke("session::create", {"title": "old"})["session_id"]

    def titles() -> None:
        for i in range(60):
            topo.main_fake.invoke("session::set-meta", {"session_id": sid, "title": f"new-{i}"})

    def appends() -> None:
        for i in range(60):
            l1.invoke("session::append", {"session_id": sid, "message": user(str(i))})

    concurrently(titles, appends)
    meta = FsStore(topo.tmp / "main", read_only=True).get_meta(sid) or {}
    assert meta["title"] == "new-59" and meta["message_count"] == 60
    assert l1.invoke("session::get", {"session_id": sid})["meta"] == meta


def long_session(topo: Topology, local: Any, n: int) -> str:
    """A session with runs (calls + results), custom entries and a side branch."""
    sid: str = local.invoke("session::create", {})["session_id"]
    for i in range(n):
        kind = i % 5
        if kind == 0:
            local.invoke("session::append", {"session_id": sid, "message": user(f"u{i}"), "entry_id": f"x{i}"})
        elif kind == 1:
            call = {"role": "assistant", "content": [{"type": "function_call", "id": f"c{i}", "function_id": "f",
                                                      "arguments": {"a": i}}],
                    "stop_reason": "function_call", "model": "m", "provider": "p", "timestamp": 6}
            local.invoke("session::append", {"session_id": sid, "message": call, "entry_id": f"x{i}"})
        elif kind == 2:
            result = {"role": "function_result", "function_call_id": f"c{i - 1}", "function_id": "f",
                      "content": [{"type": "text", "text": "r"}], "is_error": False, "timestamp": 7}
            local.invoke("session::append", {"session_id": sid, "message": result, "entry_id": f"x{i}"})
        elif kind == 3:
            local.invoke("session::append", {"session_id": sid, "entry_id": f"x{i}",
                                             "custom": {"custom_type": "note", "data": i}})
        else:
            local.invoke("session::append", {"session_id": sid, "message": assistant(f"a{i}"), "entry_id": f"x{i}"})
    local.invoke("session::append", {"session_id": sid, "parent_id": "x3", "message": user("side"),
                                     "entry_id": "side"})
    local.invoke("session::set-active-leaf", {"session_id": sid, "entry_id": f"x{n - 1}"})
    return sid


READS: list[tuple[str, dict[str, Any]]] = [
    ("session::messages", {}),
    ("session::messages", {"limit": 7, "after_entry_id": "x150"}),
    ("session::messages", {"include_custom": True, "limit": 500}),
    ("session::messages", {"roles": ["assistant"], "limit": 3}),
    ("session::messages", {"from_entry_id": "side"}),
    ("session::messages", {"from_entry_id": "x201", "limit": 4}),
    ("session::messages-tail", {}),
    ("session::messages-tail", {"limit": 3, "include_custom": False}),
    ("session::messages-tail", {"before_entry_id": "x100", "limit": 5}),
    ("session::messages-tail", {"until_entry_id": "x10", "limit": 2}),
    ("session::messages-range", {"from_entry_id": "x40", "to_entry_id": "x140"}),
    ("session::messages-range", {"entry_ids": ["x299", "x0", "x150", "x151"]}),
    ("session::messages-range", {"from_entry_id": "x5", "to_entry_id": "side"}),
    ("session::get-message", {"entry_id": "x77"}),
    ("session::get-message", {"entry_id": "nope"}),
]


@pytest.mark.parametrize(("fid", "extra"), READS)
def test_bridged_reads_answer_exactly_as_the_main(topo: Topology, fid: str, extra: dict[str, Any]) -> None:
    # Prevents: a windowed path read that skips, repeats or misplaces an entry at a window edge, or
    # answers an error the main would not.
    from iii import InvocationError

    _h1, l1 = topo.bridged()
    sid = long_session(topo, l1, 300)
    payload = {"session_id": sid, **extra}

    def answer(fake: Any) -> Any:
        try:
            return fake.invoke(fid, payload)
        except InvocationError as e:
            return e.message

    assert answer(l1) == answer(topo.main_fake)
    # and a cursor walk through the whole session agrees page by page
    if fid == "session::messages" and not extra:
        cursor = None
        while True:
            page = {**payload, "limit": 11, **({"cursor": cursor} if cursor else {})}
            mine, theirs = l1.invoke(fid, page), topo.main_fake.invoke(fid, page)
            assert mine == theirs
            cursor = mine.get("next_cursor")
            if cursor is None:
                break


def test_a_bridged_page_fetches_windows_not_the_session(topo: Topology) -> None:
    # Prevents: bridge reads downloading every entry of the session (O(session) per page).
    _h1, l1 = topo.bridged()
    sid = long_session(topo, l1, 1000)
    conn = topo.connections[0]
    for fid, extra in (("session::messages", {"limit": 20}), ("session::messages-tail", {"limit": 20}),
                       ("session::messages-range", {"from_entry_id": "x500", "to_entry_id": "x520"}),
                       ("session::get-message", {"entry_id": "x999"})):
        before = len(conn.triggers)
        l1.invoke(fid, {"session_id": sid, **extra})
        calls = conn.triggers[before:]
        assert sp.LIST_ENTRIES not in {c["function_id"] for c in calls}, fid
        windows = [c for c in calls if c["function_id"] == atomic.READ_PATH]
        assert len(windows) <= 4, (fid, len(windows))
        assert all(c["payload"]["count"] <= CHUNK for c in windows)


def test_a_main_failing_between_two_windows_answers_session_storage(topo: Topology) -> None:
    # Prevents: a read that half-succeeded (first window fetched, then the main gone) answering a short
    # page as if it were the whole answer, or escaping as a traceback.
    from iii import InvocationError

    _h1, l1 = topo.bridged()
    sid = long_session(topo, l1, 200)
    conn = topo.connections[0]
    original, windows = conn.trigger, {"n": 0}

    def second_window_fails(request: dict[str, Any]) -> Any:
        if request["function_id"] == atomic.READ_PATH:
            windows["n"] += 1
            if windows["n"] == 2:
                raise InvocationError("TIMEOUT", "invocation timed out after 700ms")
        return original(request)

    conn.trigger = second_window_fails  # type: ignore[method-assign]
    with pytest.raises(InvocationError) as err:
        l1.invoke("session::messages", {"session_id": sid, "limit": 20})
    assert err.value.message.startswith("session/storage: bridge session::store::read-path failed")
    assert windows["n"] == 2
    conn.trigger = original  # type: ignore[method-assign]
    assert len(l1.invoke("session::messages", {"session_id": sid, "limit": 20})["messages"]) == 20
