"""The inline rewrite of a small log (``_rewrite.INLINE_LIVE``) is as safe as the background
one: crash points (the replaced index's removal included), eviction and reopen, a log growing
past INLINE_LIVE and back, read-only followers, concurrent streams, issue 9's bound."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.ids import SequentialIds
from session_manager.store import Commit, FsStore
from session_manager.store.fs import _logfiles, _rewrite, _sidecar
from session_manager.testing.contract import message, meta
from session_manager.testing.contract_concurrency import run_threads
from tests.unit.test_background_compaction import SID, CrashPoints, _seed, _temps, _update, _view
from tests.unit.test_small_log_inline_rewrite import _jobs_started


class InlineCrashPoints(CrashPoints):
    """:class:`CrashPoints` for an inline rewrite, index sidecars (and their temps) included; the
    test copies at the removal of the replaced log's index too."""

    ignored = (".session-manager.lock",)


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_a_crash_at_any_step_of_an_inline_small_rewrite(tmp_path: Path, durability: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a crash inside an inline rewrite (temp, rename, index removal) leaving a log or an
    # index that reopens to anything but the acknowledged state, in either durability mode.
    where = tmp_path / "d"
    ops = InlineCrashPoints(where, tmp_path / "crashes")
    store = FsStore(where, durability, ops=ops)
    ops.store = store
    real_remove = _sidecar.remove_index

    removed: list[bool] = []

    def remove(path: str) -> None:
        removed.append(os.path.exists(path))
        ops._copy()
        real_remove(path)
        ops._copy()

    monkeypatch.setattr(_sidecar, "remove_index", remove)
    monkeypatch.setattr(_logfiles, "SAVE_MIN_BYTES", 4 * 1024)  # an index exists before each rewrite
    _seed(store)
    for k in range(1, 400):
        store.commit(SID, _update(k))
    assert store._compactor is not None and not store._compactor.rewriting(SID)
    store.close()
    assert store.compactions >= 2 and len(ops.copies) >= 8
    assert any(removed)  # the window between the rename and the stale index's removal was taken
    assert store._compactor is not None
    for copy, acknowledged in ops.copies:
        reopened = FsStore(copy)
        assert _view(reopened) == acknowledged, copy.name
        reopened.close()
        ro = FsStore(copy, read_only=True)
        assert _view(ro) == acknowledged, copy.name
        ro.close()


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_inline_small_rewrite_then_eviction_then_reopen(tmp_path: Path, durability: Any) -> None:
    # Prevents: the index bookkeeping of an inline small rewrite (saved at 0, no sidecar) making a
    # later eviction or close write an index that loads to a different state.
    where = tmp_path / "d"
    store = FsStore(where, durability)
    _seed(store)
    other = "s_2"
    store.commit(other, Commit(meta=meta(other)))
    k = 0
    for round_ in range(6):
        before = store.compactions
        while store.compactions == before:
            k += 1
            store.commit(SID, _update(k))
        # a few commits after the rewrite, then evict everything
        for _ in range(round_ * 3):
            k += 1
            store.commit(SID, _update(k))
        want = _view(store)
        store.cache_bytes = 0
        store.cache_bytes = 1 << 30
        assert _view(store) == want
        index = store._files.files(SID).index
        log = str(where / f"{SID}.jsonl")
        if os.path.exists(index):
            loaded = _sidecar.load(log, index, SID, lambda o, n: b"")
            assert loaded.state.leaf == want[1]
    want = _view(store)
    store.close()
    again = FsStore(where)
    assert _view(again) == want
    again.close()


def test_small_then_large_then_small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a session crossing INLINE_LIVE mid-stream (inline, then background, then inline)
    # losing or reviving a revision.
    monkeypatch.setattr(_rewrite, "INLINE_LIVE", 6 * 1024)  # e_1 grows to ~12 KB
    monkeypatch.setattr(_logfiles, "SAVE_MIN_BYTES", 32 * 1024)
    where = tmp_path / "d"
    started = _jobs_started(monkeypatch)
    store = FsStore(where)
    _seed(store)
    # grow e_1 from small to large, then shrink it back
    for k, n in enumerate(list(range(1, 3000, 7)) + list(range(3000, 1, -11)), start=1):
        entry = message("e_1", None, "tok " * n, revision=k)
        store.commit(SID, Commit(entries=(entry,), meta=meta(SID, message_count=1, updated_at=k)))
        if k % 37 == 0:
            assert store._compactor is not None
            store._compactor.wait(SID)
            want = _view(store)
            store.cache_bytes = 0
            store.cache_bytes = 1 << 30
            assert _view(store) == want
    assert started and store.compactions > len(started)  # both ways: in the background and inline
    assert store._compactor is not None
    store._compactor.wait(SID)
    want = _view(store)
    store.close()
    again = FsStore(where)
    assert _view(again) == want
    again.close()
    ro = FsStore(where, read_only=True)
    assert _view(ro) == want
    ro.close()


def test_follower_of_inline_rewrites(tmp_path: Path) -> None:
    # Prevents: a read-only follower missing or misreading a log an inline rewrite replaced.
    where = tmp_path / "d"
    writer = FsStore(where)
    _seed(writer)
    follower = FsStore(where, read_only=True)
    try:
        k = 0
        while writer.compactions < 8:
            k += 1
            writer.commit(SID, _update(k))
            if k % 5 == 0:
                assert _view(follower) == _view(writer)
        assert _view(follower) == _view(writer)
    finally:
        follower.close()
        writer.close()


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_threads_streaming_into_one_session_inline(tmp_path: Path, durability: Any) -> None:
    # Prevents: threads streaming into one session racing an inline rewrite (a lost revision, a temp
    # file left behind).
    where = tmp_path / "d"
    sm = session_manager.open(where, ids=SequentialIds(), durability=durability)
    sid = sm.call("session::create", {})["session_id"]
    reply = sm.call("session::append", {"session_id": sid, "message": {
        "role": "assistant", "content": [], "stop_reason": "end", "model": "m", "provider": "p",
        "timestamp": 1}})["entry_id"]
    def stream(worker: int) -> None:
        for k in range(400):
            text = f"w{worker} " + "token " * k
            sm.call("session::update-message", {"session_id": sid, "entry_id": reply,
                                                "content": [{"type": "text", "text": text}]})
            if k % 25 == 0:
                got = sm.call("session::get-message", {"session_id": sid, "entry_id": reply})
                assert got["entry"]["kind"] == "message"
                sm.call("session::get", {"session_id": sid})

    run_threads(4, stream)
    store = sm.service.store
    assert isinstance(store, FsStore) and store.compactions >= 3
    final = sm.call("session::get-message", {"session_id": sid, "entry_id": reply})["entry"]
    assert final["revision"] == 1600
    sm.close()
    assert _temps(where) == []
    with session_manager.open(where) as again:
        assert again.call("session::get-message", {"session_id": sid, "entry_id": reply})["entry"] == final


@pytest.mark.slow  # the slow lane (`pytest -m slow`): a soak (streams under constant eviction, a follower reading)
@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_streams_under_eviction_pressure_with_a_follower(tmp_path: Path, durability: Any) -> None:
    # Prevents: inline rewrites under constant eviction, with a follower reading, diverging from what
    # a reopen reads.
    where = tmp_path / "d"
    sm = session_manager.open(where, ids=SequentialIds(), durability=durability, cache_bytes=6000)
    sids = [sm.call("session::create", {})["session_id"] for _ in range(3)]
    replies = {sid: sm.call("session::append", {"session_id": sid, "message": {
        "role": "assistant", "content": [], "stop_reason": "end", "model": "m", "provider": "p",
        "timestamp": 1}})["entry_id"] for sid in sids}
    errors: list[BaseException] = []
    stop = threading.Event()

    def stream(n: int) -> None:
        sid, worker = sids[n // 2], n % 2
        for k in range(300):
            text = f"w{worker} " + "token " * k
            sm.call("session::update-message", {"session_id": sid, "entry_id": replies[sid],
                                                "content": [{"type": "text", "text": text}]})
            if k % 20 == 0:
                got = sm.call("session::get-message", {"session_id": sid, "entry_id": replies[sid]})
                assert got["entry"]["kind"] == "message"

    def follow() -> None:
        ro = FsStore(where, read_only=True)
        try:
            while not stop.is_set():
                for sid in sids:
                    e = ro.get_entry(sid, replies[sid])
                    assert e is not None and e["kind"] == "message"
        except BaseException as e:  # pragma: no cover
            errors.append(e)
        finally:
            ro.close()

    follower = threading.Thread(target=follow)
    follower.start()
    try:
        run_threads(2 * len(sids), stream)
    finally:
        stop.set()
    follower.join(60)
    assert not errors, errors
    final = {sid: sm.call("session::get-message", {"session_id": sid, "entry_id": replies[sid]})["entry"]
             for sid in sids}
    for sid in sids:
        assert final[sid]["revision"] == 600
    sm.close()
    with session_manager.open(where) as again:
        for sid in sids:
            assert again.call("session::get-message", {"session_id": sid, "entry_id": replies[sid]})["entry"] == \
                final[sid]
    ro = FsStore(where, read_only=True)
    for sid in sids:
        assert ro.get_entry(sid, replies[sid]) == final[sid]
    ro.close()
