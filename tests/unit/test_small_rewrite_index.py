"""A background rewrite of a small log removes the replaced log's index instead of
writing one (:meth:`session_manager.store.fs._logfiles.LogFiles.landed`): that removal
must never take away an index written for the new log since, and happen once."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from session_manager.store import Commit, FsStore
from session_manager.store.fs import _logfiles, _sidecar
from session_manager.store.fs._background import Compactor
from session_manager.testing.contract import message, meta
from tests.unit.test_background_compaction import SID, _seed, _update

pytestmark = pytest.mark.usefixtures("background_rewrites")


class HeldCleanup:
    """Holds the background cleanup (closing the replaced log, its index work: on its own
    thread, no lock) until released."""

    def __init__(self, monkeypatch: Any) -> None:
        self.entered, self.gate = threading.Event(), threading.Event()
        real = Compactor._clean

        def gated(compactor: Compactor, session_id: str, cleanup: Callable[[], None]) -> None:
            self.entered.set()
            assert self.gate.wait(30)
            real(compactor, session_id, cleanup)

        monkeypatch.setattr(Compactor, "_clean", gated)


def _first_small_rewrite(store: FsStore) -> int:
    k = 0
    while store.compactions < 1:
        k += 1
        store.commit(SID, _update(k))
        assert k < 10_000
    return k


def _held_after_first_small_rewrite(where: Path, monkeypatch: Any) -> tuple[HeldCleanup, FsStore, int]:
    """A seeded store whose first small rewrite landed, its cleanup held (entered, not run)."""
    held = HeldCleanup(monkeypatch)
    store = FsStore(where)
    _seed(store)
    k = _first_small_rewrite(store)
    assert held.entered.wait(30)
    return held, store, k


def test_a_save_made_while_the_removal_is_queued_keeps_its_index_after_close(tmp_path: Path,
                                                                             monkeypatch: Any) -> None:
    # Prevents: the removal of the replaced log's index (queued on the cleanup thread, no lock)
    # unlinking the index a commit past SAVE_MIN_BYTES wrote for the new log meanwhile; the store
    # then believes it on disk (saved == covered), so close writes none and the reopen replays
    # the whole log.
    where = tmp_path / "d"
    held, store, k = _held_after_first_small_rewrite(where, monkeypatch)
    # A big new entry: the log passes SAVE_MIN_BYTES past the "saved at 0" mark (an index is
    # written now) while live grows as much, so no rewrite follows.
    big = message("e_2", "e_1", "x" * (_logfiles.SAVE_MIN_BYTES + 1024))
    store.commit(SID, Commit(entries=(big,), leaf="e_2", meta=meta(SID, message_count=2, updated_at=k + 1)))
    index = store._files.files(SID).index
    assert os.path.exists(index)
    held.gate.set()
    assert store._compactor is not None
    store._compactor.wait(SID)
    store.close()
    assert os.path.exists(index)
    with open(where / f"{SID}.jsonl", "rb") as f:
        size = os.fstat(f.fileno()).st_size
    loaded = _sidecar.load(str(where / f"{SID}.jsonl"), index, SID, lambda o, n: b"")
    assert loaded.from_index and loaded.index_current and loaded.covered == size
    again = FsStore(where)
    assert again.get_leaf(SID) == "e_2" and again.get_entry(SID, "e_2") == big
    assert again.get_entry(SID, "e_1")["revision"] == k
    again.close()


def test_an_eviction_while_the_removal_is_queued_keeps_its_index(tmp_path: Path, monkeypatch: Any) -> None:
    # Prevents: the queued removal unlinking the index an eviction just wrote for the new log
    # (the session then leaves close's saves: no index on disk at all after close).
    where = tmp_path / "d"
    held, store, k = _held_after_first_small_rewrite(where, monkeypatch)
    index = store._files.files(SID).index
    store.cache_bytes = 0
    store.commit("s_2", Commit(meta=meta("s_2")))  # evicts s_1 (its index saved)
    assert SID not in store._sessions
    assert os.path.exists(index)
    held.gate.set()
    assert store._compactor is not None
    store._compactor.wait(SID)
    store.close()
    assert os.path.exists(index)
    loaded = _sidecar.load(str(where / f"{SID}.jsonl"), index, SID, lambda o, n: b"")
    assert loaded.from_index and loaded.index_current
    again = FsStore(where)
    assert again.get_entry(SID, "e_1")["revision"] == k
    again.close()



def test_the_replaced_index_is_removed_once_per_run_of_small_rewrites(tmp_path: Path, monkeypatch: Any) -> None:
    # Prevents: every background rewrite of a small log queueing an unlink of an index already
    # removed by the previous one (files.saved was reset before "was there one?" was asked).
    where = tmp_path / "d"
    removed: list[str] = []
    real = _sidecar.remove_index
    monkeypatch.setattr(_sidecar, "remove_index", lambda path: (removed.append(path), real(path))[1])
    store = FsStore(where)
    _seed(store)
    index = store._files.files(SID).index
    k = 0
    while store.compactions < 4:
        k += 1
        store.commit(SID, _update(k))
        assert k < 10_000
    assert store._compactor is not None
    store._compactor.wait(SID)
    assert removed == [index] and not os.path.exists(index)
    store.close()
    assert os.path.exists(index)
