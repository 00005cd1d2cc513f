"""A reader outside the session's lock while a writer replaces an entry it has not decoded yet:
it answers the old body or the new one, never "no such entry" (nor a raw KeyError from a path)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from session_manager.store import Commit, FsStore
from session_manager.store.fs._lazy import LazyEntries
from session_manager.testing.contract import message, meta


def test_an_entry_read_while_a_writer_replaces_it_is_never_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prevents: the replacement forgetting the entry's line before holding its new body: a reader
    # that found no decoded body then saw no line either and answered as if the entry did not exist
    # (session/entry_not_found for get_entry; a raw KeyError from a path view's body read), though
    # the entry was in the log all along. A store-protocol put_entry replaces without reading first.
    store = FsStore(tmp_path)
    store.commit("s_1", Commit(entries=(message("e_0", None, "root"),), leaf="e_0", meta=meta("s_1", message_count=1)))
    store.commit("s_1", Commit(entries=(message("e_1", "e_0", "old"),), leaf="e_1", meta=meta("s_1", message_count=2)))
    store.close()
    store = FsStore(tmp_path)
    assert store.get_leaf("s_1") == "e_1"  # loaded from its index: no body decoded
    entries = store._sessions["s_1"].entries
    assert isinstance(entries, LazyEntries) and "e_1" not in entries._bodies
    view = store.path("s_1", "e_1")

    paused, resume = threading.Event(), threading.Event()
    link = LazyEntries._link

    def slow_link(self: LazyEntries, i: int, parent: Any, new: bool) -> None:
        if not new and threading.current_thread() is writer:
            paused.set()  # mid-replacement, the session's lock held: let the reader in
            resume.wait(10)
        link(self, i, parent, new)

    monkeypatch.setattr(LazyEntries, "_link", slow_link)
    newer = message("e_1", "e_0", "new", revision=1)
    writer = threading.Thread(target=store.commit, args=("s_1", Commit(entries=(newer,))))
    writer.start()
    try:
        assert paused.wait(10)
        seen = store.get_entry("s_1", "e_1")
        assert seen is not None and seen["id"] == "e_1"
        assert view[1]["id"] == "e_1"
    finally:
        resume.set()
        writer.join(10)
    assert not writer.is_alive()
    again = store.get_entry("s_1", "e_1")
    assert again is not None and again["revision"] == 1
    store.close()
