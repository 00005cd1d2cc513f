"""The embedded host's lifetime: close() against calls in flight, closers on
other threads, close() from an observer, use after close."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.clock import ManualClock
from session_manager.errors import STORAGE, SessionError
from session_manager.ids import SequentialIds
from session_manager.store.base import Commit


def open_store(where: Path) -> session_manager.SessionManager:
    return session_manager.open(where, ids=SequentialIds(), clock=ManualClock(1_000_000))


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 0}


class Gate:
    """Holds the next commit of ``store`` until opened (a call caught mid-flight)."""

    def __init__(self, store: Any) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        real = store.commit

        def held(session_id: str, commit: Commit) -> Commit:
            if not self.entered.is_set():
                self.entered.set()
                assert self.release.wait(10)
            return real(session_id, commit)

        store.commit = held  # type: ignore[method-assign]


def messages(where: Path, sid: str) -> Any:
    reopened = open_store(where)
    try:
        return reopened.call("session::messages", {"session_id": sid})["messages"]
    finally:
        reopened.close()


def test_close_waits_for_a_call_in_flight_before_releasing_the_data_dir(tmp_path: Path) -> None:
    # Prevents: close() releasing the data_dir's lock (and closing the log descriptors) while
    # another thread was mid-write: the write then landed after close returned, in a data_dir
    # a second owner had meanwhile opened, and that owner never saw the acknowledged entry.
    where = tmp_path / "d"
    sm = open_store(where)
    sid = sm.call("session::create", {})["session_id"]
    events: list[dict[str, Any]] = []
    sm.observe({"function_id": "session::on-message-added"}, events.append)
    gate = Gate(sm.service.store)
    answers: list[Any] = []
    writer = threading.Thread(target=lambda: answers.append(
        sm.call("session::append", {"session_id": sid, "message": user("in flight")})))
    closer = threading.Thread(target=sm.close)
    try:
        writer.start()
        assert gate.entered.wait(10)
        closer.start()
        closer.join(0.3)
        assert closer.is_alive(), "close() returned while a call was mid-write"
        # Still owned: a second writable open is refused.
        with pytest.raises(SessionError) as refused:
            open_store(where)
        assert refused.value.code == STORAGE
        # A call that starts once close() has begun is refused, not run against a closing store.
        with pytest.raises(RuntimeError, match="closed"):
            sm.call("session::get", {"session_id": sid})
    finally:
        gate.release.set()
        writer.join(10)
        closer.join(10)
    assert not writer.is_alive() and not closer.is_alive()
    assert [a["entry_id"] for a in answers] == ["e_001"]
    assert [e["entry_id"] for e in events] == ["e_001"]  # the in-flight call's event still fired
    assert messages(where, sid) == [{"entry_id": "e_001", "message": user("in flight")}]


def test_a_second_closer_returns_only_once_the_data_dir_is_released(tmp_path: Path) -> None:
    # Prevents: a second close() (another thread's `with` block) returning while the first
    # still waited for a call in flight, so its caller's reopen of the data_dir failed as held.
    where = tmp_path / "d"
    sm = open_store(where)
    sid = sm.call("session::create", {})["session_id"]
    gate = Gate(sm.service.store)
    writer = threading.Thread(target=lambda: sm.call(
        "session::append", {"session_id": sid, "message": user("in flight")}))
    first = threading.Thread(target=sm.close)
    second_done = threading.Event()

    def second() -> None:
        sm.close()
        second_done.set()

    later = threading.Thread(target=second)
    try:
        writer.start()
        assert gate.entered.wait(10)
        first.start()
        first.join(0.2)
        later.start()
        assert not second_done.wait(0.3), "the second close() returned before the store was released"
    finally:
        gate.release.set()
        for t in (writer, first, later):
            t.join(10)
    assert second_done.is_set() and not first.is_alive()
    assert messages(where, sid) == [{"entry_id": "e_001", "message": user("in flight")}]


def test_close_from_an_observer_closes_after_its_own_call(tmp_path: Path) -> None:
    # Prevents: close() called by an observer (on the calling thread, inside the call)
    # waiting for that very call to finish: a deadlock.
    where = tmp_path / "d"
    sm = open_store(where)
    sid = sm.call("session::create", {})["session_id"]
    seen: list[str] = []

    def stop(event: dict[str, Any]) -> None:
        seen.append(event["entry_id"])
        sm.close()

    sm.observe({"function_id": "session::on-message-added"}, stop)
    done: list[Any] = []
    t = threading.Thread(target=lambda: done.append(
        sm.call("session::append", {"session_id": sid, "message": user("last")})))
    t.start()
    t.join(10)
    assert not t.is_alive(), "close() from an observer deadlocked"
    assert [d["entry_id"] for d in done] == ["e_001"] and seen == ["e_001"]
    with pytest.raises(RuntimeError, match="closed"):
        sm.call("session::get", {"session_id": sid})
    sm.close()  # a second close does nothing
    assert messages(where, sid) == [{"entry_id": "e_001", "message": user("last")}]


def test_a_with_block_left_by_an_exception_releases_the_data_dir(tmp_path: Path) -> None:
    # Prevents: the context manager swallowing the caller's exception or keeping the lock.
    where = tmp_path / "d"
    with pytest.raises(KeyError), open_store(where) as sm:
        sid = sm.call("session::create", {})["session_id"]
        sm.call("session::append", {"session_id": sid, "message": user("kept")})
        raise KeyError("caller's own failure")
    with pytest.raises(RuntimeError, match="closed"):
        sm.call("session::get", {"session_id": sid})
    assert messages(where, sid) == [{"entry_id": "e_001", "message": user("kept")}]
