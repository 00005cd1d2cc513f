"""Read-only sqlite and postgres stores (``session_manager.open(uri, read_only=True)``, what
``data serve``/``show``/``ls``/``export`` open): beside a live writer they read and receive its
changes, refuse every mutation with the fs read-only store's error, never migrate, search what the
writer has not indexed yet, and write nothing: not the database file (bytes, mtime, every table's
rows, the outbox readers included), not a postgres row.

Regression: a viewer over a database opened writable: opening could migrate an older schema, the
sqlite store registered the viewer as an outbox reader and its search box wrote the search index."""

from __future__ import annotations

import hashlib
import queue
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._cli.data.opening import open_for
from session_manager._wire.events import EVENT_FUNCTIONS
from session_manager.errors import STORAGE, SessionError
from tests import pg_support
from tests.unit.viewer_support import branched_session, running


def _msg(t: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": t}], "timestamp": 0}


def _refused_text(sm: session_manager.SessionManager) -> list[str]:
    """The answers of mutations of every kind (each must be the read-only refusal)."""
    sid = sm.call("session::list", {})["sessions"][0]["session_id"]
    out = []
    for fid, payload in (("session::create", {}), ("session::append", {"session_id": sid, "message": _msg("x")}),
                         ("session::set-status", {"session_id": sid, "status": "working"}),
                         ("session::delete", {"session_id": sid})):
        with pytest.raises(SessionError) as refused:
            sm.call(fid, payload)
        assert refused.value.code == STORAGE
        out.append(str(refused.value).split(": ", 2)[-1])
    return out


def _fs_refusal(tmp_path: Path) -> str:
    """The fs read-only store's text for a refused mutation (the one rule every adapter follows)."""
    d = tmp_path / "fs"
    with session_manager.open(d) as w:
        w.call("session::create", {})
    with session_manager.open(d, read_only=True) as ro:
        return _refused_text(ro)[0]


def _observe(sm: session_manager.SessionManager) -> queue.Queue[tuple[str, Any]]:
    got: queue.Queue[tuple[str, Any]] = queue.Queue()
    for fid in EVENT_FUNCTIONS:
        sm.observe({"function_id": fid}, lambda ev, fid=fid: got.put((fid, ev)))
    return got


def _live(writer: session_manager.SessionManager, ro: session_manager.SessionManager) -> None:
    """The read-only store reads the writer's sessions, receives its changes, and searches what it
    has not indexed yet exactly as the writer does once caught up."""
    sid = writer.call("session::create", {"title": "first"})["session_id"]
    writer.call("session::append", {"session_id": sid, "message": _msg("hello paris")})
    assert writer.call("session::search", {"query": "hello"})["hits"]  # (the index caught up to here)
    assert [s["title"] for s in ro.call("session::list", {})["sessions"]] == ["first"]
    got = _observe(ro)
    added = writer.call("session::append", {"session_id": sid, "message": _msg("paris again")})["entry_id"]
    fid, event = got.get(timeout=20)
    assert (fid, event["session_id"], event["entry_id"]) == ("session::on-message-added", sid, added)
    writer.call("session::set-status", {"session_id": sid, "status": "working"})
    assert got.get(timeout=20)[0] == "session::on-status-changed"
    other = writer.call("session::create", {"title": "second"})["session_id"]
    fid, event = got.get(timeout=20)
    assert (fid, event["session_id"]) == ("session::on-created", other)
    # The read-only search, first (nothing indexes the new entry for it), equals the writer's.
    mine = ro.call("session::search", {"query": "paris"})
    assert {h["entry_id"] for h in mine["hits"]} >= {added}
    assert mine == writer.call("session::search", {"query": "paris"})
    assert ro.call("session::get", {"session_id": sid})["meta"]["status"] == "working"
    # A streamed reply: indexed, then revised (the index's row of it is stale until a catch-up).
    reply = writer.call("session::append", {"session_id": sid, "message": {
        "role": "assistant", "content": [{"type": "text", "text": "lyon"}], "model": "m", "provider": "p",
        "stop_reason": "end", "timestamp": 0}})["entry_id"]
    assert writer.call("session::search", {"query": "lyon"})["hits"]  # (indexed)
    for grown in ("marseille", "marseille nice", "marseille nice toulouse"):
        writer.call("session::update-message", {"session_id": sid, "entry_id": reply,
                                                "content": [{"type": "text", "text": grown}]})
    seen: list[str] = []
    while not seen or seen[-1] != "marseille nice toulouse":
        fid, event = got.get(timeout=20)
        if event.get("entry_id") == reply:
            seen.append(event["message"]["content"][0]["text"])
    assert seen[0] in ("lyon", "marseille", "marseille nice", "marseille nice toulouse")  # grows, never back
    for query in ("lyon", "toulouse", "marseille"):
        mine = ro.call("session::search", {"query": query})
        assert mine == writer.call("session::search", {"query": query}), query
    assert ro.call("session::search", {"query": "lyon"})["hits"] == []
    # Scoped to a session and by role, over a revised reply and a new entry neither store has
    # indexed yet (the read-only answers first): the same answers (sqlite's index keeps a row's
    # session as a number, so its stale rows are scoped by that).
    writer.call("session::update-message", {"session_id": sid, "entry_id": reply,
                                            "content": [{"type": "text", "text": "nice bordeaux"}]})
    writer.call("session::append", {"session_id": other, "message": _msg("paris nice")})
    calls: list[dict[str, Any]] = [
        {"query": "nice", "session_id": sid}, {"query": "nice", "session_id": other}, {"query": "paris"},
        {"query": "toulouse", "session_id": sid}, {"query": "nice", "roles": ["assistant"]},
        {"query": "paris", "roles": ["user"], "session_id": sid}, {"query": "nice", "limit": 1}]
    mine_all = [ro.call("session::search", call) for call in calls]
    assert [len(m["hits"]) for m in mine_all[:2]] == [1, 1]
    assert mine_all == [writer.call("session::search", call) for call in calls]


# -- sqlite -------------------------------------------------------------------------------------


def _sqlite_state(db: Path) -> dict[str, Any]:
    """The database file's bytes and mtime (the -wal's too, unless empty: with no other connection
    open SQLite makes an empty -wal and -shm for a read-only one), and every table's rows."""
    out: dict[str, Any] = {}
    for f in (db, Path(f"{db}-wal")):
        if f.exists() and f.stat().st_size:
            out[f.name] = (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns)
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE"
                                     " 'search_fts_%' ORDER BY name").fetchall():
            out[table] = conn.execute(f'SELECT * FROM "{table}"').fetchall()
    finally:
        conn.close()
    return out


