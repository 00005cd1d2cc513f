"""A log name changed without a directory fsync (created or rewritten in flush mode, or a
rewrite whose directory sync failed) is made durable before the next fsync-mode write: after a
hot switch from ``flush`` to ``fsync``, a commit acknowledged as on disk never lives in a file
whose name a power loss could take back. The write is refused (``session/storage``) when that
directory sync fails, and the next one tries again."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._wire.events import EVENT_FUNCTIONS
from session_manager.errors import SessionError
from session_manager.store import FsStore
from session_manager.store.fs._fileops import Ops, StrPath
from tests.unit.test_background_compaction import SID, _seed, _update, _view


class DirSyncs(Ops):
    """Real os calls; records each directory sync of data_dir (its open) with the log's size at
    that moment, and fails the next ``fail`` of them."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = os.fspath(data_dir)
        self.log = os.path.join(self.data_dir, f"{SID}.jsonl")
        self.syncs: list[int] = []
        self.fail = 0

    def open(self, path: StrPath, flags: int, mode: int = 0o644) -> int:
        if os.fspath(path) == self.data_dir and not flags & (os.O_WRONLY | os.O_RDWR):
            if self.fail:
                self.fail -= 1
                raise OSError(errno.EIO, "Input/output error")
            self.syncs.append(os.path.getsize(self.log) if os.path.exists(self.log) else -1)
        return super().open(path, flags, mode)


def _stream_until_rewritten(store: FsStore, rewrites: int) -> int:
    k = 0
    while store.compactions < rewrites:
        k += 1
        store.commit(SID, _update(k))
        assert k < 10_000
    return k


def test_after_a_switch_to_fsync_the_first_write_syncs_the_names_flush_mode_changed(tmp_path: Path) -> None:
    # Prevents: a commit acknowledged as durable right after durability hot-switched to fsync,
    # written into a log whose creation or last rewrite (in flush mode) never had its directory
    # entry synced: a power loss could bring back the replaced file, or no file at all.
    where = tmp_path / "d"
    ops = DirSyncs(where)
    store = FsStore(where, "flush", ops=ops)
    _seed(store)
    k = _stream_until_rewritten(store, 2)  # (small: rewritten inline, the name left unsynced)
    assert ops.syncs == []
    store.durability = "fsync"
    size = os.path.getsize(ops.log)
    store.commit(SID, _update(k + 1))
    assert ops.syncs == [size]  # once, and before this commit's bytes went in
    for j in range(k + 2, k + 6):
        store.commit(SID, _update(j))
    assert ops.syncs == [size]  # nothing changed a name since: no more directory syncs
    want = _view(store)
    store.close()
    again = FsStore(where)
    assert _view(again) == want and want[3][0]["revision"] == k + 5
    again.close()


def test_fsync_mode_writes_sync_the_directory_only_when_a_name_changed(tmp_path: Path) -> None:
    # Prevents: the check costing a directory fsync per append in fsync mode (only a log's
    # creation and each rewrite's rename sync it, as before).
    where = tmp_path / "d"
    ops = DirSyncs(where)
    store = FsStore(where, "fsync", ops=ops)
    _seed(store)
    # The first write after the open (a flush-mode owner before may have left names unsynced),
    # then the log's creation.
    assert len(ops.syncs) == 2
    k = _stream_until_rewritten(store, 3)
    assert len(ops.syncs) == 2 + 3  # and one per rewrite
    store.commit(SID, _update(k + 1))
    assert len(ops.syncs) == 5
    want = _view(store)
    store.close()
    again = FsStore(where)
    assert _view(again) == want
    again.close()


