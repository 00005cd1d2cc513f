"""A commit that crosses the soft and the hard line at once (a streamed entry larger than the
gap between them) with no rewrite in flight: the rewrite goes to the background, and the
commit after it waits for it to land, so the bound holds as it did inline."""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

import pytest

from session_manager.store import FsStore
from session_manager.store.fs import _rewrite
from session_manager.store.fs._fileops import StrPath
from tests.unit.test_background_compaction import SID, GatedOps, _reads_back_after_reopen, _seed, _temps, _update

pytestmark = pytest.mark.usefixtures("background_rewrites")


def _cross_both_lines(store: FsStore) -> int:
    """Commit updates until one takes the log past the hard line (on a thread: an inline rewrite
    would block on the gate); the last revision."""
    budget = store._budgets[SID]
    k = 0
    # (the line itself, not ``wants_compaction``: a rewrite that failed at once moves the retry mark)
    while budget.disk <= _rewrite.RATIO * budget.live + _rewrite.SLACK:
        k += 1
        t = threading.Thread(target=store.commit, args=(SID, _update(k)))
        t.start()
        t.join(30)
        assert not t.is_alive()  # the crossing commit returned: its rewrite was not on its path
        assert k < 10_000
    return k


def test_the_commit_crossing_the_hard_line_leaves_the_rewrite_to_the_background(tmp_path: Path,
                                                                                monkeypatch: Any) -> None:
    # Prevents: a commit that jumps past both lines at once rewriting inline, the temp's fsync on the
    # caller's path (a 30 KB streamed reply did 357 of its 533 rewrites so); and, with the rewrite in
    # the background, the next commit appending on past the bound instead of waiting for it.
    monkeypatch.setattr(_rewrite, "SOFT_SLACK", _rewrite.SLACK)  # every crossing crosses both
    ops = GatedOps()
    where = tmp_path / "d"
    store = FsStore(where, ops=ops)
    _seed(store)
    log = where / f"{SID}.jsonl"
    ops.held = True
    k = _cross_both_lines(store)
    assert store._compactor is not None and store._compactor.rewriting(SID)
    assert ops.entered.wait(30)
    crossed = log.stat().st_size
    budget = store._budgets[SID]
    assert store.compactions == 0 and crossed == budget.disk
    nxt = threading.Thread(target=store.commit, args=(SID, _update(k + 1)))
    nxt.start()
    nxt.join(0.5)
    assert nxt.is_alive() and log.stat().st_size == crossed  # waiting at the hard line, not appending
    ops.gate.set()
    nxt.join(30)
    assert not nxt.is_alive()
    store._compactor.wait(SID)
    assert store.compactions >= 1 and _temps(where) == []
    assert log.stat().st_size <= 3 * budget.live + 64 * 1024
    _reads_back_after_reopen(store, where, k + 1)


class TempOpenFails(GatedOps):
    def open(self, path: StrPath, flags: int, mode: int = 0o644) -> int:
        if str(path).endswith(_rewrite.TEMP_SUFFIX):
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().open(path, flags, mode)


def test_a_failed_background_rewrite_past_the_hard_line_keeps_every_commit(tmp_path: Path,
                                                                           monkeypatch: Any) -> None:
    # Prevents: a rewrite started past the hard line that fails stranding the commits that waited
    # for it, or being retried on every commit after (it waits until the log has doubled, as inline).
    monkeypatch.setattr(_rewrite, "SOFT_SLACK", _rewrite.SLACK)
    ops = TempOpenFails()
    where = tmp_path / "d"
    store = FsStore(where, ops=ops)
    _seed(store)
    k = _cross_both_lines(store)
    assert store._compactor is not None
    store._compactor.wait(SID)
    budget = store._budgets[SID]
    assert store.compactions == 0 and budget.retry_at > budget.disk and not budget.wants_background()
    for _ in range(3):
        k += 1
        store.commit(SID, _update(k))
    assert not store._compactor.rewriting(SID) and _temps(where) == []
    _reads_back_after_reopen(store, where, k)
