"""The service's per-session lock stripes, made on first use."""

from __future__ import annotations

import sys
import threading

from session_manager._service.core import LOCK_STRIPES
from session_manager._service.service import SessionService
from session_manager.store import MemoryStore


def test_threads_racing_for_one_stripe_all_get_the_same_lock() -> None:
    # Prevents: a lazily made stripe handed out twice, so two writers of one session both
    # "hold" its lock and interleave their read-check-write.
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for round_ in range(20):
            got = _race(SessionService(MemoryStore()), f"s_{round_}", 8)
            assert len(got) == 8 and all(lock is got[0] for lock in got)
    finally:
        sys.setswitchinterval(old)


def _race(service: SessionService, session_id: str, threads: int) -> list[threading.RLock]:
    got: list[threading.RLock] = []
    start = threading.Barrier(threads)

    def take() -> None:
        start.wait()
        got.append(service.session_lock(session_id))

    running = [threading.Thread(target=take) for _ in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join()
    return got


def test_a_session_keeps_its_stripe_and_the_table_stays_bounded() -> None:
    # Prevents: a lock per id (unbounded memory for callers naming many ids) or a session
    # mapped to a different lock on a later call.
    service = SessionService(MemoryStore())
    first = {f"s_{n}": service.session_lock(f"s_{n}") for n in range(5000)}
    assert all(service.session_lock(sid) is lock for sid, lock in first.items())
    assert len({id(lock) for lock in first.values()}) <= LOCK_STRIPES
