"""The loaded-session cache stays within ``cache_bytes``; dropping a session
loses nothing, under concurrent writers too (the hot reload of the budget is
in test_configuration.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from session_manager.store import Commit, FsStore
from session_manager.store.fs._cache import SESSION_OVERHEAD
from session_manager.testing.contract import message, meta


def grow(store: FsStore, sid: str, n: int, start: int = 0) -> None:
    parent = store.get_leaf(sid)
    for i in range(start, start + n):
        eid = f"{sid}-e{i}"
        store.commit(sid, Commit(entries=(message(eid, parent, "x" * 200),), leaf=eid,
                                 meta=meta(sid, message_count=i + 1)))
        parent = eid


def view(store: FsStore, sid: str) -> dict[str, Any]:
    leaf = store.get_leaf(sid)
    return {"meta": store.get_meta(sid), "path": [e["id"] for e in store.path(sid, leaf)],
            "entries": sorted(store.entries(sid), key=lambda e: e["id"])}


def test_touching_many_sessions_stays_within_the_budget(tmp_path: Path) -> None:
    # Prevents: memory growing with every session ever touched (a long-running worker over 100k sessions).
    budget = 40 * 1024
    store = FsStore(tmp_path, cache_bytes=budget)
    sids = [f"s_{i:03d}" for i in range(120)]
    for sid in sids:
        store.commit(sid, Commit(meta=meta(sid)))
        grow(store, sid, 5)
    peak = 0
    for sid in sids:
        assert len(store.path(sid, store.get_leaf(sid))) == 5
        peak = max(peak, store._sessions.total)
    assert peak <= budget + 2 * (SESSION_OVERHEAD + 5 * 1024)  # one session over, at most, while it is used
    assert len(store._sessions) < len(sids)
    # Everything dropped reads back whole, in this store and after a restart.
    seen = {sid: view(store, sid) for sid in sids}
    store.close()
    fresh = FsStore(tmp_path)
    for sid in sids:
        assert view(fresh, sid) == seen[sid]
        assert len(seen[sid]["path"]) == 5
    fresh.close()


def test_writers_racing_the_eviction_lose_nothing(tmp_path: Path) -> None:
    # Prevents: a write landing in a state the cache just dropped (a later load would not see it).
    store = FsStore(tmp_path, cache_bytes=1)  # every other session is dropped on each touch
    sids = [f"s_{i}" for i in range(8)]
    for sid in sids:
        store.commit(sid, Commit(meta=meta(sid)))
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for sid in sids[k::2]:  # two writers per session, serialized as the service does
                with locks[sid]:
                    n = store.get_meta(sid)["message_count"]  # type: ignore[index]
                    grow(store, sid, 1, start=n)
        except BaseException as e:
            errors.append(e)

    locks = {sid: threading.Lock() for sid in sids}
    threads = [threading.Thread(target=writer, args=(k % 2,)) for k in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    total = sum(store.get_meta(sid)["message_count"] for sid in sids)  # type: ignore[index]
    assert total == 40 * 4  # 40 threads x 4 sessions each, one message per touch
    seen = {sid: view(store, sid) for sid in sids}
    store.close()
    restarted = FsStore(tmp_path)
    for sid in sids:
        assert view(restarted, sid) == seen[sid]
        assert len(seen[sid]["path"]) == restarted.get_meta(sid)["message_count"]  # type: ignore[index]
    restarted.close()
