"""``session::search`` over every store: the index against the
scan oracle, restarts, a corrupted or missing index file, erasure."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import SessionManager
from session_manager.errors import NOT_FOUND, SessionError
from session_manager.store import FsStore, MemoryStore, SessionStore
from session_manager.store.fs._search import SEARCH_DIR
from session_manager.store.fs._search_db import DB_FILE
from session_manager.store.search_index import rank
from session_manager.store.search_text import parse_query
from session_manager.store.sqlite.build import open_uri
from tests import pg_support

TEXTS = ["the quick brown fox", "Über café naïve", "brown bread and butter", "jumped over the lazy dog",
         "foxtrot alpha", "zulu brown"]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def fill(sm: SessionManager) -> list[str]:
    """Three sessions of two owners; returns their ids."""
    ids = []
    for i, owner in enumerate(["ann", "bob", "ann"]):
        sid = sm.call("session::create", {"metadata": {"owner": owner}})["session_id"]
        for text in TEXTS[i * 2 : i * 2 + 2]:
            sm.call("session::append", {"session_id": sid, "message": user(text)})
        ids.append(sid)
    return ids


def hits(sm: SessionManager, query: str, **extra: Any) -> list[tuple[str, str, float]]:
    out = sm.call("session::search", {"query": query, "limit": 500, **extra})
    return [(h["session_id"], h["entry_id"], h["score"]) for h in out["hits"]]


QUERIES = ["brown", "bro", "the", "cafe", "UBER CAF", "fox", "foxtrot a", "nothing", "brown b"]


@pytest.fixture(params=["fs", "memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    if request.param == "postgres":
        with pg_support.schema() as name:
            st = pg_support.open_store(name)
            yield st
            st.close()
        return
    if request.param == "sqlite":
        st = open_uri(f"sqlite:///{tmp_path / 'sessions.db'}")
    else:
        st = MemoryStore() if request.param == "memory" else FsStore(tmp_path)
    yield st
    st.close()


@pytest.fixture
def sm(store: SessionStore) -> Iterator[SessionManager]:
    manager = session_manager.open(store=store)
    yield manager
    manager.close()


def same_matches(store: SessionStore, query: str, scope: list[str] | None) -> None:
    """The store's index answers exactly as the scan (the definition) does."""
    parsed = parse_query(query)
    assert parsed is not None
    got = store.search(parsed, scope, None)
    want = SessionStore.search(store, parsed, scope, None)
    assert sorted(got.candidates, key=repr) == sorted(want.candidates, key=repr), query
    assert (got.docs, got.total_length, got.df) == (want.docs, want.total_length, want.df), query


def test_index_answers_like_the_scan_oracle(sm: SessionManager, store: SessionStore) -> None:
    # Prevents: an index that misses, invents or mis-counts a hit the definition gives.
    ids = fill(sm)
    for q in QUERIES:
        same_matches(store, q, None)
        same_matches(store, q, [ids[0], ids[2]])


def test_search_after_update_fork_and_delete(sm: SessionManager) -> None:
    # Prevents: an edited entry found by its old text, a fork's copies missing, a deleted session found.
    ids = fill(sm)
    first = sm.call("session::messages", {"session_id": ids[0]})["messages"][0]["entry_id"]
    sm.call("session::update-message", {"session_id": ids[0], "entry_id": first, "content": [
        {"type": "text", "text": "slow green turtle"}]})
    assert hits(sm, "quick") == []
    assert [h[:2] for h in hits(sm, "turtle")] == [(ids[0], first)]
    fork = sm.call("session::fork", {"session_id": ids[0], "entry_id": first})["session_id"]
    assert sorted(h[0] for h in hits(sm, "turtle")) == sorted([ids[0], fork])
    sm.call("session::delete", {"session_id": ids[0]})
    assert [h[0] for h in hits(sm, "turtle")] == [fork]
    assert hits(sm, "turtle", session_id=ids[0]) == []


