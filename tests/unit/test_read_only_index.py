"""A read-only fs store reads through a session's index sidecar when it
matches the log, never writes one, and never trusts one that does not match."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from session_manager.store import Commit, FsStore
from session_manager.store.fs import _follower
from session_manager.store.fs._lazy import LazyEntries
from session_manager.store.fs._records import encode_commit
from session_manager.testing.contract import message, meta
from tests.unit.index_views import oracle, view


def written(data: Path, session_id: str = "s_1", n: int = 30) -> Path:
    """A session written (and closed) by a writable store: its index is current."""
    store = FsStore(data)
    store.commit(session_id, Commit(meta=meta(session_id)))
    parent = None
    for i in range(n):
        eid = f"e_{i}"
        store.commit(session_id, Commit(entries=(message(eid, parent, f"m{i}"),), leaf=eid,
                                        meta=meta(session_id, message_count=i + 1)))
        parent = eid
    store.commit(session_id, Commit(entries=(message("e_b", "e_3", "branch"),), leaf="e_b",
                                    meta=meta(session_id, message_count=n + 1)))
    store.commit(session_id, Commit(leaf=parent, meta=meta(session_id, message_count=n + 1)))
    store.close()
    return data / f"{session_id}.jsonl"


def files(data: Path) -> dict[str, bytes]:
    return {str(p.relative_to(data)): p.read_bytes() for p in sorted(data.rglob("*")) if p.is_file()}


def lazily_held(store: FsStore, session_id: str) -> LazyEntries | None:
    state = store._sessions.get(session_id)
    entries = state.entries if state is not None else None
    return entries if isinstance(entries, LazyEntries) else None


def test_a_matching_index_is_adopted_and_nothing_is_written(tmp_path: Path) -> None:
    # Prevents: read-only opens replaying every log whole although a matching index sits beside it,
    # or a read-only open writing (or touching) anything.
    log = written(tmp_path)
    before = files(tmp_path)
    store = FsStore(tmp_path, read_only=True)
    assert store.get_meta("s_1") == oracle(log, "s_1")["meta"]
    entries = lazily_held(store, "s_1")
    assert entries is not None and entries.body_bytes == 0  # from the index: no body decoded yet
    assert view(store, "s_1") == oracle(log, "s_1")
    store.close()
    assert files(tmp_path) == before


def test_no_index_is_written_for_a_reference_written_dir(tmp_path: Path) -> None:
    # Prevents: a read-only open creating the index folder (it must write nothing).
    log = written(tmp_path)
    for p in (tmp_path / ".index").iterdir():
        p.unlink()
    (tmp_path / ".index").rmdir()
    store = FsStore(tmp_path, read_only=True)
    assert view(store, "s_1") == oracle(log, "s_1")
    assert lazily_held(store, "s_1") is None
    store.close()
    assert not (tmp_path / ".index").exists()


@pytest.mark.parametrize("how", ["replaced", "rewritten in place", "index flipped", "index cut"])
def test_an_index_that_does_not_match_is_never_trusted(tmp_path: Path, how: str) -> None:
    # Prevents: a read-only store reading a log through the offsets of another file (a compaction's
    # replacement, a same-size rewrite) or through a damaged sidecar.
    log = written(tmp_path)
    idx = tmp_path / ".index" / "s_1.idx"
    raw = log.read_bytes()
    other = raw.replace(b'"m29"', b'"zz9"')  # same size, another last entry
    assert other != raw and len(other) == len(raw)
    if how == "replaced":
        (tmp_path / "new").write_bytes(other)
        os.replace(tmp_path / "new", log)
    elif how == "rewritten in place":
        with open(log, "r+b") as f:
            f.write(other)
    elif how == "index flipped":
        good = idx.read_bytes()
        idx.write_bytes(good[:40] + bytes([good[40] ^ 1]) + good[41:])
    else:
        idx.write_bytes(idx.read_bytes()[:-30])
    index_before = idx.read_bytes()
    store = FsStore(tmp_path, read_only=True)
    assert view(store, "s_1") == oracle(log, "s_1")
    assert lazily_held(store, "s_1") is None
    store.close()
    assert idx.read_bytes() == index_before


def test_appends_after_the_index_are_followed(tmp_path: Path) -> None:
    # Prevents: bytes a writer appended after its last index (or appends while the reader follows,
    # a commit group split across two reads) lost, doubled, or read back from the wrong offset.
    log = written(tmp_path)
    store = FsStore(tmp_path, read_only=True)
    assert view(store, "s_1") == oracle(log, "s_1")
    split = encode_commit(Commit(entries=(message("e_x", "e_29", "x"), message("e_y", "e_x", "y")), leaf="e_y",
                                 meta=meta("s_1", message_count=40)))
    cut = split.index(b"\n") + 1
    for chunk in (encode_commit(Commit(entries=(message("e_30", "e_29", "late"),), leaf="e_30",
                                       meta=meta("s_1", message_count=31))),
                  split[:cut], split[cut:],
                  encode_commit(Commit(entries=({**message("e_30", "e_29", "edited"), "revision": 1},),
                                       meta=meta("s_1", message_count=40)))):
        with open(log, "ab") as f:
            f.write(chunk)
        assert view(store, "s_1") == oracle(log, "s_1")
    assert lazily_held(store, "s_1") is not None  # still the adopted index, followed on top
    fresh = FsStore(tmp_path, read_only=True)
    assert view(fresh, "s_1") == oracle(log, "s_1")
    store.close()
    fresh.close()


def test_bodies_stay_readable_after_the_followers_descriptor_is_closed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a path taken from an adopted index reading through a descriptor the follower closed
    # (evicted for another log) — a closed or, worse, reused descriptor number.
    monkeypatch.setattr(_follower, "MAX_OPEN", 1)
    log_a = written(tmp_path, "s_a", 5)
    log_b = written(tmp_path, "s_b", 5)
    store = FsStore(tmp_path, read_only=True)
    path_a = store.path("s_a", store.get_leaf("s_a"))
    assert view(store, "s_b") == oracle(log_b, "s_b")  # evicts s_a's descriptor
    assert [e["id"] for e in path_a] == oracle(log_a, "s_a")["path"]
    assert list(path_a) == [oracle(log_a, "s_a")["entries"][eid] for eid in oracle(log_a, "s_a")["path"]]
    store.close()
