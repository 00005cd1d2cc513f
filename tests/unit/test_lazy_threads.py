"""Readers of a session loaded from its index, racing the writer that first
needs its id list and position map (built lazily, on whichever thread asks)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from session_manager.store import Commit, FsStore
from session_manager.testing.contract import message, meta

N = 2000


def seeded(data: Path) -> list[str]:
    store = FsStore(data)
    store.commit("s_1", Commit(meta=meta("s_1")))
    ids = [f"e_{i}" for i in range(N)]
    entries = tuple(message(eid, ids[i - 1] if i else None, f"m{i}") for i, eid in enumerate(ids))
    store.commit("s_1", Commit(entries=entries, leaf=ids[-1], meta=meta("s_1", message_count=N)))
    store.close()  # the index is current: the next open builds nothing per entry
    return ids


def race(store: FsStore, ids: list[str], tag: int) -> tuple[list[BaseException], list[str]]:
    """Four readers by id and by path, one writer appending, all started at once."""
    start = threading.Barrier(5)
    errors: list[BaseException] = []
    added: list[str] = []

    def read(step: int) -> None:
        try:
            start.wait()
            for i in range(step, N, 97):
                entry = store.get_entry("s_1", ids[i])
                assert entry is not None and entry["id"] == ids[i]
                path = store.path("s_1", ids[i])
                assert len(path) == i + 1 and path.index_of(ids[i]) == i
        except BaseException as e:
            errors.append(e)

    def write() -> None:
        try:
            start.wait()
            parent = store.get_leaf("s_1")
            for k in range(30):
                eid = f"w_{tag}_{k}"
                store.commit("s_1", Commit(entries=(message(eid, parent),), leaf=eid,
                                           meta=meta("s_1", message_count=len(ids) + k + 1)))
                parent = eid
                added.append(eid)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=read, args=(s,)) for s in range(4)] + [threading.Thread(target=write)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors, added


@pytest.fixture
def eager_switching() -> Iterator[None]:
    """Threads switch as often as the interpreter allows: races show up in a few rounds."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@pytest.mark.usefixtures("eager_switching")
def test_readers_and_a_writer_share_a_lazily_loaded_session(tmp_path: Path) -> None:
    # Prevents: a reader building the id list or map while the writer appends (a lost id, an
    # assertion on a half-published list, a strict zip of two lengths).
    ids = seeded(tmp_path)
    for tag in range(8):
        store = FsStore(tmp_path)
        assert store.get_leaf("s_1") == ids[-1]  # loaded from the index, nothing built yet
        errors, added = race(store, ids, tag)
        assert not errors
        ids = ids + added
        assert [e["id"] for e in store.entries("s_1")] == ids
        assert [e["id"] for e in store.path("s_1", store.get_leaf("s_1"))] == ids
        store.close()
        again = FsStore(tmp_path)
        assert [e["id"] for e in again.path("s_1", again.get_leaf("s_1"))] == ids
        again.close()