def test_on_active_path_marks_the_branch(sm: SessionManager) -> None:
    # Prevents: every hit claiming the active path, or entries on other branches not searched.
    sid = sm.call("session::create", {})["session_id"]
    root = sm.call("session::append", {"session_id": sid, "message": user("root words")})["entry_id"]
    old = sm.call("session::append", {"session_id": sid, "message": user("branch alpha")})["entry_id"]
    sm.call("session::set-active-leaf", {"session_id": sid, "entry_id": root})
    new = sm.call("session::append", {"session_id": sid, "message": user("branch beta")})["entry_id"]
    got = {h["entry_id"]: h["on_active_path"]
           for h in sm.call("session::search", {"query": "branch"})["hits"]}
    assert got == {old: False, new: True}


def test_a_path_holds_exactly_the_entries_index_of_finds_on_a_long_branched_chain(
        sm: SessionManager, store: SessionStore) -> None:
    # Prevents: on_active_path answered by a walk that misses an ancestor far from the leaf
    # (the jump pointers of the sql stores) or claims an entry of another branch or session.
    sid = sm.call("session::create", {})["session_id"]
    other = sm.call("session::create", {})["session_id"]
    ids = [sm.call("session::append", {"session_id": sid, "message": user(f"m{i}")})["entry_id"] for i in range(150)]
    sm.call("session::set-active-leaf", {"session_id": sid, "entry_id": ids[100]})
    ids += [sm.call("session::append", {"session_id": sid, "message": user(f"b{i}")})["entry_id"] for i in range(30)]
    ids.append(sm.call("session::append", {"session_id": other, "message": user("x")})["entry_id"])
    for eid in ids:
        want = store.path(sid, store.get_leaf(sid)).index_of(eid) is not None
        assert store.path(sid, store.get_leaf(sid)).holds(eid) == want, eid
    on = [eid for eid in ids if store.path(sid, store.get_leaf(sid)).holds(eid)]
    assert on == ids[:101] + ids[150:180]
    shown = store.entries_on_active_path(sid, ids)  # (what a hit shows: one call per session)
    assert [eid for eid, (_, flag) in zip(ids, shown, strict=True) if flag] == on
    assert [entry for entry, _ in shown] == [store.get_entry(sid, eid) for eid in ids]


def test_pages_hold_limit_hits_and_the_cursor_walks_them_all(sm: SessionManager) -> None:
    # Prevents: short pages, repeated or lost hits across pages, a cursor past the end.
    sid = sm.call("session::create", {"metadata": {"owner": "ann"}})["session_id"]
    other = sm.call("session::create", {"metadata": {"owner": "bob"}})["session_id"]
    for i in range(7):
        sm.call("session::append", {"session_id": sid, "message": user(f"word {'word ' * i}")})
        sm.call("session::append", {"session_id": other, "message": user("word")})
    seen: list[str] = []
    cursor = None
    while True:
        page = sm.call("session::search", {"query": "word", "metadata": {"owner": "ann"}, "limit": 3,
                                           **({"cursor": cursor} if cursor else {})})
        seen += [h["entry_id"] for h in page["hits"]]
        cursor = page.get("next_cursor")
        if cursor is None:
            assert len(page["hits"]) == 1
            break
        assert len(page["hits"]) == 3
    assert len(seen) == len(set(seen)) == 7


def test_pages_ranked_in_the_index_match_the_definition_past_many_ties_and_a_wide_prefix(
        sm: SessionManager, store: SessionStore) -> None:
    # Prevents: a store that ranks inside its index (fs, sqlite) cutting a page inside a run of
    # equal scores longer than what it reads at once (a hit lost or repeated at a page boundary),
    # or missing words of a prefix that begins more words than it expands into an OR.
    ids = [sm.call("session::create", {})["session_id"] for _ in range(3)]
    for i in range(40):
        for sid in ids:
            sm.call("session::append", {"session_id": sid, "message": user(f"tie pre{i:02d}x filler")})
    sm.call("session::append", {"session_id": ids[0], "message": user("tie tie pre pre")})
    for text in ["tie", "pre", "pre0", "tie pre", "filler pre1"]:
        query = parse_query(text)
        assert query is not None
        want = rank(SessionStore.search(store, query, None, None), 1000, None)
        for limit in (1, 7, 50):
            walked: list[Any] = []
            after = None
            while True:
                page = store.search_page(query, None, None, limit, after)
                walked += page
                if len(page) < limit:
                    break
                after = page[-1][0]
            assert walked == want, (text, limit)


