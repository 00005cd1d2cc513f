"""Readers decoding bodies while a compaction moves every line of the log.

A body is read at the offset the entry's arrays hold; a rewrite replaces the
file and the arrays under the session's lock. A reader that took the offset
just before the rewrite must not be answered ``session/storage`` (the
session is whole): it reads the entry's new line instead."""

from __future__ import annotations

import random
import threading
from pathlib import Path

from session_manager.store import Commit, FsStore
from session_manager.testing.contract import message, meta

SID = "s_1"
N = 400


def seeded(data: Path) -> list[str]:
    """A log where every entry was written twice: a rewrite moves each one's line."""
    store = FsStore(data)
    store.commit(SID, Commit(meta=meta(SID)))
    ids = [f"e_{i}" for i in range(N)]
    for rev in (0, 1):
        entries = tuple(message(eid, ids[i - 1] if i else None, f"m{i}-{rev}" * 4, revision=rev)
                        for i, eid in enumerate(ids))
        store.commit(SID, Commit(entries=entries, leaf=ids[-1], meta=meta(SID, message_count=N)))
    store.close()  # the index is current: the next open decodes no body until it is read
    return ids


def one_round(data: Path, seed: int) -> list[BaseException]:
    """Four readers decoding every body in their own order, one compaction, all started at once."""
    ids = seeded(data)
    store = FsStore(data)
    assert store.get_meta(SID) is not None
    start = threading.Barrier(5)
    errors: list[BaseException] = []

    def read(k: int) -> None:
        order = ids[:]
        random.Random(seed * 10 + k).shuffle(order)
        try:
            start.wait()
            for eid in order:
                entry = store.get_entry(SID, eid)
                assert entry is not None and entry["id"] == eid and entry["revision"] == 1
        except BaseException as e:
            errors.append(e)

    readers = [threading.Thread(target=read, args=(k,)) for k in range(4)]
    for t in readers:
        t.start()
    start.wait()
    assert store.compact(SID)
    for t in readers:
        t.join()
    store.close()
    return errors


def test_readers_racing_a_compaction_get_every_entry(tmp_path: Path) -> None:
    # Prevents: a read that took an entry's old offset just before a compaction swapped the log
    # preading the new file there and failing "log changed under its index" on a healthy session.
    for k in range(12):
        assert one_round(tmp_path / f"r{k}", k) == []


def test_a_reader_of_a_session_the_cache_dropped_reads_on_after_a_compaction(tmp_path: Path) -> None:
    # Prevents: a reader still iterating a path of a state another thread's eviction dropped
    # failing "log changed under its index" once a newer load of the session compacted its log.
    ids = seeded(tmp_path)
    store = FsStore(tmp_path, cache_bytes=1)  # every other session is dropped on each touch
    view = store.path(SID, ids[-1])  # handed out; no body decoded yet
    store.commit("s_2", Commit(meta=meta("s_2")))  # drops s_1
    assert store.compact(SID)  # a new load of s_1 rewrites the log under the old arrays
    assert [(e["id"], e["revision"]) for e in view] == [(eid, 1) for eid in ids]
    store.close()
