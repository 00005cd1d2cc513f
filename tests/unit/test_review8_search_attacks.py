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
