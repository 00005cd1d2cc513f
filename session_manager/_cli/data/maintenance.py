"""``compact``: rewrite each session log as its live state.

The fs store compacts a log online once superseded records outweigh its live
state; this forces the rewrite of every log that would shrink, through the
store's own :meth:`~session_manager.store.fs.FsStore.compact` (temp file,
fsync, rename), on a store opened writable: it takes the data_dir's owner
lock, so it runs only where no other writer holds the directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...store.fs import FsStore, encode_snapshot


@dataclass(frozen=True)
class Compacted:
    session_id: str
    bytes_before: int
    bytes_after: int

    def to_json(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "bytes_before": self.bytes_before, "bytes_after": self.bytes_after}


def compact_session(store: FsStore, session_id: str) -> Compacted | None:
    """Rewrite one log when its live state is smaller; ``None`` when it is already as small."""
    path = store.file_path(session_id)
    try:
        before = path.stat().st_size
    except FileNotFoundError:
        return None
    live = encode_snapshot(store.get_meta(session_id), store.entries(session_id), store.get_leaf(session_id))
    if len(live) >= before or not store.compact(session_id):
        return None
    after = path.stat().st_size
    return Compacted(session_id, before, after) if after < before else None
