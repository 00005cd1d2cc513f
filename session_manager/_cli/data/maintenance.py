"""``compact``: rewrite each session log as its live state.

The fs store already compacts a mostly-superseded log when it loads it; this
forces the rewrite for every log that would shrink, through the store's own
compaction (temp file, fsync, rename), on a store opened writable, so it runs
only where no other writer holds the data_dir.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...store._records import encode_snapshot
from ...store.fs import FsStore


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
    state = store._state(session_id)  # the seam into the fs store's own compaction
    if state is None or not path.exists():
        return None
    with state.lock:
        before = path.stat().st_size
        if len(encode_snapshot(state.meta, state.entries.values(), state.leaf)) >= before:
            return None
        store._compact(session_id, state)
        after = path.stat().st_size
    return Compacted(session_id, before, after) if after < before else None
