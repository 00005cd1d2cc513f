"""A read-only store following a log its writer compacts: a reader that took
its path before the follower re-read the replaced log still reads it whole."""

from __future__ import annotations

from pathlib import Path

from session_manager.store import Commit, FsStore
from session_manager.testing.contract import message, meta

N = 20


def seeded(data: Path) -> None:
    store = FsStore(data)
    store.commit("s_1", Commit(meta=meta("s_1")))
    parent = None
    for i in range(N):
        eid = f"e_{i}"
        store.commit("s_1", Commit(entries=(message(eid, parent, f"m{i}"),), leaf=eid,
                                   meta=meta("s_1", message_count=i + 1)))
        parent = eid
    store.close()  # the index is current: the follower adopts it, bodies stay on disk


def test_a_path_taken_before_a_compaction_reads_whole_after_the_follower_re_reads(tmp_path: Path) -> None:
    # Prevents: the follower replacing a session's entries (the log was compacted: a new file)
    # without detaching the old lazy mapping; a reader still holding a path into it read its
    # bodies at the old offsets in the new file and got session/storage ('log changed under
    # its index') for a healthy session.
    seeded(tmp_path)
    writer = FsStore(tmp_path)
    follower = FsStore(tmp_path, read_only=True)
    try:
        path = follower.path("s_1", f"e_{N - 1}")  # lazily held: no body decoded yet
        # Superseded lines first, so the rewrite moves every live line.
        for i in range(N):
            writer.commit("s_1", Commit(entries=(message(f"e_{i}", f"e_{i - 1}" if i else None, f"v{i}"),),
                                        meta=meta("s_1", message_count=N)))
        writer.compact("s_1")
        assert follower.get_meta("s_1") is not None  # the follower re-reads the replaced log
        texts = [e["message"]["content"][0]["text"] for e in path]
        assert [e["id"] for e in path] == [f"e_{i}" for i in range(N)]
        assert texts == [f"v{i}" for i in range(N)]  # each entry as stored now, none invented
    finally:
        follower.close()
        writer.close()
