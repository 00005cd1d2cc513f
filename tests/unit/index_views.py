"""What a log says a session is (replayed from its bytes) beside what a store
answers, for the index tests (writable and read-only) to compare."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from session_manager.store import FsStore
from session_manager.store._core.state import SessionState
from session_manager.store.fs._records import committed_records


def oracle(path: Path, session_id: str) -> dict[str, Any]:
    state = SessionState()
    for record in committed_records(path.read_bytes().split(b"\n"), session_id, lambda n, w: None):
        state.apply_record(record)
    return {"meta": state.meta, "leaf": state.leaf, "entries": dict(state.entries),
            "path": [e["id"] for e in state.path(state.leaf)]}


def view(store: FsStore, session_id: str) -> dict[str, Any]:
    leaf = store.get_leaf(session_id)
    return {"meta": store.get_meta(session_id), "leaf": leaf,
            "entries": {e["id"]: e for e in store.entries(session_id)},
            "path": [e["id"] for e in store.path(session_id, leaf)]}
