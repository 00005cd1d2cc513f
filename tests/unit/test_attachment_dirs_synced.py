"""An attachment stored in fsync mode syncs its folder (``attachments/<stem>``) and the folders
above it (``attachments/``, data_dir), whoever made them: a power loss never takes back the
folder of an acknowledged attachment."""

from __future__ import annotations

import os
from pathlib import Path

from session_manager.store import Commit, FsStore
from session_manager.store.fs._fileops import Ops, StrPath
from session_manager.testing.contract import attachment, meta


class DirOps(Ops):
    """Real os calls; records mkdirs and directory syncs (read-only opens of directories) in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def mkdir(self, path: StrPath) -> None:
        super().mkdir(path)
        self.events.append(("mkdir", os.fspath(path)))

    def open(self, path: StrPath, flags: int, mode: int = 0o644) -> int:
        fd = super().open(path, flags, mode)
        if not flags & (os.O_WRONLY | os.O_RDWR) and os.path.isdir(path):
            self.events.append(("sync", os.fspath(path)))
        return fd


def _reads_back_after_reopen(where: Path, want: dict[str, bytes]) -> None:
    again = FsStore(where)
    try:
        assert {a: again.read_attachment("s_1", a) for a in want} == want
    finally:
        again.close()


def test_an_fsync_mode_attachment_syncs_the_folders_it_created(tmp_path: Path) -> None:
    # Prevents: attachments/ (in data_dir) and attachments/<stem> made by the upload with their
    # directory entries never synced, so the acknowledged attachment could vanish with them.
    where = tmp_path / "d"
    ops = DirOps()
    store = FsStore(where, "fsync", ops=ops)
    try:
        store.commit("s_1", Commit(meta=meta("s_1")))
        ops.events.clear()
        store.put_attachment(attachment("s_1", "a_1", 3), [b"abc"])
        made = [p for kind, p in ops.events if kind == "mkdir"]
        assert made, ops.events  # attachments/ and attachments/s_1 were created by this call
        for folder in made:
            parent = os.path.dirname(folder)
            after = ops.events[ops.events.index(("mkdir", folder)) + 1:]
            assert ("sync", parent) in after, (
                f"{os.path.relpath(folder, where)} was created but {os.path.relpath(parent, tmp_path)} "
                f"was never synced: the acknowledged attachment's folder may vanish ({ops.events})")
        got = store.read_attachment("s_1", "a_1")
    finally:
        store.close()
    assert got == b"abc"
    _reads_back_after_reopen(where, {"a_1": b"abc"})


def test_an_fsync_mode_attachment_syncs_folders_an_earlier_flush_mode_upload_made(tmp_path: Path) -> None:
    # Prevents: a switch from flush to fsync acknowledging an attachment whose folders a
    # flush-mode upload created and nothing ever synced.
    where = tmp_path / "d"
    ops = DirOps()
    store = FsStore(where, "flush", ops=ops)
    try:
        store.commit("s_1", Commit(meta=meta("s_1")))
        store.put_attachment(attachment("s_1", "a_1", 3), [b"abc"])
        store.durability = "fsync"
        ops.events.clear()
        store.put_attachment(attachment("s_1", "a_2", 3), [b"def"])
        folder = os.fspath(store.attachments_dir("s_1"))
        synced = [p for kind, p in ops.events if kind == "sync"]
        assert synced[-3:] == [folder, os.path.dirname(folder), os.fspath(where)], ops.events
    finally:
        store.close()
    _reads_back_after_reopen(where, {"a_1": b"abc", "a_2": b"def"})