def test_a_failed_directory_sync_refuses_the_write_and_the_next_one_retries(tmp_path: Path) -> None:
    # Prevents: a write acknowledged in fsync mode although the directory sync its log's name
    # needed failed (or the failure half-applying the mutation); and a failure sticking for good.
    where = tmp_path / "d"
    ops = DirSyncs(where)
    store = FsStore(where, "flush", ops=ops)
    fired: list[str] = []
    with session_manager.open(where, store=store) as sm:
        def seen(fid: str) -> Callable[[dict[str, Any]], None]:
            return lambda _e: fired.append(fid)

        for fid in EVENT_FUNCTIONS:
            sm.observe({"function_id": fid}, seen(fid))
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        ops.log = os.path.join(os.fspath(where), f"{sid}.jsonl")
        def message(text: str) -> dict[str, Any]:
            return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}

        first = sm.call("session::append", {"session_id": sid, "message": message("first")})
        fired.clear()
        store.durability = "fsync"
        size = os.path.getsize(ops.log)
        ops.fail = 1
        with pytest.raises(SessionError) as refused:
            sm.call("session::append", {"session_id": sid, "message": message("second")})
        assert refused.value.code == "session/storage"
        assert os.path.getsize(ops.log) == size and fired == []  # nothing written, nothing fired
        page = sm.call("session::messages", {"session_id": sid})
        assert [m["entry_id"] for m in page["messages"]] == [first["entry_id"]]
        again = sm.call("session::append", {"session_id": sid, "message": message("third")})
        assert ops.syncs == [size] and fired == ["session::on-message-added"]
    with session_manager.open(where) as reopened:
        page = reopened.call("session::messages", {"session_id": sid})
        assert [m["entry_id"] for m in page["messages"]] == [first["entry_id"], again["entry_id"]]
        assert reopened.call("session::get", {"session_id": sid})["meta"]["message_count"] == 2


def test_an_fsync_mode_open_syncs_the_names_a_flush_mode_owner_left_unsynced(tmp_path: Path) -> None:
    # Prevents: the usual way to change durability (a restart with fsync) acknowledging commits
    # as durable in logs whose names the flush-mode owner before never synced.
    where = tmp_path / "d"
    ops = DirSyncs(where)
    first = FsStore(where, "flush", ops=ops)
    _seed(first)  # the log is created: no directory sync (flush)
    first.close()
    assert ops.syncs == []

    second = FsStore(where, "fsync", ops=ops)
    try:
        size = os.path.getsize(ops.log)
        second.commit(SID, _update(1))
        # Acknowledged as surviving power loss: the log's name must have been synced before
        # its bytes went in (as after a hot switch: test_names_synced_before_fsync_writes).
        assert ops.syncs and ops.syncs[0] <= size, (
            f"commit acknowledged in fsync mode, its log's name never synced (dir syncs: {ops.syncs})")
        want = _view(second)
    finally:
        second.close()
    again = FsStore(where)
    assert _view(again) == want
    again.close()


def test_a_switch_to_fsync_syncs_what_flush_mode_acknowledged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: an answer in fsync mode that rests on flush-mode bytes no fsync ever covered (an
    # idempotent replay of an entry appended just before the switch: "already there", yet lost on
    # a power cut), the descriptor long evicted so no fsync ticket could find it.
    synced: list[str] = []
    real = os.sync
    where = tmp_path / "d"
    with session_manager.open(where) as sm:
        store = sm.service.store
        assert isinstance(store, FsStore)
        def sync() -> None:
            synced.append(store.durability)
            real()

        monkeypatch.setattr(os, "sync", sync)
        sid = sm.call("session::create", {})["session_id"]
        msg = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}
        first = sm.call("session::append", {"session_id": sid, "entry_id": "e_caller", "message": msg})
        store._fds.close_all()  # (as an eviction would: no descriptor left to take a ticket)
        store.durability = "fsync"
        assert synced == ["fsync"]  # once, after the switch took effect (later writes sync their own)
        store.durability = "fsync"
        replay = sm.call("session::append", {"session_id": sid, "entry_id": "e_caller", "message": msg})
        assert replay == first and synced == ["fsync"]
        store.durability = "flush"
        store.durability = "flush"
        assert synced == ["fsync"]  # only a switch from flush to fsync syncs
        with pytest.raises(ValueError, match="durability"):
            store.durability = "fsynk"
        assert store.durability == "flush"
    with session_manager.open(where) as again:
        page = again.call("session::messages", {"session_id": sid})
        assert [m["entry_id"] for m in page["messages"]] == ["e_caller"]
