"""In-process observers get each session's events in its commit order when several threads
of one process mutate it (session_manager/_service/commit_order.py for the fs and memory
stores; the sqlite adapter numbers its own calls: parity). Real threads, a tiny switch
interval so they interleave; no time is asserted (a hang is bounded, not timed)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._service.commit_order import CommitOrder
from session_manager._wire.events import Event
from session_manager.store.memory import MemoryStore

ADDED = "session::on-message-added"
HANG_S = 60.0  # a correctness bound on a loaded machine (a deadlock never ends), not a timing claim
THREADS = 4
APPENDS = 150


def user(s: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": s}], "timestamp": 1}


@pytest.fixture
def fast_switching() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def open_kind(kind: str, where: Path) -> session_manager.SessionManager:
    if kind == "memory":
        return session_manager.open(store=MemoryStore())
    if kind == "sqlite":
        return session_manager.open(f"sqlite:///{where / 'o.db'}")
    return session_manager.open(where / "data")


def wait_for(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG_S
    while not done():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def stored_path(sm: session_manager.SessionManager, sid: str) -> list[str]:
    store = sm.service.store
    return [e["id"] for e in store.path(sid, store.get_leaf(sid))]


@pytest.mark.parametrize("kind", ["memory", "fs", "sqlite"])
@pytest.mark.parametrize("run", range(3))
def test_threads_appending_to_shared_sessions_are_observed_in_each_sessions_commit_order(
        kind: str, run: int, tmp_path: Path, fast_switching: None) -> None:
    with open_kind(kind, tmp_path) as sm:
        sids = [sm.create().session_id for _ in range(2)]
        seen: dict[str, list[str]] = {sid: [] for sid in sids}
        sm.observe({"function_id": ADDED}, lambda e: seen[e["session_id"]].append(e["entry_id"]))
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                for i in range(APPENDS):  # each thread on both sessions: other sessions' calls between
                    sm.append(sids[(n + i) % 2], message=user(f"t{n}-{i}"), entry_id=f"t{n}-{i}")
            except BaseException as e:  # handed to the test's thread
                errors.append(e)

        threads = [threading.Thread(target=work, args=(n,), daemon=True) for n in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(HANG_S)
        assert not any(t.is_alive() for t in threads), "a call hung"
        assert not errors, errors[0]
        wait_for(lambda: sum(len(s) for s in seen.values()) >= THREADS * APPENDS, "every event delivered")
        for sid in sids:
            path = stored_path(sm, sid)
            assert len(path) == THREADS * APPENDS // 2
            assert seen[sid] == path  # once each, in the order they were committed


@pytest.mark.parametrize("kind", ["memory", "fs"])
def test_calls_that_fail_or_commit_nothing_give_their_number_up(kind: str, tmp_path: Path) -> None:
    """A lone call still returns after its observers ran: the numbers of the calls before it
    (a failure, an idempotent re-append, a read, a delete) were all given up or delivered."""
    with open_kind(kind, tmp_path) as sm:
        sid = sm.create().session_id
        seen: list[str] = []
        sm.observe({"function_id": ADDED}, lambda e: seen.append(e["entry_id"]))
        sm.append(sid, message=user("a"), entry_id="a")
        assert seen == ["a"]
        with pytest.raises(session_manager.SessionError):
            sm.append("missing", message=user("x"), entry_id="x")
        with pytest.raises(session_manager.SessionError):
            sm.append(sid, message=user("y"), entry_id="y", parent_id="no-such-entry")
        sm.append(sid, message=user("a"), entry_id="a")  # idempotent: nothing committed, no event
        sm.call("session::get", {"session_id": sid})
        other = sm.create().session_id
        sm.call("session::delete", {"session_id": other})
        sm.append(sid, message=user("b"), entry_id="b")
        assert seen == ["a", "b"]  # delivered before the call returned
        assert stored_path(sm, sid) == ["a", "b"]


def events(name: str) -> list[Event]:
    return [Event(ADDED, {"entry_id": name})]


def test_a_call_behind_a_pending_number_hands_its_delivery_over_and_returns() -> None:
    """Numbers taken in commit order (A before B); B returns first, without waiting for A:
    A's thread delivers both, A's events first. A failed call's number does not hold anyone."""
    order = CommitOrder()
    delivered: list[str] = []

    def deliver(evs: list[Event]) -> None:
        delivered.extend(str(e.payload["entry_id"]) for e in evs)

    a_numbered = threading.Event()
    a_may_return = threading.Event()

    def call_a() -> tuple[None, list[Event]]:
        order.note()  # (as the mutation's entry point does, under the session's lock)
        a_numbered.set()
        assert a_may_return.wait(HANG_S)
        return None, events("a")

    def call_b() -> tuple[None, list[Event]]:
        order.note()
        return None, events("b")

    a = threading.Thread(target=lambda: order.run(call_a, deliver), daemon=True)
    a.start()
    assert a_numbered.wait(HANG_S)
    order.run(call_b, deliver)  # returns although A's number is pending
    assert delivered == []
    a_may_return.set()
    a.join(HANG_S)
    assert not a.is_alive()
    assert delivered == ["a", "b"]

    def failing() -> tuple[None, list[Event]]:
        order.note()
        raise RuntimeError("commit failed")

    with pytest.raises(RuntimeError):
        order.run(failing, deliver)

    def twice() -> tuple[None, list[Event]]:  # two mutations: the first number given up
        order.note()
        order.note()
        return None, events("c")

    order.run(twice, deliver)
    assert delivered == ["a", "b", "c"]  # a lone call delivered before it returned
    assert order.calls == 0


def test_a_call_nobody_observes_takes_no_number(tmp_path: Path) -> None:
    with open_kind("fs", tmp_path) as sm:
        order = sm.service.core.order
        assert order is not None
        sid = sm.create().session_id
        sm.append(sid, message=user("a"), entry_id="a")
        assert order.calls == 0 and order._given == 0  # (the numbering's own state)
    with open_kind("sqlite", tmp_path) as sm:
        assert sm.service.core.order is None  # it numbers its own calls (outbox)
