"""Issue 9's bound (the log stays within 3x the live state + 64 KiB) holds for a session
loaded from disk, not only for one streamed since the store opened: a load knows each live
entry's line only through the index, and an update must replace that size, not add to it."""

from __future__ import annotations

from pathlib import Path

from session_manager.store import FsStore
from session_manager.store.base import Commit
from session_manager.store.fs._records import encode_snapshot
from session_manager.testing.contract import message, meta

SID = "s_1"


def _live(store: FsStore) -> int:
    """The bytes the live state takes: what a rewrite would write now."""
    state = store._sessions[SID]
    return len(encode_snapshot(state.meta, state.entries.values(), state.leaf))


def test_a_long_message_streamed_again_after_a_reopen_keeps_the_log_bounded(tmp_path: Path) -> None:
    # Prevents: a load charging the live entries from the index but not knowing each one's size,
    # so the first update of a loaded entry adds its new size on top of the old (a 400 KB reply
    # streamed again from scratch after a restart let the log reach ~2x the old reply before any
    # rewrite, far past 3x the new one + 64 KiB).
    where = tmp_path / "d"
    store = FsStore(where)
    store.commit(SID, Commit(meta=meta(SID)))
    store.commit(SID, Commit(entries=(message("e_1", None, "x" * 400_000),), leaf="e_1",
                             meta=meta(SID, message_count=1)))
    store.close()
    store = FsStore(where)
    log = where / f"{SID}.jsonl"
    assert store.get_entry(SID, "e_1") is not None  # loaded from the log
    last = 0
    for k in range(1, 1500):
        store.commit(SID, Commit(entries=(message("e_1", None, "tok " * k, revision=k),),
                                 meta=meta(SID, message_count=1, updated_at=k)))
        assert log.stat().st_size <= 3 * _live(store) + 64 * 1024, k
        last = k
    assert store.compactions >= 1
    want = store.get_entry(SID, "e_1"), store.get_meta(SID), store.get_leaf(SID)
    assert want[0] is not None and want[0]["revision"] == last
    store.close()
    again = FsStore(where)
    assert (again.get_entry(SID, "e_1"), again.get_meta(SID), again.get_leaf(SID)) == want
    again.close()


def test_a_session_evicted_and_loaded_again_mid_stream_keeps_the_log_bounded(tmp_path: Path) -> None:
    # Prevents: the same double count after every eviction (a cache too small for two streaming
    # sessions reloads each one on its next commit): each reload re-added the streamed entry's
    # size, so a reply that shrank between updates left its log past 3x live + 64 KiB.
    where = tmp_path / "d"
    store = FsStore(where, cache_bytes=20_000)
    sids = ("s_a", "s_b")
    for sid in sids:
        store.commit(sid, Commit(meta=meta(sid)))
        store.commit(sid, Commit(entries=(message("e", None),), leaf="e", meta=meta(sid, message_count=1)))
    last = 0
    for k in range(1, 400):
        for sid in sids:
            text = "tok " * (300 * (k % 40 + 1))  # grows, then starts again small
            written = Commit(entries=(message("e", None, text, revision=k),), meta=meta(sid, message_count=1,
                                                                                        updated_at=k))
            store.commit(sid, written)
            live = len(encode_snapshot(written.meta, written.entries, "e"))
            assert (where / f"{sid}.jsonl").stat().st_size <= 3 * live + 64 * 1024, (sid, k)
        last = k
    want = {sid: (store.get_entry(sid, "e"), store.get_meta(sid)) for sid in sids}
    assert all(entry is not None and entry["revision"] == last for entry, _ in want.values())
    store.close()
    again = FsStore(where)
    assert {sid: (again.get_entry(sid, "e"), again.get_meta(sid)) for sid in sids} == want
    again.close()
