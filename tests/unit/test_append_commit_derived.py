"""An append's meta is derived once (base.append_commit); resolve re-derives it
only when the session's meta is no longer the object the decision read."""

from __future__ import annotations

from pathlib import Path

import pytest

from session_manager.store import FsStore, MemoryStore
from session_manager.store._core.cas import derive_append_meta
from session_manager.store.base import Commit, SessionStore, append_commit

SID = "s-derived"
META = {"session_id": SID, "title": "t", "description": "", "status": "idle", "created_at": 1,
        "updated_at": 1, "message_count": 0}


def _entry(eid: str, parent: str | None, ts: int) -> dict[str, object]:
    return {"kind": "message", "id": eid, "parent_id": parent, "timestamp": ts, "revision": 0,
            "message": {"role": "user", "content": [{"type": "text", "text": eid}]}}


@pytest.fixture(params=["memory", "fs"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SessionStore:
    s: SessionStore = MemoryStore() if request.param == "memory" else FsStore(tmp_path / "data")
    s.commit(SID, Commit(meta=dict(META)))
    return s


def test_two_appends_decided_on_one_meta_both_count(store: SessionStore) -> None:
    # Prevents: the derived-once shortcut trusting a stale meta (the second append, decided on the
    # meta the first one replaced, must be re-derived: count 2, chained on the first, not forked).
    read = store.get_meta(SID)
    assert read is not None
    first = store.commit(SID, append_commit(read, (_entry("e1", None, 10),), chain=True))
    # Built on the leaf it will chain to, so nothing but the stale meta tells the commits apart.
    second = store.commit(SID, append_commit(read, (_entry("e2", "e1", 20),), chain=True))
    assert first.meta is not None and first.meta["message_count"] == 1
    assert second.meta == derive_append_meta(first.meta, second.entries)
    assert second.meta is not None and second.meta["message_count"] == 2 and second.meta["updated_at"] == 20
    assert second.entries[0]["parent_id"] == "e1"
    assert store.get_meta(SID) == second.meta and store.get_leaf(SID) == "e2"


def test_an_append_decided_on_the_current_meta_is_applied_as_built(store: SessionStore) -> None:
    # Prevents: the shortcut changing what is written (the commit applied is the one built, its
    # meta exactly the derivation).
    read = store.get_meta(SID)
    assert read is not None
    built = append_commit(read, (_entry("e1", None, 10),), chain=True)
    applied = store.commit(SID, built)
    assert applied.meta == derive_append_meta(read, built.entries)
    assert applied.entries == built.entries and applied.leaf == "e1"
    assert store.get_meta(SID) == applied.meta


def test_fs_append_reads_back_after_a_restart(tmp_path: Path) -> None:
    # Prevents: a meta skipped by the shortcut missing from the log (a reopened store must read
    # the derived meta, count and leaf).
    store = FsStore(tmp_path / "data")
    store.commit(SID, Commit(meta=dict(META)))
    for i, ts in enumerate((10, 20, 30)):
        read = store.get_meta(SID)
        assert read is not None
        store.commit(SID, append_commit(read, (_entry(f"e{i}", store.get_leaf(SID), ts),), chain=True))
    expected = store.get_meta(SID)
    store.close()
    again = FsStore(tmp_path / "data")
    try:
        assert again.get_meta(SID) == expected
        assert expected is not None and expected["message_count"] == 3 and expected["updated_at"] == 30
        assert again.get_leaf(SID) == "e2"
    finally:
        again.close()


def test_an_append_given_another_parent_keeps_every_field_and_its_derivation() -> None:
    # Prevents: resolve's field-by-field rebuild (no dataclasses.replace) dropping a field a
    # commit carries, or the meta derived once being shared with the commit as decided (a
    # store fills the resolved commit's meta in: postgres sets its count from the server's).
    from dataclasses import fields

    from session_manager.store._core.cas import resolve

    read = dict(META)
    built = append_commit(read, (_entry("e2", "e0", 20),), chain=True, tx=lambda: "t", data_json=b"{}")
    resolved = resolve(built, read, "e1", lambda eid: None)
    assert resolved.entries[0]["parent_id"] == "e1" and built.entries[0]["parent_id"] == "e0"
    assert resolved.meta == derive_append_meta(read, resolved.entries) == built.meta
    assert resolved.meta is not built.meta and resolved.derived_from is read
    changed = {"entries", "meta"}
    for f in fields(Commit):
        if f.name not in changed:
            assert getattr(resolved, f.name) == getattr(built, f.name), f.name
    # Decided on another meta object: derived again from the one read now.
    newer = {**META, "message_count": 5}
    again = resolve(built, newer, "e1", lambda eid: None)
    assert again.meta == derive_append_meta(newer, again.entries) and again.meta["message_count"] == 6
