"""A body decoded by a reader while a writer replaces that entry: the reader may answer with the
version it read (its read came first), but the cache never keeps it over the newer one -- also
when a compaction puts the new line at the very offset and length the old one was read from."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from session_manager.store import Commit, FsStore
from session_manager.store.fs._lazy import LazyEntries
from session_manager.testing.contract import message, meta


def lazily_loaded(tmp_path: Path, entry: dict[str, Any], *, compact: bool) -> tuple[FsStore, LazyEntries]:
    """A store holding ``s_1`` (``entry``, written and maybe compacted) loaded from its index."""
    store = FsStore(tmp_path)
    store.commit("s_1", Commit(entries=(entry,), leaf="e_1", meta=meta("s_1", message_count=1, updated_at=1)))
    if compact:
        assert store.compact("s_1")
    store.close()
    store = FsStore(tmp_path)
    assert store.get_leaf("s_1") == "e_1"  # loaded from its index: the body stays on disk
    entries = store._sessions["s_1"].entries
    assert isinstance(entries, LazyEntries) and "e_1" not in entries._bodies
    return store, entries


def first_read_losing_to(store: FsStore, entries: LazyEntries, write: Callable[[], None]) -> Any:
    """``get_entry`` of e_1 whose line is read, then ``write`` runs to its end (another thread,
    the session's lock free), and only then the reader goes on to decode and cache."""
    read = entries._read
    assert read is not None

    def read_then_lose_the_race(offset: int, length: int) -> bytes:
        line = read(offset, length)  # the old line, read under the session's lock
        writer = threading.Thread(target=write)
        writer.start()
        writer.join(10)
        assert not writer.is_alive()
        return line

    entries._read = read_then_lose_the_race
    try:
        return store.get_entry("s_1", "e_1")
    finally:
        entries._read = read


def reads_back(tmp_path: Path, store: FsStore, expected: Any) -> None:
    store.close()
    reopened = FsStore(tmp_path)
    assert reopened.get_entry("s_1", "e_1") == expected
    reopened.close()


def test_a_body_read_as_the_entry_is_replaced_is_not_cached_over_the_new_one(tmp_path: Path) -> None:
    # Prevents: a reader that read an entry's old line, then lost the race to an update of that
    # entry, storing the old body in the cache after the update: every later read (a chat UI's next
    # page, the next update's compare-and-set base) served the old revision until the session
    # left the cache, though the log held the new one.
    store, entries = lazily_loaded(tmp_path, message("e_1", None, "old"), compact=False)
    newer = message("e_1", None, "new", revision=1)

    def update() -> None:
        store.commit("s_1", Commit(entries=(newer,), meta=meta("s_1", message_count=1, updated_at=2)))

    first = first_read_losing_to(store, entries, update)
    assert first is not None and first["message"]["content"][0]["text"] == "old"  # read before the write
    again = store.get_entry("s_1", "e_1")
    assert again is not None and again["revision"] == 1 and again["message"]["content"][0]["text"] == "new"
    reads_back(tmp_path, store, again)


def test_a_body_read_before_an_update_and_a_compaction_is_not_cached_at_a_reused_location(tmp_path: Path) -> None:
    # Prevents: the cache check comparing only (offset, length): an update of the same size followed
    # by a compaction puts the new line where the old one was (meta line first, then the entry), so
    # the reader cached the old revision over the new one and every later read served it.
    store, entries = lazily_loaded(tmp_path, message("e_1", None, "old", revision=1), compact=True)
    before = entries.location("e_1")
    newer = message("e_1", None, "new", revision=2)  # the same size as the old line

    def update_and_compact() -> None:
        store.commit("s_1", Commit(entries=(newer,), meta=meta("s_1", message_count=1, updated_at=2)))
        assert store.compact("s_1")

    first = first_read_losing_to(store, entries, update_and_compact)
    assert first is not None and first["revision"] == 1  # read before the write
    assert entries.location("e_1") == before  # the new line landed where the old one was
    again = store.get_entry("s_1", "e_1")
    assert again is not None and again["revision"] == 2 and again["message"]["content"][0]["text"] == "new"
    reads_back(tmp_path, store, again)
