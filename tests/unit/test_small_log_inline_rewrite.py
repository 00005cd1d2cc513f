"""A small log (live state at most ``_rewrite.INLINE_LIVE``) is rewritten inline by the
commit that crosses the hard line, never in the background; a larger one still goes to the
background at the soft line. The inline rewrite of a log under ``SAVE_MIN_BYTES`` writes no
index, as a background one does, and removes the replaced log's."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._wire.events import EVENT_FUNCTIONS, ON_MESSAGE_UPDATED
from session_manager.store import Commit, FsStore
from session_manager.store.fs import _logfiles, _rewrite, _sidecar
from session_manager.store.fs._background import Compactor, Job
from session_manager.testing.contract import message, meta
from tests.unit.test_background_compaction import SID, _reads_back_after_reopen, _seed, _temps, _update


def _jobs_started(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The session ids of every background rewrite started from now on."""
    started: list[str] = []
    real = Compactor.start

    def start(compactor: Compactor, job: Job) -> bool:
        started.append(job.session_id)
        return real(compactor, job)

    monkeypatch.setattr(Compactor, "start", start)
    return started


def _log_size(where: Path) -> int:
    return os.path.getsize(where / f"{SID}.jsonl")


def test_a_small_log_is_rewritten_inline_by_the_commit_that_crosses_the_hard_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a streamed reply's few-KB log handed to the background worker (its GIL turns and
    # its fsync slowed every update: ~9k/s against ~12k/s inline), or the bound of issue 9 broken
    # by a small log that no rewrite catches (it now waits for the hard line, not the soft one).
    where = tmp_path / "d"
    started = _jobs_started(monkeypatch)
    store = FsStore(where)
    _seed(store)
    budget = store._budgets[SID]
    k, crossings = 0, 0
    while store.compactions < 3:
        k += 1
        past_hard_line = budget.disk > _rewrite.RATIO * budget.live + _rewrite.SLACK
        before = store.compactions
        store.commit(SID, _update(k))
        if store.compactions > before:
            crossings += 1
            # Rewritten by this very commit: the file is the snapshot (plus nothing), at once.
            assert _log_size(where) == budget.disk <= 2 * budget.live
        assert not past_hard_line or store.compactions > before  # never left past the line
        assert budget.disk <= _rewrite.RATIO * budget.live + _rewrite.SLACK + budget.live
        assert store._compactor is not None and not store._compactor.rewriting(SID)
        assert k < 10_000
    assert started == [] and crossings == 3 and budget.live <= _rewrite.INLINE_LIVE
    assert _temps(where) == []
    assert not os.path.exists(store._files.files(SID).index)  # small: replayed, not indexed
    _reads_back_after_reopen(store, where, k)


def test_a_log_past_the_inline_size_is_still_rewritten_in_the_background(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a large session's rewrite (its whole snapshot written and fsynced) run on the
    # caller's path because the inline rule took every log.
    monkeypatch.setattr(_rewrite, "INLINE_LIVE", 2048)
    where = tmp_path / "d"
    started = _jobs_started(monkeypatch)
    store = FsStore(where)
    _seed(store)
    big = message("e_2", "e_1", "x" * 4096)  # live is now past INLINE_LIVE
    store.commit(SID, Commit(entries=(big,), leaf="e_2", meta=meta(SID, message_count=2, updated_at=1)))
    assert store._budgets[SID].live > _rewrite.INLINE_LIVE
    k = 0
    while not started:
        k += 1
        store.commit(SID, _update(k))
        assert k < 10_000
    assert started == [SID]
    assert store._compactor is not None
    store._compactor.wait(SID)
    assert store.compactions == 1
    assert store.get_entry(SID, "e_2") == big and store.get_leaf(SID) == "e_2"
    _reads_back_after_reopen(store, where, k)


def test_an_inline_rewrite_into_a_small_log_removes_the_replaced_index_and_writes_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: every inline rewrite of a streamed reply paying a file create and a rename for an
    # index no open needs, or the replaced log's index left behind to describe a file that is gone.
    monkeypatch.setattr(_logfiles, "SAVE_MIN_BYTES", 8 * 1024)  # the growing log gets an index first
    where = tmp_path / "d"
    store = FsStore(where)
    _seed(store)
    index = store._files.files(SID).index
    k = 0
    while not os.path.exists(index):
        k += 1
        store.commit(SID, _update(k))
        assert store.compactions == 0 and k < 10_000
    while store.compactions < 1:
        k += 1
        store.commit(SID, _update(k))
        assert k < 10_000
    assert _log_size(where) < _logfiles.SAVE_MIN_BYTES
    assert not os.path.exists(index)
    store.close()  # close saves the index of what the store holds
    assert os.path.exists(index)
    loaded = _sidecar.load(str(where / f"{SID}.jsonl"), index, SID, lambda o, n: b"")
    assert loaded.from_index and loaded.index_current and loaded.covered == _log_size(where)
    again = FsStore(where)
    entry = again.get_entry(SID, "e_1")
    assert entry is not None and entry["revision"] == k and again.get_leaf(SID) == "e_1"
    again.close()


def test_a_stream_through_the_embedded_host_stays_bounded_and_reads_back(tmp_path: Path) -> None:
    # Prevents: the inline rule breaking what a user sees of a streamed reply: the responses, the
    # one on-message-updated per token (and no other event), the log within issue 9's bound at
    # every token, the final text after a restart.
    where = tmp_path / "d"
    events: list[tuple[str, Any]] = []
    with session_manager.open(where) as sm:
        def seen(fid: str) -> Callable[[dict[str, Any]], None]:
            return lambda e: events.append((fid, e.get("revision")))

        for fid in EVENT_FUNCTIONS:
            sm.observe({"function_id": fid}, seen(fid))
        sid = sm.call("session::create", {"title": "stream"})["session_id"]
        eid = sm.call("session::append", {"session_id": sid, "message": {
            "role": "assistant", "content": [{"type": "text", "text": ""}], "stop_reason": "end", "model": "m",
            "provider": "p", "timestamp": 1}})["entry_id"]
        events.clear()
        text = ""
        for k in range(1, 1501):
            text += " tok"
            got = sm.call("session::update-message",
                          {"session_id": sid, "entry_id": eid, "content": [{"type": "text", "text": text}]})
            assert got == {"updated": True, "revision": k}
            final = len(text)
            assert os.path.getsize(where / f"{sid}.jsonl") <= 3 * (final + 2048) + 64 * 1024
        assert events == [(ON_MESSAGE_UPDATED, k) for k in range(1, 1501)]
        assert sm.service.store.compactions >= 10  # type: ignore[attr-defined]
    with session_manager.open(where) as again:
        got = again.call("session::get-message", {"session_id": sid, "entry_id": eid})
        assert got["entry"]["revision"] == 1500
        assert got["entry"]["message"]["content"] == [{"type": "text", "text": " tok" * 1500}]
