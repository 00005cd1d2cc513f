"""The production clock and ids, and the deterministic ones the suites use."""

from __future__ import annotations

import os
import re
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
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


def test_production_ids_are_random_version_4_uuids_across_threads() -> None:
    # Prevents: batched random ids that are not valid UUIDv4 (version, variant) or repeat under threads.
    seen = _drawn_by_threads(UuidIds().entry_id)
    assert len(set(seen)) == len(seen) == 2800
    for value in seen:
        parsed = uuid.UUID(hex=value[2:])
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and parsed.hex == value[2:]
    # Every random bit varies: no digit position is stuck (the version digit excepted).
    assert all(len({v[2 + i] for v in seen}) > 1 for i in range(32) if i != 12)


@pytest.mark.skipif(sys.platform == "win32", reason="os.fork")
def test_a_forked_child_never_draws_its_parents_ids() -> None:
    # Prevents: a child process handing out the ids left in the parent's random batch (duplicate entry ids).
    child, parent = _drawn_after_fork(UuidIds().entry_id)
    assert len(child) == 5 and not child & parent


def test_production_commit_ids_are_16_random_hex_digits_across_threads() -> None:
    # Prevents: the batched commit (tx) ids of multi-line records repeating under threads, or a stuck
    # digit (two commits of one log sharing an id would let replay pair lines of different commits).
    seen = _drawn_by_threads(UuidIds().tx_id)
    assert len(set(seen)) == len(seen) == 2800
    assert all(re.fullmatch("[0-9a-f]{16}", v) for v in seen)
    assert all(len({v[i] for v in seen}) > 1 for i in range(16))


@pytest.mark.skipif(sys.platform == "win32", reason="os.fork")
def test_a_forked_child_never_draws_its_parents_commit_ids() -> None:
    # Prevents: a child process handing out the commit ids left in the parent's batch.
    child, parent = _drawn_after_fork(UuidIds().tx_id)
    assert len(child) == 5 and not child & parent


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


def _drawn_by_threads(draw: Callable[[], str], threads: int = 4, each: int = 700) -> list[str]:
    """Every id ``threads`` threads drew at once, ``each`` apiece (past a batch of random bytes, several times)."""
    seen: list[str] = []
    lock = threading.Lock()

    def take() -> None:
        drawn = [draw() for _ in range(each)]
        with lock:
            seen.extend(drawn)

    pool = [threading.Thread(target=take) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return seen


def _drawn_after_fork(draw: Callable[[], str]) -> tuple[set[str], set[str]]:
    """Five ids a forked child draws and five its parent draws next, the parent holding a batch when it forks."""
    draw()  # the parent holds a batch with ids still to draw
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next ids, then leave without running the parent's teardown
        os.close(read)
        os.write(write, " ".join(draw() for _ in range(5)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split())
    os.waitpid(pid, 0)
    return child, {draw() for _ in range(5)}


def test_entry_ids_made_a_batch_at_a_time_are_the_uuid4_of_their_random_bytes() -> None:
    # Prevents: the batch's bulk setting of the version and variant bits (byte 6 and 8 of each
    # 16) drifting from uuid4's (the integer masks), e.g. touching the wrong byte of later ids.
    from session_manager.ids import _prefixed_uuid4s

    raw = bytes(range(256)) * 2  # every byte value at each position of some id
    expected = ["e_" + uuid.UUID(bytes=raw[i:i + 16], version=4).hex for i in range(0, len(raw), 16)]
    assert _prefixed_uuid4s("e_")(raw) == expected
