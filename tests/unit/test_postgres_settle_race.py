"""Settling an ``sm_append``/``sm_apply`` whose answer was lost asks whether it
landed only once its old backend is gone. Regression (a CI run): the backend
was idle when looked at, read the statement a moment later, so the "end it
unless active" query ended nothing, and the landed-row check ran before its
commit: a landed append without ``entry_id`` answered "not applied", was
retried, and stored twice. Driven by a scripted connection: the race is a
window of microseconds on a real server."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("psycopg")

from session_manager.store.postgres import in_doubt


class _Rows:
    def __init__(self, row: tuple[Any, ...] | None) -> None:
        self.row = row

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.row


class _Conn:
    """Answers each query kind from its own script, in order; records what was asked."""

    def __init__(self, states: list[str | None], ended: list[bool | None], landed: list[bool]) -> None:
        self.states, self.ended, self.landed = states, ended, landed
        self.asked: list[str] = []

    def execute(self, query: str, params: Any = None) -> _Rows:
        if query == in_doubt._OLD_STATE:
            self.asked.append("state")
            state = self.states.pop(0)
            return _Rows(None if state is None else (state,))
        if query == in_doubt._END_OLD_STATEMENT:
            self.asked.append("end")
            ended = self.ended.pop(0)
            return _Rows(None if ended is None else (ended,))
        self.asked.append("landed")
        return _Rows((self.landed.pop(0),))


def test_a_backend_that_turned_active_between_the_two_queries_is_waited_for() -> None:
    # idle at the first look; by the end query it runs the statement (no row ended); still there.
    conn = _Conn(states=["idle", "active"], ended=[None], landed=[])
    assert in_doubt._old_gone(conn, {"pid": 1, "started": 0}) is False  # type: ignore[arg-type]
    assert conn.asked == ["state", "end", "state"]


def test_a_backend_ended_now_or_already_gone_lets_the_landed_check_run() -> None:
    ended = _Conn(states=["idle"], ended=[True], landed=[])
    assert in_doubt._old_gone(ended, {"pid": 1, "started": 0}) is True  # type: ignore[arg-type]
    gone = _Conn(states=[None], ended=[], landed=[])
    assert in_doubt._old_gone(gone, {"pid": 1, "started": 0}) is True  # type: ignore[arg-type]
    # turned active, then finished and left before the second look: gone, its commit visible.
    finished = _Conn(states=["idle", None], ended=[None], landed=[])
    assert in_doubt._old_gone(finished, {"pid": 1, "started": 0}) is True  # type: ignore[arg-type]


def test_an_end_that_timed_out_is_asked_again() -> None:
    # pg_terminate_backend(pid, 1000) answered false: the backend had not exited within the second.
    conn = _Conn(states=["idle", "idle"], ended=[False], landed=[])
    assert in_doubt._old_gone(conn, {"pid": 1, "started": 0}) is False  # type: ignore[arg-type]
