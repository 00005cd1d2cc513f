"""The sqlite search index caught up before each query (schema version 4): what the
commits left behind is indexed exactly once, by whichever store searches first."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import session_manager
from session_manager.store.sqlite import search as sqlite_search


def _user(text: str) -> Any:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def _hits(sm: Any, query: str) -> list[str]:
    return sorted(h["entry_id"] for h in sm.call("session::search", {"query": query, "limit": 1000})["hits"])


def test_two_stores_appending_and_searching_at_once_index_every_entry_once(tmp_path: Path) -> None:
    # Prevents: two stores (or processes) catching up together indexing an entry twice (a
    # duplicate search_docs row: a failed search or a doubled hit) or skipping one (a mark read
    # before the write lock, then moved past entries the other store had not indexed).
    uri = f"sqlite:///{tmp_path / 's.db'}"
    managers = [session_manager.open(uri), session_manager.open(uri)]
    written: list[list[str]] = [[], []]
    errors: list[BaseException] = []

    def work(n: int) -> None:
        sm = managers[n]
        try:
            sid = sm.create().session_id
            for i in range(60):
                written[n].append(sm.append(sid, message=_user(f"shared word{n}x{i}")).entry_id)
                if i % 5 == 0:
                    sm.call("session::search", {"query": "shared"})
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        every = sorted(written[0] + written[1])
        assert _hits(managers[0], "shared") == _hits(managers[1], "shared") == every
    finally:
        for sm in managers:
            sm.close()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT seq) FROM search_docs").fetchone() == (120, 120)
        assert conn.execute("SELECT docs FROM search_totals").fetchall() == [(60,), (60,)]


def test_a_reused_entry_number_after_a_delete_is_still_indexed(tmp_path: Path) -> None:
    # Prevents: an entry missing from every search after the newest session was deleted: SQLite
    # gives the deleted rows' numbers again, and a high-water mark left above them hides them.
    with session_manager.open(f"sqlite:///{tmp_path / 's.db'}") as sm:
        keep = sm.create().session_id
        sm.append(keep, message=_user("kept words"))
        gone = sm.create().session_id
        for i in range(3):
            sm.append(gone, message=_user(f"gone words {i}"))
        assert len(_hits(sm, "words")) == 4  # indexed: the mark is past the deleted entries
        sm.delete(gone)
        later = sm.append(keep, message=_user("later words")).entry_id
        assert later in _hits(sm, "later") and len(_hits(sm, "words")) == 2


def test_a_revision_of_an_indexed_entry_is_indexed_again(tmp_path: Path) -> None:
    # Prevents: an edited entry found by its old words (or not by its new ones) once it was
    # indexed before the edit: a revision keeps its number, below the mark.
    with session_manager.open(f"sqlite:///{tmp_path / 's.db'}") as sm:
        sid = sm.create().session_id
        first = sm.append(sid, message=_user("quick brown fox")).entry_id
        assert _hits(sm, "quick") == [first]
        sm.call("session::update-message", {"session_id": sid, "entry_id": first,
                                            "content": [{"type": "text", "text": "slow turtle"}]})
        assert _hits(sm, "quick") == [] and _hits(sm, "turtle") == [first]


def test_catch_up_goes_in_batches_and_an_append_writes_no_index_row(tmp_path: Path) -> None:
    # Prevents: the index written back into every commit (issue 26: a commit writing the FTS
    # B-trees), or a catch-up reporting it is done before the last batch.
    path = tmp_path / "s.db"
    with session_manager.open(f"sqlite:///{path}") as sm:
        sid = sm.create().session_id
        for i in range(7):
            sm.append(sid, message=_user(f"batch {i}"))
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT count(*) FROM search_docs").fetchone()[0] == 0
            assert sqlite_search.behind(conn)
            conn.execute("BEGIN IMMEDIATE")
            assert sqlite_search.catch_up(conn, limit=3) and sqlite_search.catch_up(conn, limit=3)
            assert not sqlite_search.catch_up(conn, limit=3)
            conn.execute("COMMIT")
            assert not sqlite_search.behind(conn)
            assert conn.execute("SELECT count(*) FROM search_docs").fetchone()[0] == 7
        assert len(_hits(sm, "batch")) == 7


def _segments(path: Path) -> int:
    """How many segments the FTS5 index has (its structure record: a 4-byte cookie, then
    the number of levels and of segments as varints, each below 128 here)."""
    with sqlite3.connect(path) as conn:
        record = conn.execute("SELECT block FROM search_fts_data WHERE id = 10").fetchone()[0]
    return int(record[5])


def test_a_large_catch_up_leaves_the_index_in_one_segment(tmp_path: Path) -> None:
    # Prevents: a catch-up of many entries leaving one FTS5 segment per batch, which every later
    # query probes one by one (a 100,000-entry index answered in twice the time).
    path = tmp_path / "s.db"
    sm = session_manager.open(f"sqlite:///{path}")
    try:
        sid = sm.create().session_id
        for i in range(0, sqlite_search.BATCH * 2 + 100, 100):
            sm.append_many(sid, messages=[_user(f"word{i + j} common") for j in range(100)])
        assert len(_hits(sm, f"word{sqlite_search.BATCH * 2 + 99}")) == 1
    finally:
        sm.close()
    assert _segments(path) == 1
