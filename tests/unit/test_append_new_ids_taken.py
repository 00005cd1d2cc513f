"""An append-many whose later entry id is stored (or repeated in the batch), over the
memory, fs and sqlite stores: a conflict (the service draws fresh ids), never written over.
(Postgres: test_postgres_new_ids_taken.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.ids import SequentialIds
from session_manager.store import FsStore, MemoryStore
from session_manager.store.sqlite import SqliteSettings, SqliteStore


class Scripted(SequentialIds):
    def __init__(self, *ids: str) -> None:
        super().__init__()
        self.script = list(ids)

    def entry_id(self) -> str:
        return self.script.pop(0) if self.script else super().entry_id()


def text(s: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": s}], "timestamp": 1}


def open_store(kind: str, tmp_path: Path) -> Any:
    if kind == "memory":
        return MemoryStore()
    if kind == "fs":
        return FsStore(tmp_path)
    return SqliteStore(SqliteSettings(str(tmp_path / "sm.db")))


@pytest.mark.parametrize("kind", ["memory", "fs", "sqlite"])
@pytest.mark.parametrize("script", [("x1", "x2", "x1"), ("x1", "x2", "x2")], ids=["stored", "repeated"])
def test_a_batch_whose_later_id_is_taken_draws_again(tmp_path: Path, kind: str, script: tuple[str, ...]) -> None:
    # Prevents: only a batch's first id checked, so a later one (stored, or drawn twice)
    # written over an entry (x1 then named x2 as its parent: a cycle off the root).
    store = open_store(kind, tmp_path)
    sm = session_manager.open(store=store, ids=Scripted(*script))
    seen: list[dict[str, Any]] = []
    sm.observe({"function_id": session_manager.ON_MESSAGE_ADDED}, seen.append)
    try:
        sm.call("session::ensure", {"session_id": "S"})
        sm.call("session::append", {"session_id": "S", "message": text("one")})
        ids = sm.call("session::append-many", {"session_id": "S", "messages": [text("a"), text("b")]})["entry_ids"]
        assert ids == ["e_001", "e_002"]
        stored = {e["id"]: (e.get("parent_id"), e["message"]["content"][0]["text"]) for e in store.entries("S")}
        assert stored == {"x1": (None, "one"), "e_001": ("x1", "a"), "e_002": ("e_001", "b")}
        assert [e["entry_id"] for e in seen] == ["x1", "e_001", "e_002"]
    finally:
        sm.close()


@pytest.mark.parametrize("kind", ["memory", "fs", "sqlite"])
def test_an_append_whose_drawn_id_is_stored_draws_again(tmp_path: Path, kind: str) -> None:
    # Prevents: sqlite's transactional path answering session/storage (its unique key refusing
    # the id) where every other store draws again.
    store = open_store(kind, tmp_path)
    sm = session_manager.open(store=store, ids=Scripted("x1", "x1"))
    try:
        sm.call("session::ensure", {"session_id": "S"})
        sm.call("session::append", {"session_id": "S", "message": text("one")})
        answer = sm.call("session::append", {"session_id": "S", "message": text("two")})
        assert (answer["entry_id"], answer["parent_id"]) == ("e_001", "x1")
        assert [(e["id"], e.get("parent_id")) for e in store.entries("S")] == [("x1", None), ("e_001", "x1")]
    finally:
        sm.close()
