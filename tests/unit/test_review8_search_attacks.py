"""Attacks on ``session::search`` (review8): what a caller can send or store that
the search promises (docs/search.md) must survive, on every store alike."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import SessionManager
from session_manager.errors import INVALID_CURSOR, SessionError
from session_manager.store import FsStore, MemoryStore, SessionStore
from session_manager.store.search_text import parse_query
from session_manager.store.sqlite.build import open_uri
from tests import pg_support

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