def test_a_read_only_sqlite_store_follows_a_live_writer_and_refuses_mutations(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 's.db'}"
    with session_manager.open(uri) as writer:
        writer.call("session::create", {"title": "zero"})
        writer.call("session::delete", {"session_id": writer.call("session::list", {})["sessions"][0]["session_id"]})
        with session_manager.open(uri, read_only=True) as ro:
            assert ro.service.store.read_only
            _live(writer, ro)
            assert set(_refused_text(ro)) == {_fs_refusal(tmp_path)}
            readers = sqlite3.connect(tmp_path / "s.db").execute("SELECT instance FROM readers").fetchall()
            # Observed all along, and never registered as an outbox reader (nor is the writer,
            # which observes nothing: issue 24).
            assert readers == []


def test_the_sqlite_watch_sees_revisions_that_leave_the_meta_unchanged(tmp_path: Path) -> None:
    """Regression: a state watch keyed on the meta alone missed a streamed reply's updates made
    within one millisecond (the meta's text unchanged): each revision is compared by itself."""
    from session_manager.clock import ManualClock

    uri = f"sqlite:///{tmp_path / 's.db'}"
    with session_manager.open(uri, clock=ManualClock(5_000)) as writer:  # time never moves
        sid = writer.call("session::create", {})["session_id"]
        reply = writer.call("session::append", {"session_id": sid, "message": {
            "role": "assistant", "content": [{"type": "text", "text": "a"}], "model": "m", "provider": "p",
            "stop_reason": "end", "timestamp": 0}})["entry_id"]
        with session_manager.open(uri, read_only=True) as ro:
            got = _observe(ro)
            meta = writer.call("session::get", {"session_id": sid})["meta"]
            for grown in ("a b", "a b c"):
                writer.call("session::update-message", {"session_id": sid, "entry_id": reply,
                                                        "content": [{"type": "text", "text": grown}]})
                fid, event = got.get(timeout=20)
                assert fid == "session::on-message-updated"
                assert event["message"]["content"][0]["text"] == grown
            assert writer.call("session::get", {"session_id": sid})["meta"] == meta  # (the meta never moved)
            assert got.empty()


