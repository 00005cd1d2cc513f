"""A background rewrite in flight while ``durability`` hot-reloads (the worker sets
``store.durability`` on a reload, no rebuild): the commits it carries over into the
new log are synced as the durability they were acknowledged under demands."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from session_manager.store import FsStore
from session_manager.store.fs import _rewrite
from session_manager.store.fs._fileops import StrPath
from tests.unit.test_background_compaction import (
    SID,
    GatedOps,
    _hold_a_rewrite,
    _ino,
    _reads_back_after_reopen,
    _seed,
    _update,
)

pytestmark = pytest.mark.usefixtures("background_rewrites")


def test_commits_acknowledged_after_a_switch_to_fsync_are_synced_in_the_new_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a rewrite snapshotted in flush mode renaming its file over the log with the commits
    # acknowledged as fsynced since the switch carried over unsynced (and the directory not synced):
    # a power cut after the rename lost commits the caller was told were on disk.
    synced: dict[int, int] = {}
    dirs_synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            dirs_synced.append(fd)
        else:
            synced[st.st_ino] = st.st_size

    checked: list[int] = []

    class Check(GatedOps):
        def replace(self, src: StrPath, dst: StrPath) -> None:
            if os.fspath(src).endswith(_rewrite.TEMP_SUFFIX):
                fd = os.open(src, os.O_RDONLY)
                try:
                    ino, size = _ino(fd), os.fstat(fd).st_size
                finally:
                    os.close(fd)
                assert synced.get(ino) == size  # every byte, the carried-over commits too
                checked.append(size)
                dirs_synced.clear()
            super().replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    ops = Check()
    store = FsStore(tmp_path / "d", "flush", ops=ops)
    _seed(store)
    k = _hold_a_rewrite(store, ops)  # snapshotted while the store is in flush mode
    store.durability = "fsync"  # what a reload does
    for _ in range(3):
        k += 1
        store.commit(SID, _update(k))  # acknowledged once fsynced (in the old log)
    ops.gate.set()
    assert store._compactor is not None
    store._compactor.wait(SID)
    assert checked and store.compactions == 1
    assert dirs_synced  # the new log's name too, as a rewrite started in fsync mode does
    _reads_back_after_reopen(store, tmp_path / "d", k)
