"""A body decoded by a reader while a writer replaces that entry: the reader may answer with the
version it read (its read came first), but the cache never keeps it over the newer one."""

from __future__ import annotations

import threading
from pathlib import Path

from session_manager.store import Commit, FsStore
from session_manager.store._lazy import LazyEntries
from tests.unit.store_contract import message, meta


def test_a_body_read_as_the_entry_is_replaced_is_not_cached_over_the_new_one(tmp_path: Path) -> None:
    # Prevents: a reader that read an entry's old line, then lost the race to an update of that
    # entry, storing the old body in the cache after the update: every later read (a chat UI's next
    # page, the next update's compare-and-set base) served the old revision until the session
    # left the cache, though the log held the new one.
    store = FsStore(tmp_path)
    store.commit("s_1", Commit(entries=(message("e_1", None, "old"),), leaf="e_1", meta=meta("s_1", message_count=1)))
    store.close()
    store = FsStore(tmp_path)
    assert store.get_leaf("s_1") == "e_1"  # loaded from its index: the body stays on disk
    entries = store._sessions["s_1"].entries
    assert isinstance(entries, LazyEntries) and "e_1" not in entries._bodies
    read = entries._read
    assert read is not None
    newer = message("e_1", None, "new", revision=1)

    def read_then_lose_the_race(offset: int, length: int) -> bytes:
        line = read(offset, length)  # the old line, read under the session's lock
        writer = threading.Thread(target=store.commit, args=(
            "s_1", Commit(entries=(newer,), meta=meta("s_1", message_count=1, updated_at=2))))
        writer.start()  # the update lands before this reader caches what it read
        writer.join(10)
        assert not writer.is_alive()
        return line

    entries._read = read_then_lose_the_race
    first = store.get_entry("s_1", "e_1")
    assert first is not None and first["message"]["content"][0]["text"] == "old"  # read before the write
    entries._read = read
    again = store.get_entry("s_1", "e_1")
    assert again is not None and again["revision"] == 1 and again["message"]["content"][0]["text"] == "new"
    store.close()
    reopened = FsStore(tmp_path)
    assert reopened.get_entry("s_1", "e_1") == again
    reopened.close()