def test_a_read_only_sqlite_open_creates_nothing_and_never_migrates(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with pytest.raises(SessionError) as missing:
        session_manager.open(f"sqlite:///{db}", read_only=True)
    assert missing.value.code == STORAGE and not db.exists()
    with session_manager.open(f"sqlite:///{db}") as w:
        w.call("session::create", {"title": "t"})
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 3")  # as a release before the search catch-up left it
    conn.close()
    before = _sqlite_state(db)
    with pytest.raises(SessionError) as old:
        session_manager.open(f"sqlite:///{db}", read_only=True)
    assert old.value.code == STORAGE and "older" in str(old.value) and "never migrates" in str(old.value)
    assert _sqlite_state(db) == before


def test_the_viewer_over_sqlite_writes_nothing_beside_a_live_writer(tmp_path: Path) -> None:
    """Strict: every viewer route (the search box over entries the index has not caught up, the
    event stream) leaves the database file's bytes and mtime and every table's rows (outbox,
    readers, search index) as they were; only SQLite's shared-memory -shm file is the reader's."""
    import httpx

    from tests.unit.test_viewer_http import _listen

    db = tmp_path / "sessions.db"
    uri = f"sqlite:///{db}"
    with session_manager.open(uri) as writer:
        ids = branched_session(writer)
        live = sqlite3.connect(db)  # a writer's connection kept open (its -wal and -shm live), idle:
        writer.call("session::append", {"session_id": ids["sid"], "message": _msg("paris unindexed")})
    # (a session manager's own follower renews its reader row every second: not idle)
    try:
        before = _sqlite_state(db)
        assert before["search_state"] == [(1, 0)]  # nothing indexed: the search box must not catch up
        with open_for(uri, writable=False) as sm, running(sm) as base, httpx.Client(base_url=base) as c:
            events, stop = _listen(base, "/api/events")
            for path in ("/", "/?q=paris", "/?q=unindexed", "/?status=idle&meta=user=u_1", f"/sessions/{ids['sid']}",
                         f"/sessions/{ids['fork']}", "/api/sessions", f"/api/sessions/{ids['sid']}",
                         "/sessions/s_nope", "/static/viewer.css"):
                assert c.get(path).status_code in (200, 404), path
            assert "paris unindexed" in c.get("/?q=unindexed").text
            time.sleep(0.5)  # (the watch polls meanwhile)
            assert events.empty()
            stop.set()
        assert _sqlite_state(db) == before
    finally:
        live.close()


# -- postgres -----------------------------------------------------------------------------------


def _pg_rows(schema: str) -> dict[str, Any]:
    """Every table's rows in ``schema`` (with each row's xmin: a rewrite of equal values shows)."""
    import psycopg
    from psycopg import sql

    out: dict[str, Any] = {}
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1",
                                             (schema,))]
        for t in tables:
            query = sql.SQL("SELECT xmin::text, * FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(t))
            out[t] = sorted(repr(r) for r in conn.execute(query))
    return out


def _pg_open(schema: str, *, read_only: bool) -> session_manager.SessionManager:
    return session_manager.open(store=pg_support.open_store(schema, read_only=read_only), read_only=read_only)


@pytest.mark.postgres
def test_a_read_only_postgres_store_follows_a_live_writer_and_refuses_mutations(tmp_path: Path) -> None:
    with pg_support.schema() as schema, _pg_open(schema, read_only=False) as writer:
        writer.call("session::create", {"title": "zero"})
        writer.call("session::delete",
                    {"session_id": writer.call("session::list", {})["sessions"][0]["session_id"]})
        with _pg_open(schema, read_only=True) as ro:
            assert ro.service.store.read_only
            _live(writer, ro)
            assert set(_refused_text(ro)) == {_fs_refusal(tmp_path)}


@pytest.mark.postgres
def test_a_read_only_postgres_open_never_migrates() -> None:
    import psycopg
    from psycopg import sql

    from session_manager.store.postgres import schema as pg_schema

    with pg_support.schema() as schema:
        with pytest.raises(session_manager.errors.StoreError, match="holds no session store"):
            pg_support.open_store(schema, read_only=True)
        _pg_open(schema, read_only=False).close()
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("UPDATE {}.schema_version SET version = version - 1").format(sql.Identifier(schema)))
        pg_schema.CHECKED.clear()  # (as a new process)
        before = _pg_rows(schema)
        with pytest.raises(session_manager.errors.StoreError, match=r"older.*never migrates"):
            pg_support.open_store(schema, read_only=True)
        assert _pg_rows(schema) == before


@pytest.mark.postgres
def test_the_viewer_over_postgres_writes_no_row() -> None:
    """Every viewer route (the search box over entries still queued for the index, the event
    stream) leaves every table of the schema as it was: rows and their xmin."""
    import httpx

    from tests.unit.test_viewer_http import _listen

    with pg_support.schema() as schema, _pg_open(schema, read_only=False) as writer:
        ids = branched_session(writer)
        writer.call("session::append", {"session_id": ids["sid"], "message": _msg("paris unindexed")})
        before = _pg_rows(schema)
        assert before["search_pending"]  # queued: the search box must not take the queue
        with _pg_open(schema, read_only=True) as sm, running(sm) as base, httpx.Client(base_url=base) as c:
            events, stop = _listen(base, "/api/events")
            for path in ("/", "/?q=paris", "/?q=unindexed", "/?status=idle&meta=user=u_1",
                         f"/sessions/{ids['sid']}", f"/sessions/{ids['fork']}", "/api/sessions",
                         f"/api/sessions/{ids['sid']}", "/sessions/s_nope"):
                assert c.get(path).status_code in (200, 404), path
            assert "paris unindexed" in c.get("/?q=unindexed").text
            time.sleep(0.5)
            assert events.empty()
            stop.set()
        assert _pg_rows(schema) == before
