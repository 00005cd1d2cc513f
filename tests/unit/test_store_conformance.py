"""The storage contract over the fs and memory adapters, then fs-only guarantees.

The contract itself is :class:`session_manager.testing.StoreContract`
(the bridge adapter runs it in ``test_bridge.py``); fs-only guarantees
(reading back after a restart, listing without replay) follow.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from session_manager.store import Commit, FsStore, MemoryStore, SessionStore
from session_manager.testing import StoreContract
from session_manager.testing.contract import append, attachment, custom, message, meta, path_ids


class TestFsStore(StoreContract):
    def open_store(self, tmp_path: Path) -> Iterator[SessionStore]:
        store = FsStore(tmp_path / "data")
        yield store
        store.close()

    def reopened(self, tmp_path: Path) -> list[SessionStore]:
        # Read-only: the open store still owns the directory (one writer per data_dir).
        return [FsStore(tmp_path / "data", read_only=True)]


class TestMemoryStore(StoreContract):
    def open_store(self, tmp_path: Path) -> Iterator[SessionStore]:
        yield MemoryStore()


# -- fs only ------------------------------------------------------------------------------


@pytest.fixture
def fs(tmp_path: Path) -> FsStore:
    return FsStore(tmp_path / "data")


def populate(store: SessionStore) -> None:
    """Two sessions with branches, a rewrite, a moved leaf and an attachment."""
    store.commit("s_1", Commit(meta=meta("s_1", title="durable", metadata={"owner": "u_1"})))
    append(store, "s_1", message("e_1", None, "one"), 1)
    append(store, "s_1", message("e_2", "e_1", "two"), 2)
    store.commit("s_1", Commit(entries=(message("e_2", "e_1", "two!", revision=1),),
                               meta=meta("s_1", message_count=2, title="durable", metadata={"owner": "u_1"})))
    store.commit("s_1", Commit(leaf="e_1"))
    store.commit("s_1", Commit(entries=(message("e_3", "e_1", "three"), custom("e_4", "e_3")), leaf="e_4",
                               meta=meta("s_1", message_count=3, title="durable", metadata={"owner": "u_1"})))
    store.put_attachment(attachment("s_1", "a_1", 3), [b"a", b"bc"])
    store.commit("../odd id", Commit(meta=meta("../odd id", status="done", status_reason="ok")))


def snapshot(store: SessionStore) -> dict[str, Any]:
    """Everything a store answers about the populated sessions."""
    out: dict[str, Any] = {"list": sorted(store.list_metas(), key=lambda m: m["session_id"])}
    for sid in ("s_1", "../odd id"):
        out[sid] = {
            "meta": store.get_meta(sid),
            "leaf": store.get_leaf(sid),
            "entries": sorted(store.entries(sid), key=lambda e: e["id"]),
            "path": path_ids(store, sid, store.get_leaf(sid)),
            "attachments": store.list_attachments(sid),
            "bytes": store.read_attachment(sid, "a_1"),
        }
    return out


def test_fresh_fs_store_reads_everything_back(tmp_path: Path) -> None:
    # Prevents: any part of the state living only in memory (lost on restart).
    first = FsStore(tmp_path / "data")
    populate(first)
    before = snapshot(first)
    first.close()
    again = FsStore(tmp_path / "data")
    assert snapshot(again) == before
    assert before["s_1"]["path"] == ["e_1", "e_3", "e_4"]
    assert before["s_1"]["meta"]["message_count"] == 3
    # Replay state matches what a memory store built from the same commits holds.
    reference = MemoryStore()
    populate(reference)
    assert snapshot(reference) == before


def test_fresh_fs_store_lists_from_disk(tmp_path: Path) -> None:
    # Prevents: a restarted worker's list being empty until each session is touched.
    first = FsStore(tmp_path / "data")
    populate(first)
    expected = sorted(first.list_metas(), key=lambda m: m["session_id"])
    first.close()
    again = FsStore(tmp_path / "data")
    assert sorted(again.list_metas(), key=lambda m: m["session_id"]) == expected


def test_list_metas_does_not_replay_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: session::list over many sessions parsing every transcript.
    populate(FsStore(tmp_path / "data"))
    again = FsStore(tmp_path / "data")
    replays: list[str] = []
    real = FsStore._replay

    def counting(self: FsStore, session_id: str, state: Any) -> None:
        replays.append(session_id)
        real(self, session_id, state)

    monkeypatch.setattr(FsStore, "_replay", counting)
    metas = {m["session_id"]: m for m in again.list_metas()}
    assert replays == []
    assert metas["s_1"]["title"] == "durable"
    assert metas["s_1"]["message_count"] == 3  # the last meta, carried by an append line
    assert metas["../odd id"]["status"] == "done"


def test_listing_cache_follows_later_commits(fs: FsStore) -> None:
    # Prevents: a warm listing cache missing sessions created, changed or deleted after it.
    populate(fs)
    fs.list_metas()
    fs.commit("s_new", Commit(meta=meta("s_new")))
    fs.commit("s_1", Commit(meta=meta("s_1", title="renamed", message_count=3)))
    fs.delete_session("../odd id")
    metas = {m["session_id"]: m for m in fs.list_metas()}
    assert sorted(metas) == ["s_1", "s_new"]
    assert metas["s_1"]["title"] == "renamed"


def test_files_stay_inside_data_dir(fs: FsStore, tmp_path: Path) -> None:
    # Prevents: a caller-chosen id naming a path outside data_dir (path traversal).
    populate(fs)
    fs.put_attachment(attachment("../odd id", "../../x", 1), [b"x"])
    data = (tmp_path / "data").resolve()
    files = sorted(p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file())
    # The index sidecars (one per session, named by the same encoding) sit in .index/.
    assert [f for f in files if f.startswith(".index/")] == [".index/..%2Fodd%20id.idx", ".index/s_1.idx"]
    files = [f for f in files if not f.startswith(".index/")]
    assert files == [
        "..%2Fodd%20id.jsonl",
        ".session-manager.lock",
        "attachments/..%2Fodd%20id/..%2F..%2Fx.bin",
        "attachments/..%2Fodd%20id/..%2F..%2Fx.json",
        "attachments/s_1/a_1.bin",
        "attachments/s_1/a_1.json",
        "s_1.jsonl",
    ]
    assert [p for p in tmp_path.iterdir()] == [tmp_path / "data"]


def test_undecodable_file_names_are_ignored(fs: FsStore, tmp_path: Path) -> None:
    # Prevents: a stray file in data_dir breaking session::list.
    populate(fs)
    data = tmp_path / "data"
    (data / "%ZZ.jsonl").write_bytes(b"")
    (data / "notes.txt").write_bytes(b"x")
    (data / "empty.jsonl").write_bytes(b"")
    fs.close()
    assert sorted(m["session_id"] for m in FsStore(data).list_metas()) == ["../odd id", "s_1"]


def test_store_creates_missing_data_dir(tmp_path: Path) -> None:
    # Prevents: a first start on a fresh machine failing for want of the directory.
    target = tmp_path / "a" / "b"
    FsStore(target).commit("s_1", Commit(meta=meta("s_1")))
    assert sorted(os.listdir(target)) == [".index", ".session-manager.lock", "s_1.jsonl"]
