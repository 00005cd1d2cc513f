"""A read-only store following a log whose writer undoes a write it had already made
visible (fsync mode: the write's fsync failed, so the writer truncates the log back to what
was durable and answers session/storage), then writes on."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from session_manager.errors import StoreError
from session_manager.store import Commit, FsStore
from session_manager.testing.contract import message, meta

SID = "s_1"


def _append(eid: str, parent: str | None, count: int, text: str = "hi") -> Commit:
    return Commit(entries=(message(eid, parent, text),), leaf=eid, meta=meta(SID, message_count=count))


def _view(store: FsStore) -> tuple[object, ...]:
    leaf = store.get_leaf(SID)
    return store.get_meta(SID), leaf, [e["id"] for e in store.path(SID, leaf)], sorted(
        e["id"] for e in store.entries(SID))


@pytest.mark.parametrize("longer", [False, True])
def test_a_follower_that_read_an_undone_write_drops_it_and_reads_what_replaced_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, longer: bool) -> None:
    # Prevents: the follower keeping an entry whose write its writer undid and answered as failed
    # (it had read it before the fsync failed), and, once the writer's next commit regrew the log
    # past where it had read to, resuming mid-line in it: the acknowledged commit never showed.
    writer = FsStore(tmp_path, "fsync")
    follower = FsStore(tmp_path, read_only=True)
    try:
        writer.commit(SID, Commit(meta=meta(SID)))
        writer.commit(SID, _append("e_1", None, 1))
        assert _view(follower)[2] == ["e_1"]
        real = os.fsync
        seen: list[tuple[object, ...]] = []

        def fsync(fd: int) -> None:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                real(fd)
                return
            seen.append(_view(follower))  # a reader in another process, between the write and its fsync
            raise OSError(errno.EIO, "Input/output error")

        with monkeypatch.context() as m:
            m.setattr(os, "fsync", fsync)
            with pytest.raises(StoreError):
                writer.commit(SID, _append("e_undone", "e_1", 2))
        assert seen and seen[0][2] == ["e_1", "e_undone"]  # it did see the write, as readers may
        assert _view(writer)[2] == ["e_1"]
        text = "a much longer message than the undone one" * 3 if longer else "hi"
        writer.commit(SID, _append("e_2", "e_1", 2, text))  # acknowledged
        want = _view(writer)
        assert want[1] == "e_2" and want[3] == ["e_1", "e_2"]
        assert _view(follower) == want
        later = FsStore(tmp_path, read_only=True)  # a fresh reader agrees
        assert _view(later) == want
        later.close()
    finally:
        follower.close()
        writer.close()


def test_a_follower_that_applied_an_unterminated_record_its_writer_then_cut_drops_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the follower counting a valid but unterminated last record (a write that ran out of
    # space one byte short of its newline) and keeping it after the writer cut it back and answered
    # the commit as failed: the follower then showed an entry no replay of the log has.
    writer = FsStore(tmp_path)
    follower = FsStore(tmp_path, read_only=True)
    try:
        writer.commit(SID, Commit(meta=meta(SID)))
        writer.commit(SID, _append("e_1", None, 1))
        assert _view(follower)[2] == ["e_1"]
        real = os.write
        seen: list[tuple[object, ...]] = []

        def write(fd: int, data: bytes | memoryview) -> int:
            raw = bytes(data)
            if b'"e_cut"' in raw:
                return real(fd, raw[:-1])  # a short write: all but the newline
            if raw == b"\n" and not seen:  # write_all asks for the rest: the disk is full
                seen.append(_view(follower))  # a reader in another process, right then
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(fd, data)

        with monkeypatch.context() as m:
            m.setattr(os, "write", write)
            with pytest.raises(StoreError):
                writer.commit(SID, _append("e_cut", "e_1", 2))
        assert seen and seen[0][2] == ["e_1", "e_cut"]  # it counted the unterminated record, as an open does
        assert _view(writer)[2] == ["e_1"]
        writer.commit(SID, _append("e_2", "e_1", 2))  # acknowledged, where the cut record was
        want = _view(writer)
        assert want[1] == "e_2" and want[3] == ["e_1", "e_2"]
        assert _view(follower) == want
        later = FsStore(tmp_path, read_only=True)
        assert _view(later) == want
        later.close()
    finally:
        follower.close()
        writer.close()
