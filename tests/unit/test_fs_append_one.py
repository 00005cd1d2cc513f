"""The fs store's single-entry append (``FsStore._append_one``) does what the general commit
does: the same log bytes, state, log budget, index bookkeeping and cache charge, and every
case it does not take (a conflict, a stale meta, a batch, what orjson cannot encode) goes
the general way, which decides as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from session_manager.errors import Conflict
from session_manager.store import FsStore
from session_manager.store.base import Commit, append_commit
from session_manager.store.fs._records import encode_commit
from session_manager.testing.contract import message, meta

SID = "s-one"


def _custom(eid: str, parent: str | None, data: Any) -> dict[str, Any]:
    return {"kind": "custom", "id": eid, "parent_id": parent, "timestamp": 7, "revision": 0,
            "custom_type": "checkpoint", "data": data}


def _general(store: FsStore) -> list[str]:
    """``store`` with the single-entry path turned off (every commit the general way); the
    calls it would have taken, for the test to see it was offered them."""
    offered: list[str] = []

    def off(*args: Any) -> None:
        offered.append(args[5])
        return None  # as when orjson cannot encode: nothing written, the general way decides
    store._append_one = off  # type: ignore[method-assign, assignment]
    return offered


def _script(where: Path, reload: bool, general: bool) -> tuple[list[Commit], list[str]]:
    """The same appends, built on what the store holds: chained, on a named parent (a branch),
    with the data's JSON handed in, on a session loaded lazily from its log (``reload``); with
    ``general``, all the general way. The commits applied, and the ids the general store's
    single-entry path was offered."""
    store = FsStore(where)
    applied = [store.commit(SID, Commit(meta=meta(SID)))]
    if reload:
        store.close()
        store = FsStore(where)  # the session's entries held lazily from here on
    offered = _general(store) if general else []
    held = store.get_meta(SID)
    assert held is not None
    applied.append(store.commit(SID, append_commit(held, (message("e1", None, "one"),), chain=True)))
    data = {"v": [1, 2.5, "x" * 40], "n": None}
    for eid, parent, chain, json in (("e2", "e1", True, None), ("e3", "e1", False, orjson.dumps(data)),
                                     ("e4", "e3", True, orjson.dumps(data))):
        held = store.get_meta(SID)
        assert held is not None
        applied.append(store.commit(SID, append_commit(held, (_custom(eid, parent, data),), chain=chain,
                                                       data_json=json)))
    held = store.get_meta(SID)
    assert held is not None
    applied.append(store.commit(SID, append_commit(held, (message("e5", "e4", "five"),), chain=False,
                                                   expect_meta=held)))
    state: Any = store._current_state(SID)
    try:
        applied.append(_look(store, state))
    finally:
        state.lock.release()
    store.close()
    return applied, offered


def _look(store: FsStore, state: Any) -> Any:
    """What the commits left besides the log: state, budget, the index's coverage, the cache."""
    budget = store._d.budgets[SID]
    entries = state.entries
    return Commit(entries=tuple(dict(entries[eid]) for eid in sorted(entries)), leaf=state.leaf, meta=state.meta,
                  tx=None, expect_revisions=((type(entries).__name__, state.writes),
                                             ("budget", budget.disk), ("live", budget.live), ("meta", budget.meta),
                                             ("sizes", sum(budget.entries.get(e, 0) for e in entries)),
                                             ("covered", store._d.files.files(SID).covered),
                                             ("charged", store._d.sessions._charges[SID]),
                                             ("total", store._d.sessions.total)))


@pytest.mark.parametrize("reload", [False, True], ids=["held-as-dict", "loaded-lazily"])
def test_single_entry_appends_write_and_account_as_the_general_commit(tmp_path: Path, reload: bool) -> None:
    # Prevents: the single-entry path drifting from the general one (other bytes in the log, a
    # budget, leaf, meta, version, index coverage or cache charge the general commit would not leave).
    fast, taken = _script(tmp_path / "fast", reload, general=False)
    general, offered = _script(tmp_path / "general", reload, general=True)
    assert fast == general and not taken
    assert offered == ["e1", "e2", "e3", "e4", "e5"]  # each was the single-entry path's to take
    log = "s-one.jsonl"
    assert (tmp_path / "fast" / log).read_bytes() == (tmp_path / "general" / log).read_bytes()
    # The append lines are encode_commit's (the reference's format), one line per append.
    lines = (tmp_path / "fast" / log).read_bytes().splitlines(keepends=True)
    reopened = FsStore(tmp_path / "fast")
    try:
        last = reopened.get_meta(SID)
        assert last is not None and last["message_count"] == 2 and reopened.get_leaf(SID) == "e5"
        e5 = reopened.get_entry(SID, "e5")
        assert e5 is not None
        assert lines[-1] == encode_commit(Commit(entries=(e5,), leaf="e5", meta=last))
    finally:
        reopened.close()


def _seeded(tmp_path: Path) -> FsStore:
    store = FsStore(tmp_path / "data")
    store.commit(SID, Commit(meta=meta(SID)))
    held = store.get_meta(SID)
    assert held is not None
    store.commit(SID, append_commit(held, (message("e1", None),), chain=True))
    return store


def test_appends_it_does_not_take_are_decided_as_before(tmp_path: Path) -> None:
    # Prevents: the path taking a commit resolve() would refuse or change: a stored id, a gone
    # named parent, a stale meta (re-derived, re-chained), an expectation of another meta.
    store = _seeded(tmp_path)
    size = store.file_path(SID).stat().st_size
    held = store.get_meta(SID)
    assert held is not None
    with pytest.raises(Conflict, match="entry e1 already exists"):
        store.commit(SID, append_commit(held, (message("e1", None),), chain=True))
    with pytest.raises(Conflict, match="parent entry gone is no longer in the session"):
        store.commit(SID, append_commit(held, (message("e2", "gone"),), chain=False))
    with pytest.raises(Conflict, match="the session meta changed"):
        store.commit(SID, append_commit(held, (message("e2", "e1"),), chain=False, expect_meta=dict(held, x=1)))
    assert store.file_path(SID).stat().st_size == size  # nothing written by any of them
    # Decided on a meta since replaced, onto a leaf since moved: chained onto the current leaf.
    store.commit(SID, append_commit(held, (message("e2", "e1"),), chain=True))
    applied = store.commit(SID, append_commit(held, (message("e3", "e1"),), chain=True))
    assert applied.entries[0]["parent_id"] == "e2" and applied.meta is not None
    assert applied.meta["message_count"] == 3
    assert store.get_leaf(SID) == "e3" and store.get_meta(SID) == applied.meta
    store.close()


def test_what_orjson_cannot_encode_is_written_the_general_way(tmp_path: Path) -> None:
    # Prevents: an integer past 64 bits failing (or written otherwise) on the single-entry path:
    # encode_commit writes it exactly, as before.
    store = _seeded(tmp_path)
    held = store.get_meta(SID)
    assert held is not None
    big = 2**70
    store.commit(SID, append_commit(held, (_custom("e2", "e1", {"n": big}),), chain=True))
    store.close()
    reopened = FsStore(tmp_path / "data")
    try:
        got = reopened.get_entry(SID, "e2")
        assert got is not None and got["data"] == {"n": big} and reopened.get_leaf(SID) == "e2"
        assert reopened.file_path(SID).read_bytes().endswith(b'"data":{"n":1180591620717411303424}}' + b',"meta":'
                                                             + orjson.dumps(reopened.get_meta(SID)) + b"}\n")
    finally:
        reopened.close()
