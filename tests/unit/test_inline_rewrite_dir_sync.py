"""fsync mode, an inline rewrite (``compact()``, or a commit past the hard line with no
background rewrite in flight): the temp file is renamed over the log, then the directory
is synced. A failure of that sync comes after the log was replaced."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from session_manager.store import Commit, FsStore
from session_manager.store.fs import _rewrite
from session_manager.store.fs._fileops import Ops, StrPath
from session_manager.testing.contract import message, meta

SID = "s_1"


class DirSyncFailsAfterRename(Ops):
    """Real os calls; the directory open of the sync right after a compaction's rename fails."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = os.fspath(data_dir)
        self.armed = False
        self.failed = 0

    def replace(self, src: StrPath, dst: StrPath) -> None:
        super().replace(src, dst)
        self.armed = os.fspath(src).endswith(_rewrite.TEMP_SUFFIX)

    def open(self, path: StrPath, flags: int, mode: int = 0o644) -> int:
        if self.armed and os.fspath(path) == self.data_dir:
            self.armed = False
            self.failed += 1
            raise OSError(errno.EMFILE, "Too many open files")
        return super().open(path, flags, mode)


def _update(k: int) -> Commit:
    entry = message("e_1", None, "tok " * (k + 1), revision=k)
    return Commit(entries=(entry,), leaf="e_1", meta=meta(SID, message_count=1, updated_at=k))


def _view(store: FsStore) -> tuple[object, ...]:
    leaf = store.get_leaf(SID)
    return store.get_meta(SID), leaf, [e["id"] for e in store.path(SID, leaf)], sorted(
        store.entries(SID), key=lambda e: e["id"])


def test_commits_after_a_rewrite_whose_directory_sync_failed_go_to_the_new_log(tmp_path: Path) -> None:
    # Prevents: the inline rewrite answering "failed, the log is as it was" after its rename had
    # already replaced the log: the kept descriptor stayed on the replaced (unlinked) file, so every
    # later acknowledged commit was written where no reader and no restart would ever find it.
    where = tmp_path / "d"
    ops = DirSyncFailsAfterRename(where)
    store = FsStore(where, "fsync", ops=ops)
    store.commit(SID, Commit(meta=meta(SID)))
    for k in range(5):
        store.commit(SID, _update(k))
    assert store.compact(SID) is True  # the log was replaced: the rewrite happened
    assert ops.failed == 1 and store.compactions == 1
    store.commit(SID, _update(5))  # acknowledged: it must be in the log the name points to
    store.commit(SID, Commit(entries=(message("e_2", "e_1"),), leaf="e_2", meta=meta(SID, message_count=2)))
    want = _view(store)
    assert want[1] == "e_2" and want[2] == ["e_1", "e_2"] and want[3][0]["revision"] == 5
    # A read-only reader of the data_dir (another process's view) sees them while the store runs.
    follower = FsStore(where, read_only=True)
    assert _view(follower) == want
    follower.close()
    store.close()
    assert [p.name for p in where.iterdir() if p.name.endswith(_rewrite.TEMP_SUFFIX)] == []
    again = FsStore(where)
    assert _view(again) == want
    again.close()
