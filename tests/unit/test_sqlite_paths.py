"""Paths over the sqlite adapter's jump pointers: every window of a long chain
with branches, read in any order, is the chain the memory store gives."""

from __future__ import annotations

import random
from pathlib import Path

from session_manager.store import Commit
from session_manager.store.memory import MemoryStore
from session_manager.store.sqlite import SqliteSettings, SqliteStore
from tests.unit.store_contract import message, meta


def test_long_branching_paths_read_in_any_order_match_the_memory_store(tmp_path: Path) -> None:
    # Prevents: a wrong depth or jump pointer (one statement now links an entry from its parent
    # and the parent's jump target) that shows only deep in a long session, or on a branch.
    lite = SqliteStore(SqliteSettings(path=str(tmp_path / "p.db")))
    plain = MemoryStore()
    rng = random.Random(7)
    ids: list[str] = []
    try:
        for store in (lite, plain):
            store.commit("s", Commit(meta=meta("s")))
        for i in range(1500):
            # Mostly the last entry, sometimes an earlier one (a branch), in batches of up to 7.
            parent = ids[-1] if ids and rng.random() > 0.05 else (rng.choice(ids) if ids else None)
            batch = []
            for j in range(rng.randint(1, 7)):
                entry = message(f"e{i}-{j}", parent)
                batch.append(entry)
                parent = entry["id"]
            ids += [e["id"] for e in batch]
            for store in (lite, plain):
                store.commit("s", Commit(entries=tuple(batch), leaf=parent))
        for leaf in [ids[-1], *rng.sample(ids, 20)]:
            want = [e["id"] for e in plain.path("s", leaf)]
            got = lite.path("s", leaf)
            assert len(got) == len(want)
            order = list(range(len(want)))
            rng.shuffle(order)
            for index in order[:200]:
                assert got[index]["id"] == want[index]
                assert got.index_of(want[index]) == index
            assert [e["id"] for e in got] == want
    finally:
        lite.close()
