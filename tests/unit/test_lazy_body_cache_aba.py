"""A body decoded by a reader while a writer replaces that entry and the log is compacted: the
entry's new line may sit at the very offset and length the reader read the old one from (in the
new file), which must not pass for "still the entry's newest line"."""

from __future__ import annotations

import threading
from pathlib import Path

from session_manager.store import Commit, FsStore
from session_manager.store._lazy import LazyEntries
from tests.unit.store_contract import message, meta


def test_a_body_read_before_an_update_and_a_compaction_is_not_cached_at_a_reused_location(tmp_path: Path) -> None:
    # Prevents: the cache check comparing only (offset, length): an update of the same size followed
    # by a compaction puts the new line where the old one was (meta line first, then the entry), so
    # the reader cached the old revision over the new one and every later read served it.
    store = FsStore(tmp_path)
    store.commit("s_1", Commit(entries=(message("e_1", None, "old", revision=1),), leaf="e_1",
                               meta=meta("s_1", message_count=1, updated_at=1)))
    assert store.compact("s_1")
    store.close()
    store = FsStore(tmp_path)
    assert store.get_leaf("s_1") == "e_1"  # loaded from its index: the body stays on disk
    entries = store._sessions["s_1"].entries
    assert isinstance(entries, LazyEntries) and "e_1" not in entries._bodies
    before = entries.location("e_1")
    read = entries._read
    assert read is not None
    newer = message("e_1", None, "new", revision=2)  # the same size as the old line

    def update_and_compact() -> None:
        store.commit("s_1", Commit(entries=(newer,), meta=meta("s_1", message_count=1, updated_at=2)))
        assert store.compact("s_1")

    def read_then_lose_the_race(offset: int, length: int) -> bytes:
        line = read(offset, length)
        writer = threading.Thread(target=update_and_compact)
        writer.start()
        writer.join(10)
        assert not writer.is_alive()
        return line

    entries._read = read_then_lose_the_race
    first = store.get_entry("s_1", "e_1")
    assert first is not None and first["revision"] == 1  # read before the write
    assert entries.location("e_1") == before  # the new line landed where the old one was
    again = store.get_entry("s_1", "e_1")
    assert again is not None and again["revision"] == 2 and again["message"]["content"][0]["text"] == "new"
    store.close()
    reopened = FsStore(tmp_path)
    assert reopened.get_entry("s_1", "e_1") == again
    reopened.close()
