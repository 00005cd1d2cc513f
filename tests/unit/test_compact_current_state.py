"""compact() (maintenance) rewrites the log from the session's current state only.

It looks the state up, then waits for any background rewrite before taking the
session's lock: meanwhile another thread's eviction may drop that state and a
newer load take the writes that follow. A rewrite from the dropped state would
replace the log with a snapshot that lacks them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from session_manager.store import Commit, FsStore
from session_manager.testing.contract import message, meta

SID = "s_1"


def while_compact_waits(store: FsStore, act: Callable[[], None]) -> list[str]:
    """Run ``act`` once, where compact() waits on the background compactor without a lock
    (other threads write meanwhile); the session ids it was run for."""
    compactor = store._compactor
    assert compactor is not None
    real_wait, fired = compactor.wait, []

    def wait(session_id: str) -> None:
        if not fired:
            fired.append(session_id)
            act()
        real_wait(session_id)

    compactor.wait = wait  # type: ignore[method-assign]
    return fired


def test_a_compaction_never_rewrites_from_a_state_the_cache_dropped(tmp_path: Path) -> None:
    # Prevents: an acknowledged commit lost from the log (compact() rewrote it from a stale state).
    store = FsStore(tmp_path, cache_bytes=1)  # every other session is dropped on each touch
    store.commit(SID, Commit(meta=meta(SID)))
    store.commit(SID, Commit(entries=(message("e_1", None),), leaf="e_1", meta=meta(SID, message_count=1)))
    def write_elsewhere() -> None:
        store.commit("s_2", Commit(meta=meta("s_2")))  # drops s_1 from the cache
        store.commit(SID, Commit(entries=(message("e_2", "e_1"),), leaf="e_2",
                                 meta=meta(SID, message_count=2)))  # a newer load of s_1 takes it

    fired = while_compact_waits(store, write_elsewhere)
    store.compact(SID)
    assert fired == [SID]
    store.close()
    fresh = FsStore(tmp_path)
    assert fresh.get_leaf(SID) == "e_2"
    assert [e["id"] for e in fresh.entries(SID)] == ["e_1", "e_2"]
    assert fresh.get_meta(SID) == meta(SID, message_count=2)
    fresh.close()


def test_a_compaction_never_recreates_a_session_deleted_meanwhile(tmp_path: Path) -> None:
    # Prevents: compact() rewriting the log of a session deleted while it waited (resurrected, empty).
    store = FsStore(tmp_path)
    store.commit(SID, Commit(meta=meta(SID)))
    fired = while_compact_waits(store, lambda: store.delete_session(SID))
    assert store.compact(SID) is False
    assert fired == [SID]  # the delete ran in the unlocked wait
    assert store.get_meta(SID) is None
    assert not (tmp_path / f"{SID}.jsonl").exists()
    store.close()
