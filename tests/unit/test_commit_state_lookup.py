"""A commit looks its session's cached state up without the store's lock, then takes the
state's own lock and asks again whether it is still the cached one: a state an eviction
dropped in between is never written to (a newer load, which would not see the write, takes it)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from session_manager.store import Commit, FsStore
from session_manager.testing.contract import message, meta

SID = "s_1"


class DroppedOnAcquire:
    """A state's lock that, the first time it is taken, lets the cache drop its state first
    (as another thread's eviction may, between the commit's lookup and its lock)."""

    def __init__(self, store: FsStore, real: Any) -> None:
        self.store, self.real, self.fired = store, real, False

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        if not self.fired:
            self.fired = True
            d = self.store._d
            with self.real, d.lock:  # as StateCache.evict drops one: under its lock, then out of the cache
                state = d.sessions[SID]
                self.store._drop(SID, state)
                del d.sessions[SID]
        return bool(self.real.acquire(*args, **kwargs))

    def release(self) -> None:
        self.real.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_a_commit_never_writes_to_a_state_dropped_after_its_lookup(tmp_path: Path) -> None:
    # Prevents: an acknowledged append missing from every later read (held only by a dropped state).
    store = FsStore(tmp_path)
    store.commit(SID, Commit(meta=meta(SID)))
    store.commit(SID, Commit(entries=(message("e_1", None),), leaf="e_1", meta=meta(SID, message_count=1)))
    dropped = store._d.sessions[SID]
    lock = dropped.lock = DroppedOnAcquire(store, threading.RLock())  # type: ignore[assignment]

    applied = store.commit(SID, Commit(entries=(message("e_2", "e_1"),), leaf="e_2",
                                       meta=meta(SID, message_count=2)))

    assert lock.fired
    assert [e["id"] for e in applied.entries] == ["e_2"]
    assert "e_2" not in dropped.entries and dropped.leaf == "e_1"  # the dropped state was left as it was
    current = store._d.sessions[SID]
    assert current is not dropped and current.leaf == "e_2"
    assert store.get_leaf(SID) == "e_2"
    assert [e["id"] for e in store.entries(SID)] == ["e_1", "e_2"]
    assert store.get_meta(SID) == meta(SID, message_count=2)
    store.close()
    fresh = FsStore(tmp_path)
    assert [e["id"] for e in fresh.entries(SID)] == ["e_1", "e_2"]
    assert fresh.get_meta(SID) == meta(SID, message_count=2)
    fresh.close()
