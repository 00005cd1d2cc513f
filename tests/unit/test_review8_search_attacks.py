"""Attacks on ``session::search`` (review8): what a caller can send or store that
the search promises (docs/search.md) must survive, on every store alike."""

from __future__ import annotations

import base64
import multiprocessing
import re
import signal
import sqlite3
import time
import unicodedata
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import session_manager
from session_manager import SessionManager
from session_manager.clock import ManualClock
from session_manager.errors import INVALID_CURSOR, SessionError
from session_manager.store import FsStore, MemoryStore, SessionStore
from session_manager.store.fs._search import SEARCH_DIR
from session_manager.store.fs._search_db import DB_FILE
from session_manager.store.postgres import schema as pg_schema
from session_manager.store.postgres import search as pg_search
from session_manager.store.search_text import Query, fold, parse_query
from session_manager.store.sql import fts5
from session_manager.store.sqlite.build import open_uri
from tests import pg_support
from tests.unit.attack_support import run_spawned

KINDS = ["fs", "memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def user(text: str, ts: int = 1) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts}


def open_kind(kind: str, tmp_path: Path, schema: str | None) -> SessionStore:
    if kind == "postgres":
        assert schema is not None
        store: SessionStore = pg_support.open_store(schema)
    elif kind == "sqlite":
        store = open_uri(f"sqlite:///{tmp_path / 'sessions.db'}")
    else:
        store = MemoryStore() if kind == "memory" else FsStore(tmp_path)
    return store


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def schema(kind: str) -> Iterator[str | None]:
    """A postgres schema of this helper's own (``review8_``), dropped afterwards."""
    if kind != "postgres":
        yield None
        return
    pg_support.require()
    name = f"review8_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        pg_support.drop_schema(name)


@pytest.fixture
def sm(kind: str, schema: str | None, tmp_path: Path) -> Iterator[SessionManager]:
    manager = session_manager.open(store=open_kind(kind, tmp_path, schema))
    yield manager
    manager.close()


def search(sm: SessionManager, query: str, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = sm.call("session::search", {"query": query, **extra})
    return out


def raw_cursor(payload: bytes) -> str:
    return base64.b64encode(payload).decode()


@pytest.mark.parametrize("score", [b"1" + b"0" * 400, b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_a_cursor_whose_score_is_not_a_finite_number_is_an_invalid_cursor(sm: SessionManager, score: bytes) -> None:
    # Prevents: a forged cursor's score of 10**400 escaping as a raw OverflowError (a traceback,
    # no session error code), and NaN / Infinity (which Python's JSON reads) taken as a place in
    # the order: no page of this service ever issues one.
    sid = sm.call("session::create", {})["session_id"]
    sm.call("session::append", {"session_id": sid, "message": user("word")})
    cursor = raw_cursor(b'{"s":' + score + b',"t":1,"sid":"a","id":"b"}')
    with pytest.raises(SessionError) as err:
        search(sm, "word", cursor=cursor)
    assert err.value.code == INVALID_CURSOR and "cursor" in str(err.value)
    assert [h["session_id"] for h in search(sm, "word")["hits"]] == [sid]  # nothing else changed


def test_an_entry_holding_a_nul_character_is_found_like_any_other(sm: SessionManager) -> None:
    # Prevents: postgres reading a hit's timestamp with the server's JSON operators, which refuse
    # a body holding \u0000 ("cannot be converted to text"): every search whose page read that
    # entry failed with session/storage, scoped or not (the text is stored; fs and sqlite find it).
    owner = {"owner": "ann"}
    sid = sm.call("session::create", {"metadata": owner})["session_id"]
    # (the third: a backslash typed before "u0000", whose JSON is \\u0000: not a NUL, kept as typed)
    texts = ["nul\x00byte needle", "plain needle", "typed \\u0000 backslash needle \\\x00"]
    added = [sm.call("session::append", {"session_id": sid, "message": user(text)}) for text in texts]
    ids = [a["entry_id"] for a in added]
    want = {eid: (text, a["timestamp"], True) for eid, text, a in zip(ids, texts, added, strict=True)}
    for scope in ({}, {"session_id": sid}, {"metadata": owner}):
        got = search(sm, "needle", **scope)["hits"]
        assert {h["entry_id"]: (h["snippet"], h["timestamp"], h["on_active_path"]) for h in got} == want, scope
        assert [h["entry_id"] for h in search(sm, "byte", **scope)["hits"]] == [ids[0]]
        assert [h["entry_id"] for h in search(sm, "u0000 backsl", **scope)["hits"]] == [ids[2]]


@pytest.mark.postgres
def test_postgres_matches_of_an_entry_holding_a_nul_character_read_like_the_scan(tmp_path: Path) -> None:
    # Prevents: the candidates' ids and timestamps (postgres search.search: a read-only store's
    # answer, its queue matched in Python, and a writable one's) read with the JSON cast that
    # refuses \u0000, failing every search of a read-only open once such an entry was indexed.
    pg_support.require()
    name = f"review8_{uuid.uuid4().hex[:12]}"
    try:
        store = pg_support.open_store(name)
        sm = session_manager.open(store=store)
        sid = sm.call("session::create", {})["session_id"]
        sm.call("session::append", {"session_id": sid, "message": user("nul\x00byte needle")})
        query = parse_query("needle")
        assert query is not None
        want = SessionStore.search(store, query, None, None)
        reader = pg_support.open_store(name, read_only=True)
        try:
            for st in (reader, store, reader):  # queued (read-only), caught up, then indexed (read-only)
                got = st.search(query, None, None)
                assert (got.candidates, got.docs, got.total_length, got.df) == (
                    want.candidates, want.docs, want.total_length, want.df)
        finally:
            reader.close()
            sm.close()
    finally:
        pg_support.drop_schema(name)


def test_the_snippet_reaches_a_match_inside_a_character_that_folds_to_several_words() -> None:
    # Prevents: a snippet starting at the text's start, without the match, when the matching word
    # comes from a character whose fold is several words ("½" folds to 1, a fraction slash and 2:
    # the words 1 and 2, found by the query "2"); the snippet compared the whole fold with the words.
    sm = session_manager.open(store=MemoryStore())
    try:
        sid = sm.call("session::create", {})["session_id"]
        sm.call("session::append", {"session_id": sid, "message": user("filler " * 300 + "half ½ cup")})
        for query in ("2", "cup 2"):
            (hit,) = search(sm, query)["hits"]
            assert hit["snippet"] == "filler " * 10 + "half ½ cup", query  # (from a word start 80 before "½")
    finally:
        sm.close()


NFD = unicodedata.normalize("NFD", "Élysée Crème brûlée")  # (as macOS and some keyboards send it)


def test_a_text_typed_decomposed_is_found_by_its_composed_words_and_the_other_way(sm: SessionManager) -> None:
    # Prevents: accents folded per run of word characters only: a combining accent is not a word
    # character, so a decomposed "Élysée" (E, U+0301, lyse, U+0301, e) split into the words e, lyse
    # and e, and neither "Élysée" nor "elysee" found it (the promise: Élysée = elysee).
    sid = sm.call("session::create", {})["session_id"]
    added = [sm.call("session::append", {"session_id": sid, "message": user(text)})["entry_id"]
             for text in (NFD, unicodedata.normalize("NFC", NFD))]
    for query in ("Élysée crème", "elysee CREME brul", NFD, unicodedata.normalize("NFD", "crème brû")):
        got = search(sm, query)["hits"]
        assert sorted(h["entry_id"] for h in got) == sorted(added), query
        assert len({h["score"] for h in got}) == 1, query  # the same words: the same score
        assert {h["snippet"] for h in got} == {unicodedata.normalize("NFC", NFD)}, query
    assert search(sm, "lyse")["hits"] == []  # (no word "lyse" in either)


def _words_before_review8(text: str) -> list[str]:
    """How the previous release split text: runs of word characters of the text as given."""
    return [w for run in re.findall(r"\w+", text) for w in re.findall(r"\w+", fold(run))]


@pytest.mark.parametrize("kind", ["fs", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_an_index_made_by_the_previous_release_is_made_again_with_the_words_of_this_one(
        kind: str, schema: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: an index made by the previous release (a decomposed text indexed as e, lyse, e)
    # trusted after the upgrade: the entries stored before it were never found by "elysee" (nor
    # found alike by the stores, whose answers must equal the scan of the stored entries).
    with monkeypatch.context() as old:
        old.setattr(fts5, "words", _words_before_review8)
        old.setattr(pg_search, "words", _words_before_review8)
        sm = session_manager.open(store=open_kind(kind, tmp_path, schema))
        sid = sm.call("session::create", {})["session_id"]
        eid = sm.call("session::append", {"session_id": sid, "message": user(NFD)})["entry_id"]
        assert search(sm, "e lyse")["hits"] != []  # (indexed as that release did)
        sm.close()
    if kind == "sqlite":  # the previous release's schema versions
        with sqlite3.connect(tmp_path / "sessions.db") as conn:
            conn.execute("PRAGMA user_version = 8")
    elif kind == "postgres":
        with psycopg.connect(pg_support.DSN, autocommit=True) as pg:
            pg.execute(sql.SQL("UPDATE {}.schema_version SET version = 12").format(sql.Identifier(schema)))
        pg_schema.CHECKED.clear()  # (the next open plays a new process)
    else:
        with sqlite3.connect(tmp_path / SEARCH_DIR / DB_FILE) as conn:
            conn.execute("PRAGMA user_version = 5")
    store = open_kind(kind, tmp_path, schema)
    sm = session_manager.open(store=store)
    try:
        assert [h["entry_id"] for h in search(sm, "elysee")["hits"]] == [eid]
        assert search(sm, "lyse")["hits"] == []
        for text in ("elysee", "creme brul", "e"):
            query = parse_query(text)
            assert query is not None
            got, want = store.search(query, None, None), SessionStore.search(store, query, None, None)
            assert (got.candidates, got.docs, got.total_length, got.df) == (
                want.candidates, want.docs, want.total_length, want.df), text
    finally:
        sm.close()


@pytest.mark.parametrize("kind", ["fs", "memory", "sqlite"])
def test_a_session_deleted_between_the_page_and_its_entries_shows_no_hit(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a hit of a deleted session (its snippet empty, off the active path) when the delete
    # lands between the ranked page and the read of its entries (two reads on these stores): a
    # deleted session's entries are never found; the cursor still names the page's last place.
    store = open_kind(kind, tmp_path, None)
    clock = ManualClock(1_000)
    sm = session_manager.open(store=store, clock=clock)
    try:
        gone, kept = (sm.call("session::create", {})["session_id"] for _ in range(2))
        for i, sid in enumerate((gone, kept, gone)):  # equal scores, ranked newest first: gone, kept, gone
            clock.set(2_000 + i)
            sm.call("session::append", {"session_id": sid, "message": user("needle")})
        ranked = store.search_page

        def delete_after_ranking(*args: Any) -> Any:
            page = ranked(*args)
            store.delete_session(gone)  # (another caller's delete, landing right after the page)
            return page

        monkeypatch.setattr(store, "search_page", delete_after_ranking)
        first = search(sm, "needle", limit=2)
        monkeypatch.undo()
        assert [(h["session_id"], h["snippet"], h["on_active_path"]) for h in first["hits"]] == [(kept, "needle", True)]
        assert search(sm, "needle", limit=2, cursor=first["next_cursor"])["hits"] == []
    finally:
        sm.close()


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "thinking", "text": "hidden thought"},
                                             {"type": "text", "text": text},
                                             {"type": "function_call", "id": "c1", "function_id": "lookup_weather"}],
            "stop_reason": "end", "model": "m", "provider": "p", "timestamp": 1}


def _result(text: str) -> dict[str, Any]:
    return {"role": "function_result", "function_call_id": "c1", "function_id": "lookup_weather",
            "content": [{"type": "text", "text": text}], "timestamp": 1}


# Words every store must split and fold alike: ligatures, ß, a roman numeral, dotted İ, CJK runs,
# emoji (no word), underscores, a word past a tsvector lexeme (postgres: matched unindexed), a
# prefix of more than 32 indexed words (FTS5: a "word"* term), NUL, decomposed accents, Greek sigma.
CORPUS = ["Straße ﬁle Ⅻ İstanbul", "東京タワー 東京 tokyo", "emoji 🎉 party🎉time", "under_score snake_case_word",
          "x" * 3000 + " bigword", "pre " + " ".join(f"pre{i:02d}" for i in range(40)), "nul\x00byte text",
          "café CAFE Café cafés", "the the the the quick", "1½ fraction ⑴ one", "ΣΊΣΥΦΟΣ σίσυφος", NFD,
          "__init__ _private ǅungla \u0131i İI ﬅ \u212a\u212b 0042 ٣٤ x²"]
QUERIES = ["strasse", "file", "xii", "istanbul", "東京", "東", "tokyo", "party", "under", "snake_case", "bigw",
           "xxxxxxxxxx", "pre", "pre0", "pre pre1", "byte", "cafe", "cafes", "the quick", "the", "2", "σισυφος",
           "lookup", "lookup_w", "hidden", "élysée", "CREME BRU", "_", "__init", "džungla", "st", "ka", "0042",
           "٣", "x2", "\u0131", "ii"]


def test_every_store_answers_the_same_pages_for_the_same_data(kind: str, schema: str | None, tmp_path: Path) -> None:
    # Prevents: a store splitting, folding, scoping, ranking or paging differently from the others
    # (each store's index is its own code: FTS5 for fs and sqlite, GIN for postgres, memory's own),
    # seen only on a word shape the shared tests lack. Every store must give the memory store's
    # answer, hit for hit, page for page (a clock makes the timestamps, and so the ties, equal).
    answers = {}
    for k in ("memory", kind):
        clock = ManualClock(1_000)
        sm = session_manager.open(store=open_kind(k, tmp_path / k, schema), clock=clock)
        try:
            for s in range(3):
                sid = f"s{s}"
                sm.call("session::ensure", {"session_id": sid, "metadata": {"owner": "bob" if s == 1 else "ann"}})
                for i, text in enumerate(CORPUS):
                    clock.set(2_000 + i // 2)  # (two entries share each millisecond: ties by session and entry id)
                    message = [user(text), _assistant(text), _result(text)][(i + s) % 3]
                    sm.call("session::append", {"session_id": sid, "entry_id": f"e{i:02d}", "message": message})
            scopes: list[dict[str, Any]] = [{}, {"metadata": {"owner": "ann"}}, {"session_id": "s1"},
                                            {"roles": ["assistant", "function_result"]}, {"roles": []},
                                            {"metadata": {"owner": "ann"}, "roles": ["user"], "session_id": "s2"}]
            answers[k] = {(q, i): _walk(sm, q, 3, scope) for q in QUERIES for i, scope in enumerate(scopes)}
            for (q, i), hits in answers[k].items():
                assert _walk(sm, q, 500, scopes[i]) == hits, (k, q, scopes[i])  # one page: the same hits
        finally:
            sm.close()
    assert answers[kind] == answers["memory"]
    assert all(answers["memory"][q, 0] for q in QUERIES if q != "hidden")  # (each found)
    assert answers["memory"]["hidden", 0] == []  # (thinking is not searched)
    assert all(answers["memory"][q, 4] == [] for q in QUERIES)  # (no role allowed: no hit)
    assert {h["session_id"] for q in QUERIES for h in answers["memory"][q, 5]} == {"s2"}


def _walk(sm: SessionManager, query: str, limit: int, scope: dict[str, Any]) -> list[dict[str, Any]]:
    """Every hit of ``query`` page by page, ``limit`` a page (each full while more remain)."""
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = search(sm, query, limit=limit, **scope, **({"cursor": cursor} if cursor else {}))
        out += page["hits"]
        cursor = page.get("next_cursor")
        if cursor is None:
            return out
        assert len(page["hits"]) == limit


def _open_where(kind: str, where: str) -> SessionManager:
    """A manager on the shared store (``where``: the sqlite file, or the postgres schema)."""
    store = open_uri(f"sqlite:///{where}") if kind == "sqlite" else pg_support.open_store(where)
    return session_manager.open(store=store)


def _write_and_search(kind: str, where: str, w: int, count: int, start: Any) -> None:
    """A writer process: ``count`` appends of its own words, each followed by a search (so the
    processes catch the index up at once, each its own batches)."""
    start.wait(60)
    sm = _open_where(kind, where)
    try:
        sid = sm.call("session::ensure", {"session_id": f"p{w}"})["meta"]["session_id"]
        for i in range(count):
            sm.call("session::append", {"session_id": sid, "message": user(f"shared w{w}n{i}")})
            sm.call("session::search", {"query": "shared", "limit": 3})
    finally:
        sm.close()


def _churn_and_search(kind: str, where: str, w: int, count: int, start: Any) -> None:
    """A writer process revising, deleting and re-creating its session between appends, each
    step followed by a search (sqlite: revisions queued, seq numbers given again after a delete,
    while other processes catch the index up)."""
    start.wait(60)
    sm = _open_where(kind, where)
    try:
        sid = f"c{w}"
        sm.call("session::ensure", {"session_id": sid})
        mine: list[str] = []
        for i in range(count):
            added = sm.call("session::append", {"session_id": sid, "message": user(f"shared w{w}n{i}")})
            mine.append(added["entry_id"])
            if i % 4 == 3 and len(mine) > 1:
                sm.call("session::update-message", {"session_id": sid, "entry_id": mine[-2],
                                                    "content": [{"type": "text", "text": f"shared w{w}u{i}"}]})
            if i % 9 == 7:
                sm.call("session::delete", {"session_id": sid})
                sm.call("session::ensure", {"session_id": sid})
                mine = []
            sm.call("session::search", {"query": f"shared w{w}", "limit": 3})
    finally:
        sm.close()


def _write_forever(kind: str, where: str, start: Any) -> None:
    """Appends and searches until killed (the parent waits for some, then SIGKILLs it)."""
    start.wait(60)
    sm = _open_where(kind, where)
    i = 0
    while True:
        sm.call("session::append", {"session_id": "doomed", "message": user(f"shared k{i} " + "pad " * (i % 50))})
        sm.call("session::search", {"query": f"k{i} sha"})
        i += 1


def _where(kind: str, schema: str | None, tmp_path: Path) -> str:
    if kind == "sqlite":
        return str(tmp_path / "shared.db")
    assert schema is not None
    return schema


def _found_once_each(sm: SessionManager, store: SessionStore) -> None:
    """Every stored searchable entry is found exactly once by its own word (a whole word: the
    prefix is the word after it), and the index's matches are the scan's."""
    for meta in store.list_metas():
        for entry in store.entries(meta["session_id"]):
            word = entry["message"]["content"][0]["text"].split()[1]
            got = [(h["session_id"], h["entry_id"]) for h in search(sm, f"{word} shared", limit=5)["hits"]]
            assert got == [(meta["session_id"], entry["id"])], word
    for text in ("shared", "shared w1", "k", "pad"):
        query = parse_query(text)
        assert query is not None
        got, want = store.search(query, None, None), SessionStore.search(store, query, None, None)
        assert sorted(got.candidates, key=repr) == sorted(want.candidates, key=repr), text
        assert (got.docs, got.total_length, got.df) == (want.docs, want.total_length, want.df), text


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_processes_writing_and_searching_at_once_leave_every_entry_found_exactly_once(
        kind: str, schema: str | None, tmp_path: Path) -> None:
    # Prevents: two processes catching the index up at once indexing an entry twice (a hit
    # repeated, totals counted twice) or skipping one (an entry committed while another process
    # held the catch-up's batch, never found), while a third searches.
    where = _where(kind, schema, tmp_path)
    sm = _open_where(kind, where)  # (the schema or file made before the processes start)
    try:
        writers, count = 3, 40
        assert run_spawned(_write_and_search, [(kind, where, w, count) for w in range(writers)]) == [0] * writers
        store = sm.service.store
        assert sorted(len(store.entries(m["session_id"])) for m in store.list_metas()) == [count] * writers
        _found_once_each(sm, store)
        assert len(_walk(sm, "shared", 50, {})) == writers * count
    finally:
        sm.close()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_processes_revising_deleting_and_recreating_while_searching_leave_the_index_exact(
        kind: str, schema: str | None, tmp_path: Path) -> None:
    # Prevents: the catch-up of several processes losing or doubling a revision, or keeping a
    # deleted session's rows, when deletes give seq numbers again under a lowered mark and
    # revisions of deleted entries stay queued (sqlite), or a delete races a batch (postgres).
    where = _where(kind, schema, tmp_path)
    sm = _open_where(kind, where)
    try:
        writers, count = 3, 30
        assert run_spawned(_churn_and_search, [(kind, where, w, count) for w in range(writers)]) == [0] * writers
        store = sm.service.store
        # (each session holds what followed its last re-creation: entries 26 to 29, 26 revised)
        assert sorted(len(store.entries(m["session_id"])) for m in store.list_metas()) == [4] * writers
        _found_once_each(sm, store)
        assert len(_walk(sm, "shared", 5, {})) == 4 * writers
        assert [len(search(sm, f"w{w}u27 shared")["hits"]) for w in range(writers)] == [1] * writers
    finally:
        sm.close()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_writer_killed_mid_stream_leaves_an_index_that_catches_up_exactly(
        kind: str, schema: str | None, tmp_path: Path) -> None:
    # Prevents: a writer SIGKILLed inside its catch-up (or its commit) leaving the index stale
    # (an entry never found), doubled (found twice) or its mark past entries it never indexed.
    where = _where(kind, schema, tmp_path)
    sm = _open_where(kind, where)
    try:
        sm.call("session::ensure", {"session_id": "doomed"})
        context = multiprocessing.get_context("spawn")
        start = context.Event()
        proc = context.Process(target=_write_forever, args=(kind, where, start))
        proc.start()
        start.set()
        store = sm.service.store
        for _ in range(6000):  # (a bound, not a timing: the writer is killed once it has written 60)
            if len(store.entries("doomed")) >= 60 or not proc.is_alive():
                break
            time.sleep(0.01)
        proc.kill()
        proc.join(30)
        assert proc.exitcode == -signal.SIGKILL
        assert len(store.entries("doomed")) >= 60
        _found_once_each(sm, store)
    finally:
        sm.close()
    sm = _open_where(kind, where)  # and after a restart
    try:
        _found_once_each(sm, sm.service.store)
    finally:
        sm.close()


ODD_ID = "s'\"%_\\ü🎉 x"  # (quotes, LIKE wildcards, a backslash, non-ASCII, astral, a space)


def test_a_deleted_session_made_again_with_the_same_ids_is_found_by_its_new_words_only(
        sm: SessionManager, kind: str) -> None:
    # Prevents: the index keeping a deleted session's rows under a session or entry number given
    # again (sqlite reuses the top seq numbers once they are deleted; a revision queued for a seq
    # before the delete), so the new session is found by the old words, or its new entries hide
    # under the index's high-water mark; an odd session id breaking a scope.
    sm.call("session::ensure", {"session_id": ODD_ID, "metadata": {"tenant": "t1"}})
    for i in range(3):
        sm.call("session::append", {"session_id": ODD_ID, "entry_id": f"e{i}", "message": user(f"oldword n{i}")})
    assert len(search(sm, "oldword")["hits"]) == 3  # (indexed)
    sm.call("session::update-message", {"session_id": ODD_ID, "entry_id": "e2",
                                        "content": [{"type": "text", "text": "revised oldword"}]})
    sm.call("session::delete", {"session_id": ODD_ID})  # (the revision queued, never indexed)
    sm.call("session::ensure", {"session_id": ODD_ID, "metadata": {"tenant": "t1"}})
    for i in range(2):
        sm.call("session::append", {"session_id": ODD_ID, "entry_id": f"e{i}", "message": user(f"newword n{i}")})
    for scope in ({}, {"session_id": ODD_ID}, {"metadata": {"tenant": "t1"}}):
        assert search(sm, "oldword", **scope)["hits"] == search(sm, "revised", **scope)["hits"] == []
        got = search(sm, "newword", **scope)["hits"]
        assert sorted((h["session_id"], h["entry_id"], h["snippet"]) for h in got) == [
            (ODD_ID, "e0", "newword n0"), (ODD_ID, "e1", "newword n1")], scope
        assert sorted(h["entry_id"] for h in search(sm, "n", **scope)["hits"]) == ["e0", "e1"]
    store = sm.service.store
    for text in ("oldword", "newword", "n"):
        query = parse_query(text)
        assert query is not None
        _same_as_the_scan(store, query, text)


def test_the_longest_queries_are_answered_alike(sm: SessionManager, caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: a 256-character query failing a store: 256 "ﷺ" fold to 1,024 words, a term each in
    # the FTS5 page's statement, past SQLite's expression depth (sqlite: session/storage; fs: its
    # index thrown away and the logs read, every such query). Also 128 one-letter words, and words
    # whose fold outgrows a postgres lexeme (2 KB: matched on the stored words), each answered as
    # the definition says.
    many = " ".join(chr(ord("a") + i % 26) for i in range(128))
    wide = "ﷺ" * 256  # (NFKD: 18 characters each, 4,608 in all)
    sid = sm.call("session::create", {})["session_id"]
    eids = [sm.call("session::append", {"session_id": sid, "message": user(text)})["entry_id"]
            for text in (many, wide, "ß" * 256, "tail")]
    for query, want in ((many, [eids[0]]), (wide, [eids[1]]), ("SS" * 128, [eids[2]]), ("s" * 256, [eids[2]]),
                        ("ss" * 127 + "x", []), ("z " * 127 + "q", [eids[0]]), ("tail " * 51 + "t", [eids[3]])):
        assert len(query) <= 256
        assert [h["entry_id"] for h in search(sm, query)["hits"]] == want, query[:20]
    assert [r.getMessage() for r in caplog.records if "unusable" in r.getMessage()] == []  # (fs: kept)
    store = sm.service.store
    for query_text in (many, wide, "s" * 256):
        query = parse_query(query_text)
        assert query is not None
        _same_as_the_scan(store, query, query_text[:20])


def _same_as_the_scan(store: SessionStore, query: Query, label: str) -> None:
    """The store's matches (its index) are the scan's, the definition's."""
    got, want = store.search(query, None, None), SessionStore.search(store, query, None, None)
    assert sorted(got.candidates, key=repr) == sorted(want.candidates, key=repr), label
    assert (got.docs, got.total_length, got.df) == (want.docs, want.total_length, want.df), label


def test_a_reply_streamed_by_updates_is_found_once_by_its_newest_text_at_every_step(sm: SessionManager) -> None:
    # Prevents: each revision of a streamed reply indexed beside the earlier ones (the reply found
    # twice, or by a word only an earlier revision had: "placeholder"), or a revision made between
    # two searches (sqlite's queue, postgres' rewrite flag, fs's log) missed, or the totals drifting
    # from the stored entries (each revision counted again), on the active branch and off it.
    sid = sm.call("session::create", {})["session_id"]
    root = sm.call("session::append", {"session_id": sid, "message": user("question")})["entry_id"]
    off = sm.call("session::append", {"session_id": sid, "message": _assistant("placeholder")})["entry_id"]
    sm.call("session::set-active-leaf", {"session_id": sid, "entry_id": root})
    on = sm.call("session::append", {"session_id": sid, "message": _assistant("placeholder")})["entry_id"]
    store = sm.service.store
    streamed = ""
    for step in range(12):
        streamed += f" tok{step}"
        for eid in (on, off):
            sm.call("session::update-message", {"session_id": sid, "entry_id": eid,
                                                "content": [{"type": "text", "text": "reply" + streamed}]})
        if step % 3:  # (some revisions land between searches unseen: two or more in a row)
            continue
        got = {h["entry_id"]: (h["snippet"], h["on_active_path"]) for h in search(sm, f"reply tok{step}")["hits"]}
        assert got == {on: ("reply" + streamed, True), off: ("reply" + streamed, False)}, step
        assert search(sm, "placeholder")["hits"] == []
        for text in ("reply", "tok0 tok", "question"):
            query = parse_query(text)
            assert query is not None
            _same_as_the_scan(store, query, text)


def test_another_tenants_entries_never_change_a_tenants_hits_scores_or_pages(sm: SessionManager) -> None:
    # Prevents: a tenant's scores computed over every session's statistics (another tenant's
    # writes, purge or deletes moving this tenant's ranking and cursors), or another tenant's
    # entries taking a place in a page's limit.
    mine = {"tenant": "a"}
    sid = sm.call("session::create", {"metadata": mine})["session_id"]
    for text in ("alpha beta", "alpha alpha gamma", "beta delta alpha", "omega"):
        sm.call("session::append", {"session_id": sid, "message": user(text)})
    queries = ["alpha", "beta alp", "gamma", "a"]
    before = {q: _walk(sm, q, 2, {"metadata": mine}) for q in queries}
    for t in range(3):
        other = sm.call("session::create", {"metadata": {"tenant": f"b{t}"}})["session_id"]
        for i in range(5):
            sm.call("session::append", {"session_id": other, "message": user("alpha " * (i + 1) + "beta")})
    assert {q: _walk(sm, q, 2, {"metadata": mine}) for q in queries} == before
    assert {q: _walk(sm, q, 2, {"session_id": sid}) for q in queries} == before
    assert len(_walk(sm, "alpha", 4, {})) == 3 + 15  # (unscoped: every tenant's)
    purged = sm.call("session::purge", {"metadata": {"tenant": "b1"}})
    assert len(purged["session_ids"]) == 1
    assert {q: _walk(sm, q, 2, {"metadata": mine}) for q in queries} == before
    assert all(h["session_id"] != purged["session_ids"][0] for h in _walk(sm, "alpha", 4, {}))
    assert len(_walk(sm, "alpha", 4, {})) == 3 + 10


def test_a_forks_copies_are_found_under_the_fork_with_its_own_active_path(sm: SessionManager) -> None:
    # Prevents: a fork's hits flagged by the source session's active path (or the source's by the
    # fork's), the copies past the fork point found under the fork, or a long forked chain's
    # flags wrong far from the leaf (postgres walks jump pointers in its page statement).
    sid = sm.call("session::create", {})["session_id"]
    chain = [sm.call("session::append", {"session_id": sid, "message": user(f"step s{i}")})["entry_id"]
             for i in range(60)]
    fork = sm.call("session::fork", {"session_id": sid, "entry_id": chain[40]})["session_id"]
    copies = [m["entry_id"] for m in sm.call("session::messages", {"session_id": fork, "limit": 500})["messages"]]
    assert len(copies) == 41
    sm.call("session::set-active-leaf", {"session_id": fork, "entry_id": copies[10]})
    branch = sm.call("session::append", {"session_id": fork, "message": user("step forked")})["entry_id"]
    hits = _walk(sm, "step", 7, {})
    flags = {(h["session_id"], h["entry_id"]): h["on_active_path"] for h in hits}
    assert len(hits) == len(flags) == 60 + 41 + 1
    assert all(flags[sid, eid] for eid in chain)
    assert sorted(eid for s, eid in flags if s == fork) == sorted([*copies, branch])
    assert {eid for s, eid in flags if s == fork and flags[s, eid]} == {*copies[:11], branch}
    for scope in ({"session_id": fork}, {}):
        for word, i, on in (("s5", 5, True), ("s40", 40, False)):
            got = {(h["session_id"], h["entry_id"]): h["on_active_path"] for h in _walk(sm, f"{word} step", 3, scope)}
            want = {(fork, copies[i]): on} | ({(sid, chain[i]): True} if scope == {} else {})
            assert got == want, (scope, word)


def _open_read_only(kind: str, tmp_path: Path, schema: str | None) -> SessionStore:
    if kind == "postgres":
        store: SessionStore = pg_support.open_store(schema, read_only=True)
    elif kind == "sqlite":
        store = open_uri(f"sqlite:///{tmp_path / 'sessions.db'}", read_only=True)
    else:
        store = FsStore(tmp_path, read_only=True)
    return store


@pytest.mark.parametrize("kind", ["fs", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_read_only_open_answers_what_the_writer_answers_with_its_index_behind(
        kind: str, schema: str | None, tmp_path: Path) -> None:
    # Prevents: a read-only open (which must not catch the index up: it matches what is not indexed
    # yet itself) answering otherwise than the writer: a revised entry found by its old words or
    # twice, a deleted session's queued revision, numbers given again after a delete (sqlite
    # seq), a re-created id, totals counted with stale rows; every page the same, cursor by cursor.
    sm = session_manager.open(store=open_kind(kind, tmp_path, schema))
    reader = _open_read_only(kind, tmp_path, schema)
    ro = session_manager.open(store=reader)
    try:
        ids = [sm.call("session::create", {"metadata": {"t": i % 2}})["session_id"] for i in range(3)]
        eids = {sid: [sm.call("session::append", {"session_id": sid, "message": user(f"word{j} common")})["entry_id"]
                      for j in range(4)] for sid in ids}
        search(sm, "common")  # (the writer's index caught up: what follows is behind it)
        sm.call("session::update-message", {"session_id": ids[0], "entry_id": eids[ids[0]][1],
                                            "content": [{"type": "text", "text": "revised common"}]})
        sm.call("session::update-message", {"session_id": ids[2], "entry_id": eids[ids[2]][3],
                                            "content": [{"type": "text", "text": "gone revision"}]})
        sm.call("session::delete", {"session_id": ids[2]})  # (the newest entries: sqlite gives their seq again)
        sm.call("session::ensure", {"session_id": ids[2], "metadata": {"t": 0}})
        for j in range(2):
            sm.call("session::append", {"session_id": ids[2], "message": user(f"again{j} common nul\x00")})
        sm.call("session::append", {"session_id": ids[1], "message": user("late word1 common")})
        queries = ["common", "word1", "word", "revised", "gone", "again", "nul commo"]
        scopes: list[dict[str, Any]] = [{}, {"metadata": {"t": 0}}, {"session_id": ids[2]}]
        want = {(q, i): _walk(ro, q, 2, scope) for q in queries for i, scope in enumerate(scopes)}  # (first)
        assert {(q, i): _walk(sm, q, 2, scope) for q in queries for i, scope in enumerate(scopes)} == want
        assert [h["snippet"] for h in want["revised", 0]] == ["revised common"] and want["gone", 0] == []
        assert sorted(h["snippet"] for h in want["again", 2]) == ["again0 common nul\x00", "again1 common nul\x00"]
        for text in queries:
            query = parse_query(text)
            assert query is not None
            _same_as_the_scan(reader, query, text)
    finally:
        ro.close()
        sm.close()