def test_snippet_is_at_most_1000_characters_around_the_first_match(sm: SessionManager) -> None:
    # Prevents: whole megabyte messages returned as snippets, or a snippet missing the match.
    sid = sm.call("session::create", {})["session_id"]
    sm.call("session::append", {"session_id": sid, "message": user("filler " * 400 + "needle " + "tail " * 400)})
    (hit,) = sm.call("session::search", {"query": "needle"})["hits"]
    assert len(hit["snippet"]) <= 1000 and "needle" in hit["snippet"]


def search_files(data_dir: Path) -> list[Path]:
    return sorted(p for p in (data_dir / SEARCH_DIR).iterdir() if p.is_file())


def _tamper(db: Path, how: str) -> None:
    """Damage the fs search index the way ``how`` says (the store closed)."""
    if how == "missing":
        for p in db.parent.iterdir():
            p.unlink()
    elif how == "garbage":
        db.write_bytes(b"\x00garbage" * 100)
    elif how == "truncated":
        db.write_bytes(db.read_bytes()[: len(db.read_bytes()) // 2])
    elif how == "another version":
        with sqlite3.connect(db) as conn:
            conn.execute("PRAGMA user_version = 99")
    else:  # rows that lie, made from logs that are not the ones there now
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE logs SET size = size + 1")
            conn.execute("DELETE FROM docs WHERE id IN (SELECT id FROM docs LIMIT 2)")


@pytest.mark.parametrize("how", ["missing", "garbage", "truncated", "another version", "stale"])
def test_fs_index_survives_restart_and_a_corrupted_or_missing_file_is_rebuilt(tmp_path: Path, how: str) -> None:
    # Prevents: a corrupted index trusted (wrong answers) or a missing one answering nothing.
    sm = session_manager.open(tmp_path)
    fill(sm)
    before = {q: hits(sm, q) for q in QUERIES}
    sm.close()
    db = tmp_path / SEARCH_DIR / DB_FILE
    assert db.exists()
    _tamper(db, how)
    sm = session_manager.open(tmp_path)
    try:
        assert {q: hits(sm, q) for q in QUERIES} == before
        assert db.exists()  # rebuilt
    finally:
        sm.close()
    sm = session_manager.open(tmp_path)  # and the rebuilt index is trusted on the next open
    try:
        assert {q: hits(sm, q) for q in QUERIES} == before
    finally:
        sm.close()


def test_fs_index_of_an_earlier_layout_is_replaced(tmp_path: Path) -> None:
    # Prevents: the per-session JSON files of the previous index layout left behind (their words
    # kept forever) or read as the index.
    sm = session_manager.open(tmp_path)
    fill(sm)
    before = hits(sm, "brown")
    sm.close()
    (tmp_path / SEARCH_DIR / "s_old.json").write_bytes(b'{"v":1,"sig":[0,0,0],"docs":[]}')
    sm = session_manager.open(tmp_path)
    try:
        assert hits(sm, "brown") == before
        assert [p.name for p in search_files(tmp_path) if p.suffix == ".json"] == []
    finally:
        sm.close()


def test_fs_index_sees_a_log_changed_by_another_open(tmp_path: Path) -> None:
    # Prevents: an index file trusted after its log grew behind its back (written by a later owner).
    sm = session_manager.open(tmp_path)
    sid = sm.call("session::create", {})["session_id"]
    sm.call("session::append", {"session_id": sid, "message": user("first")})
    assert len(hits(sm, "first")) == 1
    sm.close()
    sm = session_manager.open(tmp_path)
    sm.call("session::append", {"session_id": sid, "message": user("second")})
    sm.close()
    sm = session_manager.open(tmp_path)
    try:
        assert len(hits(sm, "second")) == 1 and len(hits(sm, "first")) == 1
    finally:
        sm.close()


@pytest.mark.parametrize("kind", ["fs", "sqlite"])
def test_erasure_no_byte_of_a_deleted_session_remains_in_the_data_dir(tmp_path: Path, kind: str) -> None:
    # Prevents: the search index keeping a deleted (or edited-away) text on disk (sqlite: the
    # deleted words left in an FTS5 segment until a merge, or in freed pages).
    marker = "zqxmarker7731"
    sm = session_manager.open(tmp_path if kind == "fs" else f"sqlite:///{tmp_path / 's.db'}")
    try:
        keep = sm.call("session::create", {})["session_id"]
        sm.call("session::append", {"session_id": keep, "message": user("kept words")})
        sid = sm.call("session::create", {})["session_id"]
        sm.call("session::append", {"session_id": sid, "message": user(f"secret {marker} text")})
        for i in range(30):  # several FTS5 segments
            sm.call("session::append", {"session_id": keep, "message": user(f"more words {i}")})
        assert len(hits(sm, marker)) == 1  # the index holds it now
        if kind == "fs":
            assert any(marker.encode() in p.read_bytes() for p in search_files(tmp_path))
        sm.call("session::delete", {"session_id": sid})
        for root, _dirs, names in os.walk(tmp_path):  # at once, before the store is closed
            for name in names:
                assert marker.encode() not in (Path(root) / name).read_bytes(), name
        assert hits(sm, marker) == [] and len(hits(sm, "kept")) == 1
    finally:
        sm.close()


def test_searches_racing_appends_and_deletes_end_equal_to_the_scan(store: SessionStore) -> None:
    # Prevents: an index corrupted (or a search crashing) by commits and deletes in other threads,
    # e.g. a posting set changing size while a query walks it, or a delete's words left behind.
    import threading

    sm = session_manager.open(store=store)
    ids = [sm.call("session::create", {})["session_id"] for _ in range(4)]
    errors: list[BaseException] = []

    def writer(sid: str) -> None:
        try:
            for i in range(40):
                sm.call("session::append", {"session_id": sid, "message": user(f"race word{i % 7} brown")})
        except SessionError as e:
            if not (sid == ids[0] and e.code == NOT_FOUND):  # the deleted session's writer may be refused
                errors.append(e)
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    def reader() -> None:
        try:
            for _ in range(40):
                sm.call("session::search", {"query": "race wor", "limit": 5})
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(s,)) for s in ids] + [threading.Thread(target=reader)
                                                                          for _ in range(2)]
    for t in threads:
        t.start()
    sm.call("session::delete", {"session_id": ids[0]})
    for t in threads:
        t.join()
    assert errors == []
    sm.call("session::delete", {"session_id": ids[0]})  # after its writer: nothing of it is left
    for q in ["race", "word3", "brown wor"]:
        same_matches(store, q, None)
    assert all(h[0] != ids[0] for h in hits(sm, "race"))


def test_fs_index_that_cannot_be_written_answers_from_the_logs(tmp_path: Path) -> None:
    # Prevents: a search failing (or answering nothing) when the index directory refuses writes
    # (a full disk, a read-only mount): the index is a cache, the logs still answer.
    sm = session_manager.open(tmp_path)
    try:
        fill(sm)
        before = {q: hits(sm, q) for q in QUERIES}
        store = sm.service.store
        assert isinstance(store, FsStore)
        store._search.close()
        index = tmp_path / SEARCH_DIR
        for p in index.iterdir():
            p.unlink()
        index.rmdir()
        index.write_bytes(b"not a directory")  # nothing can be created under it
        assert {q: hits(sm, q) for q in QUERIES} == before
    finally:
        sm.close()
