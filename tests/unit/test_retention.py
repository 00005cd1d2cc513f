"""Retention: sessions idle for ``idle_days`` are deleted by a background sweep
(at most once a minute of the host's clock), each firing ``on-deleted``, in
both hosts; the worker's ``session::config-status`` shows the last sweep.
Time is a :class:`ManualClock`: nothing waits a minute."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._hosts import retention
from session_manager._worker.config_client import Retry
from session_manager._worker.iii_host import IIIHost, start
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds
from session_manager.testing import FakeEngine

DAY_MS = 86_400_000
DELETED = "session::on-deleted"


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


@pytest.fixture
def no_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retention, "POLL_S", 3600.0)  # the tests tick the sweep themselves


def test_embedded_sweep_deletes_idle_sessions_once_a_minute_and_fires_each(tmp_path: Path, no_poll: None) -> None:
    # Prevents: a sweep that deletes active sessions, ignores `statuses`, runs more than once a
    # minute, or deletes without an on-deleted event; and a deletion that comes back on reopen.
    clock = ManualClock(1_000)
    sm = session_manager.open(tmp_path / "d", clock=clock, ids=SequentialIds(),
                              retention={"idle_days": 2, "statuses": ["done", "error"]})
    deleted: list[dict[str, Any]] = []
    sm.observe({"function_id": DELETED}, deleted.append)
    created: list[dict[str, Any]] = []
    sm.observe({"function_id": "session::on-created"}, created.append)
    old_done = sm.create(metadata={"t": 1}).session_id
    sm.set_status(old_done, status="done")
    old_idle = sm.create().session_id  # idle status: not in statuses
    clock.advance(DAY_MS)
    young_done = sm.create().session_id
    sm.set_status(young_done, status="done")
    created.clear()
    clock.advance(DAY_MS + 1)  # old ones now idle 2 days + 1 ms; young_done 1 day + 1 ms
    assert sm.retention.tick() == 1
    assert deleted == [{"session_id": old_done, "timestamp": clock.now_ms(), "session_metadata": {"t": 1}}]
    assert created == []
    clock.advance(DAY_MS)  # young_done idle 2 days + 1 ms now
    assert sm.retention.tick() == 1 and deleted[-1]["session_id"] == young_done
    assert sm.retention.tick() is None  # the same instant: a sweep ran less than a minute ago
    clock.advance(59_999)
    assert sm.retention.tick() is None
    clock.advance(1)
    assert sm.retention.tick() == 0  # due again; old_idle is idle (status) but not in statuses
    assert sm.retention.status() == {"retention_last_sweep_at": clock.now_ms(), "retention_last_swept": 0}
    assert [s.session_id for s in sm.list().sessions] == [old_idle]
    sm.close()
    reopened = session_manager.open(tmp_path / "d")
    try:
        assert [s.session_id for s in reopened.list().sessions] == [old_idle]
    finally:
        reopened.close()


def test_embedded_retention_is_off_by_default_and_set_retention_turns_it_on_and_off(
        tmp_path: Path, no_poll: None) -> None:
    # Prevents: retention deleting anything when not configured, and a changed policy needing a reopen.
    clock = ManualClock(1_000)
    with session_manager.open(tmp_path / "d", clock=clock) as sm:
        sid = sm.create().session_id
        clock.advance(400 * DAY_MS)
        assert sm.retention.tick() is None and sm.get(sid) is not None
        sm.set_retention(365)
        assert sm.retention.tick() == 1 and sm.get(sid) is None
        sm.create()
        clock.advance(400 * DAY_MS)
        sm.set_retention(None)
        assert sm.retention.tick() is None and len(sm.list().sessions) == 1


@pytest.mark.parametrize("bad", [{"idle_days": 0}, {"idle_days": "3"}, {"statuses": ["done"]},
                                 {"idle_days": 1, "statuses": ["gone"]}, {"idle_days": 1, "statuses": []},
                                 {"idle_days": 1, "every": 5}, 7])
def test_a_bad_embedded_retention_is_a_value_error_before_anything_opens(tmp_path: Path, bad: Any) -> None:
    # Prevents: a typo silently running without retention (or with a wrong one), or a half-open store.
    with pytest.raises(ValueError, match="retention"):
        session_manager.open(tmp_path / "d", retention=bad)
    assert not (tmp_path / "d").exists()


def test_the_sweep_thread_runs_it_without_a_manual_tick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a sweeper whose thread never starts (retention configured, nothing ever deleted).
    monkeypatch.setattr(retention, "POLL_S", 0.01)
    clock = ManualClock(1_000)
    sm = session_manager.open(tmp_path / "d", clock=clock)
    gone = threading.Event()
    sm.observe({"function_id": DELETED}, lambda p: gone.set())
    sid = sm.create().session_id
    clock.advance(2 * DAY_MS)
    sm.set_retention(1)
    assert gone.wait(30), "the sweep thread never deleted the idle session"
    assert sm.get(sid) is None
    sm.close()


NO_WAIT = Retry(attempts=1, delays=(), sleep=lambda s: None)


@pytest.fixture
def worker(tmp_path: Path, no_poll: None) -> Iterator[tuple[FakeEngine, IIIHost, ManualClock]]:
    fake = FakeEngine()
    clock = ManualClock(1_000)
    seed = {"adapter": {"name": "fs", "config": {"data_dir": str(tmp_path / "w")}},
            "retention": {"idle_days": 1}}
    host = start(fake, seed, retry=NO_WAIT, ids=SequentialIds(), clock=clock)
    host.reloader._retry = NO_WAIT
    yield fake, host, clock
    host.close()


def test_worker_sweep_fires_on_deleted_and_config_status_shows_time_and_count(
        worker: tuple[FakeEngine, IIIHost, ManualClock]) -> None:
    # Prevents: the worker's sweep deleting without events, or an operator unable to see it ran.
    fake, host, clock = worker
    status = fake.invoke("session::config-status", {})
    assert status["retention_last_sweep_at"] is None and status["retention_last_swept"] == 0
    fake.add_observer(DELETED)
    idle = fake.invoke("session::create", {"metadata": {"owner": "A"}})["session_id"]
    clock.advance(DAY_MS)
    active = fake.invoke("session::create", {})["session_id"]
    fake.invoke("session::append", {"session_id": active, "message": _user("x")})
    fake.triggers.clear()
    assert host.retention.tick() == 1
    host.emitter.flush()
    assert fake.event_calls() == [(DELETED, {"session_id": idle, "timestamp": clock.now_ms(),
                                             "session_metadata": {"owner": "A"}})]
    status = fake.invoke("session::config-status", {})
    assert status["retention_last_sweep_at"] == clock.now_ms() and status["retention_last_swept"] == 1
    assert fake.invoke("session::get", {"session_id": idle}) is None
    assert fake.invoke("session::get", {"session_id": active}) is not None


def test_worker_retention_hot_reloads_off(worker: tuple[FakeEngine, IIIHost, ManualClock], tmp_path: Path) -> None:
    # Prevents: retention that keeps deleting after an operator removed the key (or needs a restart).
    fake, host, clock = worker
    sid = fake.invoke("session::create", {})["session_id"]
    fake.set_config({"adapter": {"name": "fs", "config": {"data_dir": str(tmp_path / "w")}}})
    assert fake.invoke("session::config-status", {})["last_outcome"] == "applied"
    clock.advance(10 * DAY_MS)
    assert host.retention.tick() is None
    assert fake.invoke("session::get", {"session_id": sid}) is not None
    fake.set_config({"adapter": {"name": "fs", "config": {"data_dir": str(tmp_path / "w")}},
                     "retention": {"idle_days": 5}})
    assert host.retention.tick() == 1
    assert fake.invoke("session::get", {"session_id": sid}) is None
