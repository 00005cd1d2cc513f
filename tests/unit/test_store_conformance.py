"""One behaviour suite every storage adapter passes.

Each test runs against every adapter of :class:`SessionStore` (the fs store
over a temp dir, the memory store), so the domain service can rely on one
contract whatever the storage. fs-only guarantees (reading back after a
restart, listing without replay) follow at the end.

The builders at the top produce the exact dicts the domain service hands a
store; the durability tests import them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from session_manager.store import Commit, FsStore, MemoryStore, SessionStore

T0 = 1_000_000

# -- builders ------------------------------------------------------------------


def meta(session_id: str, *, message_count: int = 0, updated_at: int = T0, **extra: Any) -> dict[str, Any]:
    """A session meta as create/ensure would store it, plus ``extra`` fields."""
    out: dict[str, Any] = {"session_id": session_id, "title": "", "description": "", "status": "idle"}
    out.update(extra)
    out.update(created_at=T0, updated_at=updated_at, message_count=message_count)
    return out


def message(entry_id: str, parent_id: str | None, text: str = "hi", *, revision: int = 0) -> dict[str, Any]:
    """A stored user-message entry holding one text block."""
    return {
        "kind": "message",
        "id": entry_id,
        "parent_id": parent_id,
        "timestamp": T0,
        "revision": revision,
        "message": {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1},
    }


def custom(entry_id: str, parent_id: str | None, data: Any = None) -> dict[str, Any]:
    """A stored custom (non-message) entry."""
    return {
        "kind": "custom",
        "id": entry_id,
        "parent_id": parent_id,
        "timestamp": T0,
        "revision": 0,
        "custom_type": "note",
        "data": data,
    }


def attachment(session_id: str, attachment_id: str, size: int = 0) -> dict[str, Any]:
    """Attachment metadata as put-attachment hands it over (hash filled in by the chunks)."""
    return {
        "attachment_id": attachment_id,
        "session_id": session_id,
        "name": "notes.txt",
        "mime": "text/plain",
        "size": size,
        "sha256": "",
        "created_at": T0,
    }


def append(store: SessionStore, session_id: str, entry: dict[str, Any], count: int) -> None:
    """What session::append commits: the entry, the leaf on it, the meta."""
    store.commit(session_id, Commit(entries=(entry,), leaf=entry["id"], meta=meta(session_id, message_count=count)))


def path_ids(store: SessionStore, session_id: str, leaf: str | None) -> list[str]:
    return [e["id"] for e in store.path(session_id, leaf)]


# -- fixtures --------------------------------------------------------------------

ADAPTERS = ["fs", "memory"]


@pytest.fixture(params=ADAPTERS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    made: SessionStore = FsStore(tmp_path / "data") if request.param == "fs" else MemoryStore()
    yield made
    made.close()


@pytest.fixture
def three(store: SessionStore) -> SessionStore:
    """Session s_1 with the chain e_1 <- e_2 <- e_3, leaf e_3, 3 messages."""
    store.commit("s_1", Commit(meta=meta("s_1")))
    parent = None
    for n in (1, 2, 3):
        append(store, "s_1", message(f"e_{n}", parent, f"m{n}"), n)
        parent = f"e_{n}"
    return store


# -- sessions and entries ------------------------------------------------------------


def test_unknown_session_reads_as_absent(store: SessionStore) -> None:
    # Prevents: a read of an unknown id raising, or creating the session as a side effect.
    assert store.get_meta("nope") is None
    assert store.get_entry("nope", "e_1") is None
    assert store.get_leaf("nope") is None
    assert store.entries("nope") == []
    assert len(store.path("nope", None)) == 0
    assert len(store.path("nope", "e_1")) == 0
    assert store.list_metas() == []


def test_meta_only_commit_creates_the_session(store: SessionStore) -> None:
    # Prevents: create (a meta-only commit) not being visible, or inventing a leaf.
    m = meta("s_1", title="T", metadata={"owner": "u_1"})
    store.commit("s_1", Commit(meta=m))
    assert store.get_meta("s_1") == m
    assert store.get_leaf("s_1") is None
    assert store.entries("s_1") == []
    assert store.list_metas() == [m]


def test_append_commit_stores_entry_leaf_and_meta(three: SessionStore) -> None:
    # Prevents: one of the three parts of an append commit going missing.
    assert three.get_leaf("s_1") == "e_3"
    assert three.get_meta("s_1") == meta("s_1", message_count=3)
    assert three.get_entry("s_1", "e_2") == message("e_2", "e_1", "m2")
    assert sorted(e["id"] for e in three.entries("s_1")) == ["e_1", "e_2", "e_3"]
    assert path_ids(three, "s_1", "e_3") == ["e_1", "e_2", "e_3"]


def test_multi_entry_commit_chains_in_one_mutation(store: SessionStore) -> None:
    # Prevents: append-many / fork commits losing entries or leaving the leaf behind.
    store.commit("s_1", Commit(meta=meta("s_1")))
    batch = (message("e_1", None), custom("e_2", "e_1", {"k": [1, 2]}), message("e_3", "e_2"))
    store.commit("s_1", Commit(entries=batch, leaf="e_3", meta=meta("s_1", message_count=2)))
    assert store.get_leaf("s_1") == "e_3"
    assert store.get_meta("s_1") == meta("s_1", message_count=2)
    assert [store.get_entry("s_1", e["id"]) for e in batch] == list(batch)
    assert path_ids(store, "s_1", "e_3") == ["e_1", "e_2", "e_3"]


def test_path_to_any_entry_and_to_nothing(three: SessionStore) -> None:
    # Prevents: path() ignoring its leaf argument and always answering the active path.
    assert path_ids(three, "s_1", "e_2") == ["e_1", "e_2"]
    assert path_ids(three, "s_1", "e_1") == ["e_1"]
    assert path_ids(three, "s_1", None) == []
    assert path_ids(three, "s_1", "e_404") == []
    # Asking for a shorter path must not truncate the cached active one.
    assert path_ids(three, "s_1", "e_3") == ["e_1", "e_2", "e_3"]


def test_entry_rewrite_is_last_wins(three: SessionStore) -> None:
    # Prevents: an update-message revision being lost or duplicated on read.
    edited = message("e_2", "e_1", "edited", revision=1)
    three.commit("s_1", Commit(entries=(edited,), meta=meta("s_1", message_count=3, updated_at=T0 + 5)))
    assert three.get_entry("s_1", "e_2") == edited
    assert [e for e in three.entries("s_1") if e["id"] == "e_2"] == [edited]
    assert [e["message"]["content"][0]["text"] for e in three.path("s_1", "e_3")] == ["m1", "edited", "m3"]
    assert three.get_leaf("s_1") == "e_3"
    assert three.get_meta("s_1") == meta("s_1", message_count=3, updated_at=T0 + 5)


def test_meta_rewrite_is_last_wins(three: SessionStore) -> None:
    # Prevents: list or get returning an older meta after set-meta / set-status.
    for n in range(3):
        three.commit("s_1", Commit(meta=meta("s_1", message_count=3, title=f"t{n}")))
    assert three.get_meta("s_1") == meta("s_1", message_count=3, title="t2")
    assert three.list_metas() == [meta("s_1", message_count=3, title="t2")]


def test_path_follows_a_branch_switch(three: SessionStore) -> None:
    # Prevents: a stale cached path after set-active-leaf, or a new branch not chaining from the new leaf.
    three.commit("s_1", Commit(leaf="e_1"))
    assert three.get_leaf("s_1") == "e_1"
    assert path_ids(three, "s_1", "e_1") == ["e_1"]
    append(three, "s_1", message("e_4", "e_1"), 4)
    assert path_ids(three, "s_1", three.get_leaf("s_1")) == ["e_1", "e_4"]
    # The abandoned branch stays whole and readable.
    assert path_ids(three, "s_1", "e_3") == ["e_1", "e_2", "e_3"]
    assert sorted(e["id"] for e in three.entries("s_1")) == ["e_1", "e_2", "e_3", "e_4"]
    three.commit("s_1", Commit(leaf="e_3"))
    assert path_ids(three, "s_1", three.get_leaf("s_1")) == ["e_1", "e_2", "e_3"]


def test_leaf_may_be_a_custom_entry(store: SessionStore) -> None:
    # Prevents: custom entries being treated as second-class path members.
    store.commit("s_1", Commit(meta=meta("s_1")))
    append(store, "s_1", message("e_1", None), 1)
    append(store, "s_1", custom("e_2", "e_1"), 1)
    assert store.get_leaf("s_1") == "e_2"
    assert path_ids(store, "s_1", "e_2") == ["e_1", "e_2"]


def test_sessions_are_independent(three: SessionStore) -> None:
    # Prevents: entries or leaves keyed by entry id alone leaking across sessions.
    three.commit("s_2", Commit(meta=meta("s_2")))
    append(three, "s_2", message("e_1", None, "other"), 1)
    assert three.get_entry("s_1", "e_1") == message("e_1", None, "m1")
    assert three.get_entry("s_2", "e_1") == message("e_1", None, "other")
    assert three.get_leaf("s_1") == "e_3"
    assert three.get_leaf("s_2") == "e_1"
    assert sorted(m["session_id"] for m in three.list_metas()) == ["s_1", "s_2"]


def test_delete_session_removes_everything(three: SessionStore) -> None:
    # Prevents: a deleted session's entries, leaf or attachments resurfacing.
    three.put_attachment(attachment("s_1", "a_1", 3), [b"abc"])
    three.commit("s_2", Commit(meta=meta("s_2")))
    three.delete_session("s_1")
    assert three.get_meta("s_1") is None
    assert three.get_entry("s_1", "e_1") is None
    assert three.get_leaf("s_1") is None
    assert three.entries("s_1") == []
    assert path_ids(three, "s_1", "e_3") == []
    assert three.list_attachments("s_1") == []
    assert three.get_attachment_meta("s_1", "a_1") is None
    assert three.read_attachment("s_1", "a_1") is None
    assert [m["session_id"] for m in three.list_metas()] == ["s_2"]
    assert three.get_meta("s_2") == meta("s_2")


def test_recreated_session_starts_empty(three: SessionStore) -> None:
    # Prevents: ensure-after-delete resurrecting the old leaf or entries.
    three.list_metas()  # warm any listing cache before the delete
    three.delete_session("s_1")
    three.commit("s_1", Commit(meta=meta("s_1", title="again")))
    assert three.get_meta("s_1") == meta("s_1", title="again")
    assert three.get_leaf("s_1") is None
    assert three.entries("s_1") == []
    assert three.list_metas() == [meta("s_1", title="again")]


def test_delete_unknown_session_is_harmless(three: SessionStore) -> None:
    # Prevents: delete of a missing session raising, or touching another session.
    three.delete_session("nope")
    assert three.get_meta("nope") is None
    assert three.get_leaf("s_1") == "e_3"
    assert [m["session_id"] for m in three.list_metas()] == ["s_1"]


def test_hostile_session_ids_are_ordinary_keys(store: SessionStore) -> None:
    # Prevents: ids with separators, dots or non-ASCII being mangled or colliding.
    ids = ["../escape/chat 42:?", "..", "a/b", "a%2Fb", "ünï cødé", "\\x\x00y"]
    for n, sid in enumerate(ids):
        store.commit(sid, Commit(meta=meta(sid)))
        store.commit(sid, Commit(entries=(message("e_1", None, sid),), leaf="e_1",
                                 meta=meta(sid, message_count=1, title=str(n))))
    for n, sid in enumerate(ids):
        assert store.get_meta(sid) == meta(sid, message_count=1, title=str(n))
        assert store.get_entry(sid, "e_1") == message("e_1", None, sid)
    assert sorted(m["session_id"] for m in store.list_metas()) == sorted(ids)


# -- attachments ----------------------------------------------------------------------


def chunks_then_hash(target: dict[str, Any], parts: list[bytes]) -> Iterator[bytes]:
    """Yield ``parts``, then complete ``target`` the way put-attachment fills in the hash."""
    yield from parts
    target["sha256"] = "done"


def test_attachment_round_trip(three: SessionStore) -> None:
    # Prevents: chunked bytes being truncated or reordered, or metadata not read back.
    a = attachment("s_1", "a_1", 9)
    three.put_attachment(a, chunks_then_hash(a, [b"abc", b"", b"def", b"ghi"]))
    assert three.read_attachment("s_1", "a_1") == b"abcdefghi"
    assert three.get_attachment_meta("s_1", "a_1") == {**attachment("s_1", "a_1", 9), "sha256": "done"}
    assert three.list_attachments("s_1") == [{**attachment("s_1", "a_1", 9), "sha256": "done"}]


def test_attachment_meta_is_taken_after_the_chunks(three: SessionStore) -> None:
    # Prevents: the stored metadata missing the hash the producer only knows at the end.
    a = attachment("s_1", "a_1", 3)
    three.put_attachment(a, chunks_then_hash(a, [b"abc"]))
    stored = three.get_attachment_meta("s_1", "a_1")
    assert stored is not None and stored["sha256"] == "done"


def test_empty_attachment(three: SessionStore) -> None:
    # Prevents: a zero-byte upload reading back as missing.
    three.put_attachment(attachment("s_1", "a_1"), [])
    assert three.read_attachment("s_1", "a_1") == b""
    assert three.get_attachment_meta("s_1", "a_1") == attachment("s_1", "a_1")


def test_failing_chunks_leave_nothing(three: SessionStore, tmp_path: Path) -> None:
    # Prevents: a half-uploaded attachment being listed or leaving temp files behind.
    def broken() -> Iterator[bytes]:
        yield b"abc"
        raise RuntimeError("upload broke")

    with pytest.raises(RuntimeError, match="upload broke"):
        three.put_attachment(attachment("s_1", "a_1", 6), broken())
    assert three.list_attachments("s_1") == []
    assert three.get_attachment_meta("s_1", "a_1") is None
    assert three.read_attachment("s_1", "a_1") is None
    if isinstance(three, FsStore):
        leftovers = [p for p in (tmp_path / "data").rglob("*") if p.is_file() and p.suffix != ".jsonl"]
        assert leftovers == []
    # The next upload under another id works normally.
    three.put_attachment(attachment("s_1", "a_2", 2), [b"ok"])
    assert [m["attachment_id"] for m in three.list_attachments("s_1")] == ["a_2"]


def test_attachment_listing_and_delete(three: SessionStore) -> None:
    # Prevents: delete reporting the wrong outcome or removing a sibling attachment.
    for n in (1, 2, 3):
        three.put_attachment(attachment("s_1", f"a_{n}", 1), [bytes([n])])
    three.put_attachment(attachment("s_2", "a_1", 1), [b"x"])
    assert sorted(m["attachment_id"] for m in three.list_attachments("s_1")) == ["a_1", "a_2", "a_3"]
    assert three.delete_attachment("s_1", "a_2") is True
    assert three.delete_attachment("s_1", "a_2") is False
    assert three.delete_attachment("s_1", "a_404") is False
    assert sorted(m["attachment_id"] for m in three.list_attachments("s_1")) == ["a_1", "a_3"]
    assert three.get_attachment_meta("s_1", "a_2") is None
    assert three.read_attachment("s_1", "a_2") is None
    assert three.read_attachment("s_1", "a_3") == b"\x03"
    assert three.read_attachment("s_2", "a_1") == b"x"
    assert three.list_attachments("nope") == []


def test_attachment_overwrite_is_last_wins(three: SessionStore) -> None:
    # Prevents: a re-put of the same id (fork copying back) keeping stale bytes.
    three.put_attachment(attachment("s_1", "a_1", 3), [b"old"])
    three.put_attachment(attachment("s_1", "a_1", 3), [b"new"])
    assert three.read_attachment("s_1", "a_1") == b"new"
    assert len(three.list_attachments("s_1")) == 1


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
    assert files == [
        "..%2Fodd%20id.jsonl",
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
    assert sorted(m["session_id"] for m in FsStore(data).list_metas()) == ["../odd id", "s_1"]


def test_store_creates_missing_data_dir(tmp_path: Path) -> None:
    # Prevents: a first start on a fresh machine failing for want of the directory.
    target = tmp_path / "a" / "b"
    FsStore(target).commit("s_1", Commit(meta=meta("s_1")))
    assert os.listdir(target) == ["s_1.jsonl"]


def test_deleting_dot_sessions_spares_the_others(three: SessionStore, tmp_path: Path) -> None:
    # Prevents: session ".." naming data_dir for its attachments, so its delete wiped every session.
    three.put_attachment(attachment("s_1", "a_1", 1), [b"1"])
    for sid in (".", ".."):
        three.commit(sid, Commit(meta=meta(sid)))
        three.put_attachment(attachment(sid, "a_1", 1), [b"x"])
        assert three.read_attachment(sid, "a_1") == b"x"
    for sid in (".", ".."):
        three.delete_session(sid)
        assert three.get_meta(sid) is None
        assert three.list_attachments(sid) == []
    survivors = [three] if not isinstance(three, FsStore) else [three, FsStore(tmp_path / "data")]
    for store in survivors:
        assert [m["session_id"] for m in store.list_metas()] == ["s_1"]
        assert path_ids(store, "s_1", store.get_leaf("s_1")) == ["e_1", "e_2", "e_3"]
        assert store.read_attachment("s_1", "a_1") == b"1"
