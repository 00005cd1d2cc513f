"""A reader holding a session's path while an fsync failure undoes writes and drops the session from
memory: its later reads answer the entries as stored, even once a newer load compacted the log."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from session_manager.errors import StoreError
from session_manager.store import Commit, FsStore
from session_manager.testing.contract import message, meta


def test_a_path_held_across_an_undone_write_and_a_compaction_still_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prevents: the undo of an unsynced write dropping the session without detaching its arrays (as
    # an eviction does): a reader still holding them read its bodies at their old offsets in the log a
    # newer load had compacted since, and failed as "log changed under its index" (session/storage,
    # a disk fault) for a healthy session.
    build = FsStore(tmp_path)
    parent = None
    for k in range(50):
        build.commit("s_1", Commit(entries=(message(f"e_{k}", parent, "x" * 100),), leaf=f"e_{k}",
                                   meta=meta("s_1", message_count=k + 1)))
        parent = f"e_{k}"
    for revision in (1, 2, 3):  # superseded lines: the compacted log puts every entry elsewhere
        for k in range(0, 50, 2):
            build.commit("s_1", Commit(entries=(message(f"e_{k}", f"e_{k - 1}" if k else None, "x" * 100,
                                                        revision=revision),), meta=meta("s_1", message_count=50)))
    build.close()
    store = FsStore(tmp_path, durability="fsync")
    path = store.path("s_1", store.get_leaf("s_1"))  # loaded from its index: no body decoded yet

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", failing)
        with pytest.raises(StoreError):
            store.commit("s_1", Commit(entries=(message("n_0", "e_49"),), leaf="n_0",
                                       meta=meta("s_1", message_count=51)))
    assert store.compact("s_1")  # a newer load of the session, compacted
    assert [e["revision"] for e in path][:4] == [3, 0, 3, 0]
    assert store.get_leaf("s_1") == "e_49"  # the failed write was undone
    store.close()
