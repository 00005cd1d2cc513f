"""The bookkeeping an fs commit does in one step on its common path (an append on a
loaded session) matches what the general steps it replaces would have recorded:
entry locations, the cache's charges, the catalog's order, and what a reopen reads."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from session_manager.store import Commit, FsStore
from session_manager.store.fs._cache import footprint
from session_manager.store.fs._catalog import MetaCatalog
from session_manager.store.fs._lazy import LazyEntries
from session_manager.testing.contract import message, meta
from tests.unit.index_views import oracle, view


def _no_read(offset: int, length: int) -> bytes:
    raise AssertionError("no body is read back here: every body put stays decoded")


def _summary(entries: LazyEntries) -> dict[str, Any]:
    ids = list(entries)
    return {"ids": ids, "parents": [entries.parent_of(i) for i in ids], "at": [entries.location(i) for i in ids],
            "bodies": [entries[i] for i in ids], "body_bytes": entries.body_bytes, "footprint": entries.footprint(),
            "located": entries.fully_located(), "live": entries.live_bytes(), "linear": entries.linear(),
            "path": entries.walk(ids[-1]) if ids else []}


def test_putting_a_written_entry_in_one_step_records_what_put_then_note_did() -> None:
    # Prevents: the one-step put of a just-written entry (every append) recording another location, parent
    # link, body charge or located count than setting it and then noting its line (what an index then saves).
    ops: list[tuple[dict[str, Any], int, int]] = [
        (message("a", None), 0, 90),
        (message("b", "a"), 91, 95),
        (message("d", "c"), 187, 80),  # an orphan: its parent comes later
        (message("c", "b"), 268, 70),
        (message("b", "a", "edited", revision=1), 339, 99),  # a new revision of an existing entry
        (message("e", "a"), 439, 60),  # a branch
    ]
    one_step, two_steps = LazyEntries("s_1", _no_read), LazyEntries("s_1", _no_read)
    for entry, offset, length in ops:
        one_step.put_written(entry, offset, length)
        two_steps[entry["id"]] = entry
        two_steps.note_location(entry["id"], offset, length)
        assert _summary(one_step) == _summary(two_steps)
    assert one_step.location("b") == (339, 99) and one_step["b"]["revision"] == 1
    assert one_step.parent_of("d") == "c" and one_step.fully_located()


@pytest.mark.parametrize("close", [True, False])
def test_appends_and_a_rewrite_read_back_as_the_log_says_after_a_reopen(tmp_path: Path, close: bool) -> None:
    # Prevents: an entry located at the wrong line by the one-step put (a reopen through the index, or a
    # body read back after the cache dropped it, would decode another line or fail), with or without
    # the index the close writes.
    where = tmp_path / "d"
    store = FsStore(where)
    store.commit("s_1", Commit(meta=meta("s_1"), expect_meta=None))
    parent = None
    for i in range(30):
        eid = f"e_{i}"
        current = store.get_meta("s_1")
        assert current is not None
        store.commit("s_1", Commit(entries=(message(eid, parent, f"m{i}" * (i + 1)),), leaf=eid,
                                   meta={**current, "message_count": i + 1}, append=True, chain=True))
        parent = eid
    batch = (message("f_0", parent, "x"), message("f_1", "f_0", "y"))
    store.commit("s_1", Commit(entries=batch, leaf="f_1", meta=meta("s_1", message_count=32)))
    store.commit("s_1", Commit(entries=(message("e_3", "e_2", "rewritten", revision=1),), leaf="f_1",
                               meta=meta("s_1", message_count=32, updated_at=2)))
    before = view(store, "s_1")
    assert before == oracle(where / "s_1.jsonl", "s_1")
    assert before["entries"]["e_3"]["message"]["content"][0]["text"] == "rewritten"
    if close:
        store.close()
    else:  # a crash: the files as they are now, no index written at close
        shutil.copytree(where, tmp_path / "crashed", ignore=shutil.ignore_patterns(".session-manager.lock"))
        store.close()
        where = tmp_path / "crashed"
    reopened = FsStore(where)
    assert view(reopened, "s_1") == before
    reopened.close()


def test_a_commit_charges_what_the_reads_before_it_decoded(tmp_path: Path) -> None:
    # Prevents: the commit's direct charge of the session it wrote skipping the sessions read since the
    # last charge (their decoded bodies never counted: the cache budget would not bound memory).
    store = FsStore(tmp_path)
    for sid in ("s_a", "s_b"):
        store.commit(sid, Commit(meta=meta(sid)))
        store.commit(sid, Commit(entries=(message(f"{sid}-0", None, "z" * 500),), leaf=f"{sid}-0",
                                 meta=meta(sid, message_count=1)))
    store.close()
    store = FsStore(tmp_path)  # bodies are read from the log on demand from here on
    assert store.get_meta("s_b") is not None  # loaded before: the commit below touches nothing
    assert store.get_entry("s_a", "s_a-0") is not None  # decodes s_a's body (charged at the next touch or commit)
    state_a = store._sessions["s_a"]
    store.commit("s_b", Commit(entries=(message("s_b-1", "s_b-0"),), leaf="s_b-1",
                               meta=meta("s_b", message_count=2)))
    cache = store._sessions
    assert cache._charges["s_a"] == footprint(state_a)  # settled by the commit on s_b
    assert cache._charges["s_b"] == footprint(cache["s_b"])  # the body just written counts
    assert cache.total == sum(footprint(s) for s in cache.values())
    assert state_a.entries.body_bytes > 0  # (the read did decode, so the first check had something to see)
    store.close()


def test_the_session_written_last_written_again_keeps_the_list_order(tmp_path: Path) -> None:
    # Prevents: the in-place move of the last key (the usual update: the session just written) leaving
    # the order unsorted when the new key is not the largest, or a stale key behind.
    catalog = MetaCatalog([meta("s_a", updated_at=1), meta("s_b", updated_at=2)])
    catalog.put(meta("s_b", updated_at=3))  # still last: moved in place
    catalog.put(meta("s_b", updated_at=0))  # now first
    catalog.put(meta("s_a", updated_at=5))
    catalog.put(meta("s_a", updated_at=4))
    order = [m["session_id"] for m in catalog.ordered("updated_desc", None)]
    assert order == ["s_a", "s_b"]
    assert [m["updated_at"] for m in catalog.ordered("updated_desc", None)] == [4, 0]
    assert catalog._sorted["updated_at"] == [(0, "s_b"), (4, "s_a")]
    assert [m["session_id"] for m in catalog.ordered("updated_desc", (4, "s_a"))] == ["s_b"]
