"""Online compaction in the background (:mod:`session_manager.store.fs._background`):
the rewrite's write and fsync run on a worker thread while commits go on; the
new log is the snapshot plus every commit made meanwhile, renamed over the old
one under the session's lock.

Crash points are taken with an :class:`Ops` double that copies the data_dir at
the instant of each file operation of the rewrite (a crash there leaves exactly
those files), and every copy must read back as the acknowledged state."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.ids import SequentialIds
from session_manager.store import Commit, FsStore
from session_manager.store.fs import _rewrite, _sidecar
from session_manager.store.fs._fileops import Ops, StrPath
from session_manager.testing.contract import message, meta

pytestmark = pytest.mark.usefixtures("background_rewrites")

SID = "s_1"


def _update(k: int) -> Commit:
    """What update-message commits: a new revision of e_1 (growing text) and the meta."""
    entry = message("e_1", None, "tok " * (k + 1), revision=k)
    return Commit(entries=(entry,), meta=meta(SID, message_count=1, updated_at=k))


def _seed(store: FsStore) -> None:
    store.commit(SID, Commit(meta=meta(SID)))
    store.commit(SID, Commit(entries=(message("e_1", None),), leaf="e_1", meta=meta(SID, message_count=1)))


def _view(store: FsStore, session_id: str = SID) -> tuple[Any, ...]:
    leaf = store.get_leaf(session_id)
    return store.get_meta(session_id), leaf, [e["id"] for e in store.path(session_id, leaf)], sorted(
        store.entries(session_id), key=lambda e: e["id"])


def _temps(where: Path) -> list[str]:
    return [p.name for p in where.iterdir() if p.name.endswith(_rewrite.TEMP_SUFFIX)]


def _reads_back_after_reopen(store: FsStore, where: Path, revision: int) -> None:
    """e_1 is at ``revision``, and a reopen reads back exactly what ``store`` held."""
    want = _view(store)
    assert want[3][0]["revision"] == revision
    store.close()
    again = FsStore(where)
    assert _view(again) == want
    again.close()


class GatedOps(Ops):
    """Real os calls; once ``held``, opening a compaction temp file waits for ``gate``."""

    def __init__(self) -> None:
        self.held = False
        self.gate, self.entered = threading.Event(), threading.Event()

    def open(self, path: StrPath, flags: int, mode: int = 0o644) -> int:
        if os.fspath(path).endswith(_rewrite.TEMP_SUFFIX) and self.held:
            self.entered.set()
            assert self.gate.wait(30)
        return super().open(path, flags, mode)


def _hold_a_rewrite(store: FsStore, ops: GatedOps) -> int:
    """Stream updates until a background rewrite starts, and hold it at its temp
    file (far below the hard line: commits do not wait yet); the last revision."""
    ops.held = True
    assert store._compactor is not None
    k = 0
    while not store._compactor.rewriting(SID):
        k += 1
        store.commit(SID, _update(k))
        assert k < 10_000
    assert ops.entered.wait(30)
    return k


def test_commits_made_during_a_rewrite_are_carried_into_the_new_log(tmp_path: Path) -> None:
    # Prevents: the background rewrite dropping the commits acknowledged while its fsync ran
    # (they are in the old log only), or the caller waiting for that fsync.
    ops = GatedOps()
    store = FsStore(tmp_path / "d", ops=ops)
    _seed(store)
    k = _hold_a_rewrite(store, ops)
    during = k
    for _ in range(5):  # commits still land while the rewrite is in flight
        k += 1
        store.commit(SID, _update(k))
    assert store.compactions == 0
    ops.gate.set()
    assert store._compactor is not None
    store._compactor.wait(SID)
    assert store.compactions == 1
    want = _view(store)
    assert want[3][0]["revision"] == k and k > during
    raw = (tmp_path / "d" / f"{SID}.jsonl").read_bytes()
    store.commit(SID, _update(k + 1))  # the swapped descriptor appends to the new log
    assert (tmp_path / "d" / f"{SID}.jsonl").read_bytes().startswith(raw)
    want = _view(store)
    store.close()
    assert _temps(tmp_path / "d") == []
    again = FsStore(tmp_path / "d")
    assert _view(again) == want
    again.close()


class CrashPoints(Ops):
    """Copies the data_dir at each file operation of a background rewrite (before
    and after it), together with the state the store has acknowledged then."""

    def __init__(self, where: Path, out: Path) -> None:
        self.where, self.out = where, out
        self.store: FsStore | None = None
        self.copies: list[tuple[Path, tuple[Any, ...]]] = []

    ignored: tuple[str, ...] = (".session-manager.lock", "*.tmp")  # (what a crash copy leaves out)

    def _copy(self) -> None:
        assert self.store is not None
        with self.store._sessions[SID].lock:  # no commit half-made while copying
            target = self.out / str(len(self.copies))
            shutil.copytree(self.where, target, ignore=shutil.ignore_patterns(*self.ignored))
            self.copies.append((target, _view(self.store)))

    def open(self, path: StrPath, flags: int, mode: int = 0o644) -> int:
        temp = os.fspath(path).endswith(_rewrite.TEMP_SUFFIX)
        if temp:
            self._copy()
        fd = super().open(path, flags, mode)
        if temp:
            self._copy()
        return fd

    def replace(self, src: StrPath, dst: StrPath) -> None:
        log = os.fspath(dst).endswith(".jsonl")
        if log:
            self._copy()
        super().replace(src, dst)
        if log:
            self._copy()


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_a_crash_at_any_step_of_a_background_rewrite_leaves_the_old_log_or_the_new_one(
        tmp_path: Path, durability: Any) -> None:
    # Prevents: a crash during the rewrite losing an acknowledged commit, inventing one, or
    # leaving a log that mixes the snapshot and the old lines.
    where = tmp_path / "d"
    ops = CrashPoints(where, tmp_path / "crashes")
    store = FsStore(where, durability, ops=ops)
    ops.store = store
    _seed(store)
    for k in range(1, 300):
        store.commit(SID, _update(k))
    store.close()
    assert store.compactions >= 2 and len(ops.copies) >= 8
    for copy, acknowledged in ops.copies:
        reopened = FsStore(copy)
        assert _view(reopened) == acknowledged, copy.name
        reopened.close()


def test_every_byte_of_the_new_log_is_fsynced_before_the_rename(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: in fsync mode, the commits carried over from the old log renamed into place
    # unsynced (acknowledged as on disk, lost by a power cut after the rename).
    synced: dict[int, int] = {}
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        synced[fd] = os.fstat(fd).st_size

    checked: list[int] = []

    class Check(GatedOps):
        def replace(self, src: StrPath, dst: StrPath) -> None:
            if os.fspath(src).endswith(_rewrite.TEMP_SUFFIX):
                size = os.stat(src).st_size
                fd = os.open(src, os.O_RDONLY)
                try:
                    ino = os.fstat(fd).st_ino
                finally:
                    os.close(fd)
                fds = [f for f in synced if _ino(f) == ino]
                assert fds and synced[fds[-1]] == size  # all of it, the carried-over commits too
                checked.append(size)
            super().replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    ops = Check()
    store = FsStore(tmp_path / "d", "fsync", ops=ops)
    _seed(store)
    k = _hold_a_rewrite(store, ops)
    for _ in range(3):
        k += 1
        store.commit(SID, _update(k))  # carried over: fsynced again before the rename
    ops.gate.set()
    assert store._compactor is not None
    store._compactor.wait(SID)
    store.close()
    assert checked and store.compactions == 1


def _ino(fd: int) -> int | None:
    try:
        return os.fstat(fd).st_ino
    except OSError:
        return None


def test_a_delete_during_a_rewrite_is_not_undone_by_it(tmp_path: Path) -> None:
    # Prevents: a rewrite in flight renaming the deleted session's log back into place, or
    # leaving its temp file behind.
    ops = GatedOps()
    store = FsStore(tmp_path / "d", ops=ops)
    _seed(store)
    _hold_a_rewrite(store, ops)
    deleter = threading.Thread(target=store.delete_session, args=(SID,))
    deleter.start()
    ops.gate.set()  # the worker goes on: it must find its job cancelled
    deleter.join(30)
    assert not deleter.is_alive()
    assert store.get_meta(SID) is None and store.compactions == 0
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [".index", ".session-manager.lock"]
    store.commit(SID, Commit(meta=meta(SID, title="again")))  # the id is free for a new session
    store.close()
    again = FsStore(tmp_path / "d")
    assert again.get_meta(SID) == meta(SID, title="again") and again.entries(SID) == []
    again.close()


def test_close_waits_for_a_rewrite_in_flight(tmp_path: Path) -> None:
    # Prevents: close returning (and the data_dir changing hands) while a worker still renames
    # a file over a log, or a temp file left behind by the cancelled rewrite.
    ops = GatedOps()
    store = FsStore(tmp_path / "d", ops=ops)
    _seed(store)
    _hold_a_rewrite(store, ops)
    want = _view(store)
    closer = threading.Thread(target=store.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # held by the worker, which is held at the gate
    ops.gate.set()
    closer.join(30)
    assert not closer.is_alive()
    assert _temps(tmp_path / "d") == []
    again = FsStore(tmp_path / "d")
    assert _view(again) == want
    again.close()


def test_past_the_hard_line_a_commit_waits_for_the_rewrite_in_flight(tmp_path: Path) -> None:
    # Prevents: a slow disk letting the log grow without bound while its rewrite is in flight
    # (the bound: 2x live + SLACK plus the one commit that crossed it).
    ops = GatedOps()
    store = FsStore(tmp_path / "d", ops=ops)
    _seed(store)
    log = tmp_path / "d" / f"{SID}.jsonl"
    ops.held = True
    done = threading.Event()
    sizes: list[int] = []

    def stream() -> None:
        for k in range(1, 400):
            store.commit(SID, _update(k))
            sizes.append(log.stat().st_size)
        done.set()

    writer = threading.Thread(target=stream)
    writer.start()
    assert ops.entered.wait(30)
    writer.join(0.5)
    assert writer.is_alive() and not done.is_set()  # blocked at the hard line, not appending on
    budget = store._budgets[SID]
    crossing = sizes[-1] - sizes[-2]  # the commit that crossed the line
    assert sizes[-1] == budget.disk <= _rewrite.RATIO * budget.live + _rewrite.SLACK + crossing
    ops.gate.set()
    writer.join(30)
    assert done.is_set()
    assert max(sizes) <= 3 * budget.live + 64 * 1024
    store.close()


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_threads_streaming_while_rewrites_land_read_back_after_a_reopen(tmp_path: Path, durability: Any) -> None:
    # Prevents: a rewrite landing between two commits of concurrent streams (same session and
    # others) losing one, or pointing a lazy body at the wrong line of the new log; in fsync
    # mode, a rewrite landing while those commits still owe their (group) fsync.
    where = tmp_path / "d"
    sm = session_manager.open(where, ids=SequentialIds(), durability=durability)
    sessions = [sm.call("session::create", {})["session_id"] for _ in range(3)]
    replies = {sid: sm.call("session::append", {"session_id": sid, "message": {
        "role": "assistant", "content": [], "stop_reason": "end", "model": "m", "provider": "p",
        "timestamp": 1}})["entry_id"] for sid in sessions}
    texts: dict[tuple[str, int], str] = {}
    errors: list[BaseException] = []

    def stream(sid: str, worker: int) -> None:
        try:
            for k in range(300):
                text = f"w{worker} " + "token " * k
                sm.call("session::update-message", {"session_id": sid, "entry_id": replies[sid],
                                                    "content": [{"type": "text", "text": text}]})
                texts[sid, worker] = text
                if k % 50 == 0:  # read a lazy body back while rewrites land
                    got = sm.call("session::get-message", {"session_id": sid, "entry_id": replies[sid]})
                    assert got["entry"]["kind"] == "message"
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=stream, args=(sid, w)) for sid in sessions for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in threads)
    store = sm.service.store
    assert isinstance(store, FsStore) and store.compactions >= 3
    final = {sid: sm.call("session::get-message", {"session_id": sid, "entry_id": replies[sid]})["entry"]
             for sid in sessions}
    for sid in sessions:
        assert final[sid]["revision"] == 600
        assert final[sid]["message"]["content"][0]["text"] in (texts[sid, 0], texts[sid, 1])
    sm.close()
    assert _temps(where) == []
    with session_manager.open(where) as again:
        for sid in sessions:
            assert again.call("session::get-message", {"session_id": sid, "entry_id": replies[sid]})["entry"] == \
                final[sid]
            assert again.call("session::get", {"session_id": sid})["meta"]["message_count"] == 1


def test_a_rewrite_whose_session_left_the_cache_is_abandoned(tmp_path: Path) -> None:
    # Prevents: a rewrite landing for a state the cache dropped (a newer load would not see
    # the new log's offsets), and the session losing commits because of it.
    ops = GatedOps()
    store = FsStore(tmp_path / "d", ops=ops)
    _seed(store)
    k = _hold_a_rewrite(store, ops)
    store.cache_bytes = 0  # evicts every loaded session
    ops.gate.set()
    assert store._compactor is not None
    store._compactor.wait(SID)
    assert store.compactions == 0 and _temps(tmp_path / "d") == []
    k += 1
    store.commit(SID, _update(k))
    _reads_back_after_reopen(store, tmp_path / "d", k)


def test_past_the_hard_line_is_past_the_soft_line_too() -> None:
    # Prevents: the commit path's early return below the soft line (_online._maybe_compact)
    # skipping an inline rewrite, were the soft line ever moved past the hard one.
    assert _rewrite.SOFT_SLACK <= _rewrite.SLACK
    budget = _rewrite.LogBudget()
    budget.live = 1000
    for disk in range(0, 2 * budget.live + _rewrite.SLACK + 2):
        budget.disk = disk
        assert not budget.wants_compaction() or budget.wants_background()


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_rewrites_of_a_small_log_write_no_index_and_close_writes_one(tmp_path: Path, monkeypatch: Any,
                                                                     durability: Any) -> None:
    # Prevents: every background rewrite of a streamed reply's small log paying an index file create
    # and rename (milliseconds of a 2-core box each), the replaced log's index staying behind (a later
    # log that got its inode back could match it), or the session left without an index at close.
    where = tmp_path / "d"
    store = FsStore(where, durability)
    _seed(store)
    index = store._files.files(SID).index
    assert os.path.exists(index)  # the first commit wrote one
    written: list[str] = []
    real = _sidecar.write_index
    monkeypatch.setattr(_sidecar, "write_index", lambda path, *a, **k: (written.append(path), real(path, *a, **k)))
    k = 0
    assert store._compactor is not None
    while store.compactions < 3:
        k += 1
        store.commit(SID, _update(k))
        assert k < 10_000
    store._compactor.wait(SID)
    assert written == [] and not os.path.exists(index)
    assert os.path.getsize(where / f"{SID}.jsonl") < 256 * 1024
    want = _view(store)
    store.close()
    assert written == [index] and os.path.exists(index)
    again = FsStore(where)
    assert _view(again) == want and want[3][0]["revision"] == k
    again.close()
