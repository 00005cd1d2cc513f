"""The production clock and ids, and the deterministic ones the suites use."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from freezegun import freeze_time

import session_manager
from session_manager.clock import ManualClock, SystemClock
from session_manager.ids import SequentialIds, UuidIds


def test_system_clock_is_integer_milliseconds_since_the_epoch() -> None:
    # Prevents: seconds or float timestamps leaking into stored entries.
    with freeze_time("2026-06-07T12:00:01Z"):
        now = SystemClock().now_ms()
    assert type(now) is int and now == 1_780_833_601_000


def test_production_timestamps_come_from_the_system_clock(tmp_path: Path) -> None:
    # Prevents: an embedded store that ignores the real clock when none is injected.
    with freeze_time("2026-06-07T12:00:00Z"), session_manager.open(tmp_path / "d") as sm:
        meta = sm.call("session::create", {})["meta"]
        assert meta["created_at"] == meta["updated_at"] == 1_780_833_600_000


def test_production_ids_are_prefixed_uuid_hex() -> None:
    # Prevents: ids the reference's tooling would not recognise (s_/e_/a_ + 32 hex).
    ids = UuidIds()
    for make, prefix in ((ids.session_id, "s_"), (ids.entry_id, "e_"), (ids.attachment_id, "a_")):
        value = make()
        assert re.fullmatch(prefix + "[0-9a-f]{32}", value), value
        assert make() != value


def test_sequential_ids_count_per_kind_and_are_thread_safe() -> None:
    # Prevents: duplicate ids when a suite drives the store from several threads.
    ids = SequentialIds()
    assert (ids.session_id(), ids.entry_id(), ids.entry_id(), ids.attachment_id()) == (
        "s_001", "e_001", "e_002", "a_001")
    seen: list[str] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(200):
            value = ids.entry_id()
            with lock:
                seen.append(value)

    pool = [threading.Thread(target=take) for _ in range(4)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert len(set(seen)) == 800


def test_manual_clock_moves_only_when_told() -> None:
    # Prevents: scenario timestamps drifting with wall time.
    clock = ManualClock(1_000_000)
    assert clock.now_ms() == 1_000_000
    assert clock.advance(250) == clock.now_ms() == 1_000_250
    clock.set(5)
    assert clock.now_ms() == 5
