"""Opening the sqlite adapter: the URI forms, aio, durability, exact values,
and every bad file refused with a session/storage naming the cause and
nothing changed."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import aio
from session_manager.errors import STORAGE, SessionError, StoreError
from session_manager.store import Commit
from session_manager.store.sql.fts5 import doc
from session_manager.store.sql.statements import statements
from session_manager.store.sqlite import SqliteSettings, SqliteStore, search
from session_manager.store.sqlite.core import qmark
from session_manager.store.sqlite.path import _RANGE_SQL, HIT_SQL, SqlitePath
from session_manager.store.sqlite.schema import MIGRATIONS
from session_manager.store.sqlite.settings import path_of

BIG = 2**70 + 1  # past float and int64: must round-trip exactly


def _user(text: str) -> Any:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def test_relative_and_absolute_uris_name_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the SQLAlchemy convention read wrongly (an absolute path taken as relative, or the reverse).
    assert path_of("sqlite:///rel/x.db") == "rel/x.db"
    assert path_of("sqlite:////abs/x.db") == "/abs/x.db"
    for bad in ("sqlite://x.db", "sqlite:///", "sqlite:///x.db?mode=ro"):
        with pytest.raises(ValueError, match="sqlite:///relative"):
            path_of(bad)
    monkeypatch.chdir(tmp_path)
    with session_manager.open("sqlite:///rel/store.db") as sm:
        sid = sm.create(metadata={"n": BIG}).session_id
        sm.append(sid, message=_user("hello"))
    assert (tmp_path / "rel" / "store.db").is_file()
    absolute = f"sqlite:///{tmp_path}/rel/store.db"  # tmp_path starts with "/": four slashes
    assert absolute.startswith("sqlite:////")
    with session_manager.open(absolute) as sm:
        meta = sm.call("session::get", {"session_id": sid})["meta"]
        assert meta["metadata"] == {"n": BIG} and type(meta["metadata"]["n"]) is int
        assert meta["message_count"] == 1
        tail = sm.call("session::messages-tail", {"session_id": sid, "limit": 10})
        assert [m["message"]["content"][0]["text"] for m in tail["messages"]] == ["hello"]


def test_aio_open_takes_the_uri(tmp_path: Path) -> None:
    # Prevents: aio.open forgetting the sqlite URI that session_manager.open takes.
    uri = f"sqlite:///{tmp_path / 'a.db'}"

    async def run() -> str:
        async with aio.open(uri) as asm:
            created = await asm.create(title="t")
            await asm.append(created.session_id, message=_user("x"))
            return created.session_id

    sid = asyncio.run(run())
    with session_manager.open(uri) as sm:
        assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 1


@pytest.mark.parametrize(("durability", "level", "wal_pages"), [("flush", 1, 8000), ("fsync", 2, 1000)])
def test_durability_selects_synchronous(tmp_path: Path, durability: str, level: int, wal_pages: int) -> None:
    # Prevents: fsync durability running synchronous=NORMAL (a power loss losing acknowledged commits);
    # and a sync per commit on a WAL left to grow for 8,000 pages (each sync then journals the size too).
    store = SqliteStore(SqliteSettings(path=str(tmp_path / "d.db"), durability=durability))  # type: ignore[arg-type]
    try:
        assert store.db.conn().execute("PRAGMA synchronous").fetchone()[0] == level
        assert store.db.conn().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.db.conn().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == wal_pages
    finally:
        store.close()


def test_fsync_sizes_the_wal_once_past_its_frames(tmp_path: Path) -> None:
    # Prevents: with durability fsync, every commit's sync also journaling the WAL file's new
    # size (the WAL is sized once, at the first write); and the sizing touching frames another
    # connection's snapshot still reads (zeros go past the file's end only), or a zeroed tail
    # read back as frames (every write of both stores reads back, the file checks sound).
    path = tmp_path / "w.db"
    wal = Path(str(path) + "-wal")
    frame = 24 + 4096
    first = SqliteStore(SqliteSettings(path=str(path)))  # flush: its WAL laid ahead a step at a time (1 MiB first)
    second = SqliteStore(SqliteSettings(path=str(path), durability="fsync"))
    try:
        meta = {"session_id": "s", "title": "", "description": "", "status": "idle", "created_at": 1,
                "updated_at": 1, "message_count": 0}
        first.commit("s", Commit(meta=meta))
        parent = None
        for i in range(30):
            entry = {"kind": "message", "id": f"e{i}", "parent_id": parent, "timestamp": i, "revision": 0,
                     "message": _user(f"m{i}")}
            first.commit("s", Commit(entries=(entry,), leaf=f"e{i}", meta={**meta, "message_count": i + 1}))
            parent = f"e{i}"
        grown = wal.stat().st_size
        assert grown < 1100 * frame
        reader = first.db.conn()
        reader.execute("BEGIN")  # a snapshot held over the sizing: its frames must stay as they are
        assert len(first.entries("s")) == 30
        second.commit("t", Commit(meta={**meta, "session_id": "t"}))
        assert 32 + 1100 * frame <= wal.stat().st_size
        assert [e["id"] for e in first.entries("s")] == [f"e{i}" for i in range(30)]
        reader.execute("COMMIT")
        sized = wal.stat().st_size
        second.commit("t", Commit(meta={**meta, "session_id": "t", "title": "again"}))
        assert wal.stat().st_size == sized  # once: the next commit writes into the sized file
        assert first.get_meta("t") == {**meta, "session_id": "t", "title": "again"}
        assert [e["id"] for e in second.entries("s")] == [f"e{i}" for i in range(30)]
    finally:
        first.close()
        second.close()
    with session_manager.open(f"sqlite:///{path}") as sm:  # reopened (the last close removed the WAL)
        store: Any = sm.service.store
        assert store.db.conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert len(store.entries("s")) == 30 and store.get_meta("t")["title"] == "again"


def test_the_wal_of_a_file_moved_in_under_the_path_is_never_sized(tmp_path: Path) -> None:
    # Prevents: a fsync store whose file was removed and made again under its path (by another
    # open) writing zeros into the new database's WAL, whose writers it does not lock out.
    path = tmp_path / "m.db"
    meta = {"session_id": "s", "title": "", "description": "", "status": "idle", "created_at": 1,
            "updated_at": 1, "message_count": 0}
    old = SqliteStore(SqliteSettings(path=str(path), durability="fsync"))
    other = None
    try:
        old.commit("s", Commit(meta=meta))
        for f in tmp_path.iterdir():
            f.unlink()
        other = SqliteStore(SqliteSettings(path=str(path)))  # flush: its WAL laid a step ahead by its own writes
        other.commit("t", Commit(meta={**meta, "session_id": "t"}))
        wal = Path(str(path) + "-wal")
        before = wal.read_bytes()
        old.db.wal_short = True  # as after a TRUNCATE checkpoint: sized again at the next write
        with pytest.raises(StoreError, match="no longer the database file"):
            old.commit("s", Commit(meta={**meta, "title": "lost"}))
        assert wal.read_bytes() == before
        assert other.get_meta("t") == {**meta, "session_id": "t"} and other.get_meta("s") is None
    finally:
        old.close()
        if other is not None:
            other.close()


def test_a_crash_over_a_sized_wal_keeps_every_commit(tmp_path: Path) -> None:
    # Prevents: a WAL sized with zeros past its frames misread when the file is recovered after a
    # crash (the process gone, its WAL never checkpointed): a commit lost, or zeros taken as frames.
    path = tmp_path / "c.db"
    script = (
        "import os, sys\n"
        "from session_manager.store import Commit\n"
        "from session_manager.store.sqlite import SqliteSettings, SqliteStore\n"
        f"store = SqliteStore(SqliteSettings(path={str(path)!r}, durability='fsync'))\n"
        "meta = {'session_id': 's', 'title': '', 'description': '', 'status': 'idle', 'created_at': 1,"
        " 'updated_at': 1, 'message_count': 0}\n"
        "store.commit('s', Commit(meta=meta))\n"
        "parent = None\n"
        "for i in range(20):\n"
        "    e = {'kind': 'message', 'id': f'e{i}', 'parent_id': parent, 'timestamp': i, 'revision': 0,"
        " 'message': {'role': 'user', 'content': [{'type': 'text', 'text': str(i)}], 'timestamp': 1}}\n"
        "    store.commit('s', Commit(entries=(e,), leaf=e['id'], meta={**meta, 'message_count': i + 1}))\n"
        "    parent = e['id']\n"
        "os._exit(0)  # no close: the WAL stays as a crash leaves it\n")
    subprocess.run([sys.executable, "-c", script], check=True, cwd=Path(__file__).resolve().parents[2])
    assert Path(str(path) + "-wal").stat().st_size >= 32 + 1100 * (24 + 4096)  # sized, never checkpointed
    with session_manager.open(f"sqlite:///{path}") as sm:
        store: Any = sm.service.store
        assert store.db.conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert [e["id"] for e in store.path("s", store.get_leaf("s"))] == [f"e{i}" for i in range(20)]
        assert store.get_meta("s")["message_count"] == 20


def _refused(uri: str, *words: str) -> str:
    with pytest.raises(SessionError) as raised:
        session_manager.open(uri)
    assert raised.value.code == STORAGE
    for word in words:
        assert word in str(raised.value)
    return str(raised.value)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    # Prevents: a traceback (or a database created inside) when the path names a directory.
    (tmp_path / "d.db").mkdir()
    _refused(f"sqlite:///{tmp_path / 'd.db'}", "is a directory")
    assert list((tmp_path / "d.db").iterdir()) == []


def test_a_file_that_is_not_sqlite_is_refused_unchanged(tmp_path: Path) -> None:
    # Prevents: a JSONL file (or any other) opened as a database and overwritten.
    target = tmp_path / "notes.db"
    target.write_bytes(b'{"this is": "not a database"}\n' * 200)
    before = target.read_bytes()
    _refused(f"sqlite:///{target}", "is not a SQLite database")
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


def test_another_applications_database_is_refused_unchanged(tmp_path: Path) -> None:
    # Prevents: our tables added into some other program's SQLite file.
    target = tmp_path / "other.db"
    with sqlite3.connect(target) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER)")
    _refused(f"sqlite:///{target}", "not a session-manager database", "orders")
    with sqlite3.connect(target) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert names == {"orders"}


def test_a_newer_schema_version_is_refused_unchanged(tmp_path: Path) -> None:
    # Prevents: an older release writing into a database a newer one migrated.
    target = tmp_path / "new.db"
    with session_manager.open(f"sqlite:///{target}") as sm:
        sid = sm.create().session_id
    with sqlite3.connect(target) as conn:
        conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    _refused(f"sqlite:///{target}", f"schema version {len(MIGRATIONS) + 1}", "newer")
    with sqlite3.connect(target) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) + 1
        assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 1
    with sqlite3.connect(target) as conn:
        conn.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
    with session_manager.open(f"sqlite:///{target}") as sm:
        assert sm.call("session::get", {"session_id": sid})["meta"]["session_id"] == sid


def _lock_down(paths: list[Path], on: bool) -> bool:
    """Make ``paths`` unwritable (``on``) or writable again: by mode, or as root (whom modes do
    not bind) by the immutable attribute; False when neither is possible here."""
    if os.geteuid() != 0:
        for p in paths:
            p.chmod((0o555 if p.is_dir() else 0o444) if on else (0o755 if p.is_dir() else 0o644))
        return True
    if shutil.which("chattr") is None:
        return False
    done = subprocess.run(["chattr", "+i" if on else "-i", *map(str, paths)], capture_output=True, check=False)
    return done.returncode == 0


def test_an_unwritable_file_is_refused_unchanged(tmp_path: Path) -> None:
    # Prevents: an unwritable database opening "fine" and failing on the first mutation with a traceback.
    where = tmp_path / "ro"
    target = where / "ro.db"
    with session_manager.open(f"sqlite:///{target}") as sm:
        sm.create()
    before = target.read_bytes()
    if not _lock_down([target, where], on=True):
        pytest.skip("running as root without a working chattr: no file is unwritable to this process")
    try:
        text = _refused(f"sqlite:///{target}", str(target), "permissions")
        assert "cannot be" in text
    finally:
        _lock_down([target, where], on=False)
    assert target.read_bytes() == before
    assert sorted(p.name for p in where.iterdir()) == ["ro.db"]


def test_timestamps_past_64_bits_store_and_page_exactly(tmp_path: Path) -> None:
    # Prevents: an OverflowError traceback (sqlite3 binds 64-bit integers only) when a meta's
    # timestamps or a list cursor's key exceed them; the meta itself must come back exact.
    from session_manager.store import Commit
    from session_manager.testing.contract import meta

    store = SqliteStore(SqliteSettings(path=str(tmp_path / "big.db")))
    try:
        for n, sid in enumerate(("a", "b", "c")):
            store.commit(sid, Commit(meta=meta(sid, updated_at=BIG + n)))
        assert [m["session_id"] for m in store.ordered_metas("updated_desc", None, None, None)] == ["c", "b", "a"]
        after = [m["session_id"] for m in store.ordered_metas("updated_desc", (BIG + 2, "c"), None, None)]
        assert after == ["b", "a"]
        got = store.get_meta("a")
        assert got is not None and got["updated_at"] == BIG and type(got["updated_at"]) is int
    finally:
        store.close()


def test_bad_settings_are_refused_before_any_file_is_made(tmp_path: Path) -> None:
    # Prevents: a mistyped durability (or a zero poll interval) surfacing as a KeyError traceback,
    # or a busy loop, after the database file was created.
    with pytest.raises(ValueError, match="durability"):
        session_manager.open(f"sqlite:///{tmp_path / 'a.db'}", durability="sync")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="poll_ms"):
        SqliteSettings(path=str(tmp_path / "b.db"), poll_ms=0)
    with pytest.raises(ValueError, match="outbox_retention_s"):
        SqliteSettings(path=str(tmp_path / "b.db"), outbox_retention_s=0.5)
    assert list(tmp_path.iterdir()) == []


def _schema_of(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    return sorted(conn.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL").fetchall())


def _old_statement(script: str, starts: str) -> str:
    """The statement of an old migration that starts so (its DDL exactly as that release ran it)."""
    return next(st for st in statements(script) if starts in st)


def _as_version_7(conn: sqlite3.Connection) -> None:
    """Back to schema version 7, exactly as that release made a file: no session version
    (migration 8 dropped: no sessions.rev, the sessions_key trigger as version 7 made it)."""
    conn.execute("DROP TRIGGER sessions_key")
    conn.execute(_old_statement(MIGRATIONS[6], "CREATE TRIGGER sessions_key"))
    conn.execute("ALTER TABLE sessions DROP COLUMN rev")
    conn.execute("PRAGMA user_version = 7")


def _as_version_6(conn: sqlite3.Connection) -> None:
    """Back to schema version 6, exactly as that release made a file: entries naming their session
    by its text id (migration 7 dropped: no sessions.sk, its index and trigger), seq kept."""
    _as_version_7(conn)
    conn.execute("ALTER TABLE entries RENAME TO entries_v7")
    conn.execute("DROP TRIGGER search_revised")
    conn.execute(_old_statement(MIGRATIONS[0], "CREATE TABLE entries"))
    conn.execute("INSERT INTO entries (seq, session_id, entry_id, parent_id, depth, jump_id, jump_depth, body)"
                 " SELECT e.seq, s.session_id, e.entry_id, e.parent_id, e.depth, e.jump_id, e.jump_depth, e.body"
                 " FROM entries_v7 e JOIN sessions s ON s.sk = e.sk ORDER BY e.seq")
    conn.execute("DROP TABLE entries_v7")
    conn.execute(MIGRATIONS[1])
    conn.execute(_old_statement(search.CATCH_UP, "CREATE TRIGGER search_revised"))
    conn.execute("DROP TRIGGER sessions_key")
    conn.execute("DROP INDEX sessions_sk")
    conn.execute("ALTER TABLE sessions DROP COLUMN sk")
    conn.execute("PRAGMA user_version = 6")


def _as_version_5(conn: sqlite3.Connection, indexed_up_to: int | None = None) -> None:
    """Back to schema version 5: the search index as versions 3 to 5 made it (each row with its
    session and entry ids as text, an index on the session; migration 6 dropped), holding the
    entries up to ``indexed_up_to`` (default: every entry, the mark at the last)."""
    _as_version_6(conn)
    if indexed_up_to is None:
        indexed_up_to = conn.execute("SELECT coalesce(max(seq), 0) FROM entries").fetchone()[0]
    for table in ("search_fts", "search_docs", "search_totals"):
        conn.execute(f"DROP TABLE {table}")
    for statement in statements(search.MIGRATION):
        conn.execute(statement)
    for seq, sid, eid, body in conn.execute("SELECT seq, session_id, entry_id, body FROM entries WHERE seq <= ?",
                                            (indexed_up_to,)).fetchall():
        found = doc(json.loads(body))
        if found is not None:
            conn.execute("INSERT INTO search_docs (seq, session_id, entry_id, role, ts, length, words)"
                         " VALUES (?, ?, ?, ?, ?, ?, ?)", (seq, sid, eid, *found))
    conn.execute("UPDATE search_state SET last_seq = ?", (indexed_up_to,))
    conn.execute("PRAGMA user_version = 5")


def _drop_list_key(conn: sqlite3.Connection, indexed_up_to: int | None = None) -> None:
    """Back to schema version 4: the search index as version 4 made it (:func:`_as_version_5`),
    the list order's own key (migration 5) dropped, its index on updated_at again."""
    _as_version_5(conn, indexed_up_to)
    conn.execute("DROP INDEX sessions_listed")
    conn.execute("ALTER TABLE sessions DROP COLUMN listed_at")
    conn.execute("CREATE INDEX sessions_updated ON sessions (updated_at, session_id)")
    conn.execute("PRAGMA user_version = 4")


def _drop_catch_up(conn: sqlite3.Connection) -> None:
    """Back to schema version 3: the index's high-water mark and revision queue (migration 4) dropped."""
    _drop_list_key(conn)
    conn.execute("DROP TRIGGER search_revised")
    conn.execute("DROP TABLE search_state")
    conn.execute("DROP TABLE search_dirty")
    conn.execute("PRAGMA user_version = 3")


def _drop_search(conn: sqlite3.Connection) -> None:
    """Back to schema version 2: the search index (migrations 3 and 4) dropped."""
    _drop_catch_up(conn)
    conn.execute("DROP TABLE search_fts")
    conn.execute("DROP TABLE search_docs")  # (its triggers go with it)
    conn.execute("DROP TABLE search_totals")
    conn.execute("PRAGMA user_version = 2")


def test_a_version_2_file_gets_its_search_index_filled_from_its_entries(tmp_path: Path) -> None:
    # Prevents: a database written before the FTS5 index (schema version 2) opening with an empty
    # index (its stored messages never found) or failing to open; the migration indexes them.
    target = tmp_path / "v2.db"
    with session_manager.open(f"sqlite:///{target}") as sm:
        sid = sm.create().session_id
        first = sm.append(sid, message=_user("Élan vital")).entry_id
        sm.append(sid, message=_user("brown fox"))
        before = {q: sm.call("session::search", {"query": q}) for q in ("elan", "fox", "vit", "brown f")}
    with sqlite3.connect(target) as conn:
        _drop_search(conn)
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE 'search%'").fetchone()[0] == 0
    with session_manager.open(f"sqlite:///{target}") as sm:
        assert {q: sm.call("session::search", {"query": q}) for q in before} == before
        assert [h["entry_id"] for h in before["elan"]["hits"]] == [first]
    with sqlite3.connect(target) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        assert conn.execute("SELECT count(*) FROM search_docs").fetchone()[0] == 2


def test_a_version_3_file_keeps_its_index_and_catches_up_from_its_last_entry(tmp_path: Path) -> None:
    # Prevents: the move to an index caught up before each query (schema version 4) indexing a
    # version 3 file's entries a second time (duplicate rows, or a failed open), or losing track of
    # what is indexed: the mark starts at the last entry, which version 3 indexed in its commit.
    target = tmp_path / "v3.db"
    with session_manager.open(f"sqlite:///{target}") as sm:
        sid = sm.create().session_id
        sm.append(sid, message=_user("Élan vital"))
        sm.append(sid, message=_user("brown fox"))
        before = {q: sm.call("session::search", {"query": q}) for q in ("elan", "fox", "brown f")}
    with sqlite3.connect(target) as conn:
        _drop_catch_up(conn)
        last = conn.execute("SELECT max(seq) FROM entries").fetchone()[0]
    with session_manager.open(f"sqlite:///{target}") as sm:
        with sqlite3.connect(target) as conn:
            assert conn.execute("SELECT last_seq FROM search_state").fetchone()[0] == last
        assert {q: sm.call("session::search", {"query": q}) for q in before} == before
        later = sm.append(sid, message=_user("brown owl")).entry_id
        hits = sm.call("session::search", {"query": "brown"})["hits"]
        assert later in [h["entry_id"] for h in hits] and len(hits) == 2
    with sqlite3.connect(target) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) == 9
        assert conn.execute("SELECT count(*) FROM search_docs").fetchone()[0] == 3


@pytest.mark.parametrize("version", [4, 5])
def test_an_older_file_gets_its_index_rebuilt_without_the_ids(tmp_path: Path, version: int) -> None:
    # Prevents: the compact index (schema version 6: no copy of the entries' ids, half the bytes)
    # failing to open a version 4 file (through version 5, the list key) or a version 5 one,
    # keeping its old rows (ids as text, an index on the session), or losing what the file had
    # not indexed yet: the migration rebuilds the index from the entries, and every answer
    # (scoped, by role, paged) and the list order stay the same.
    target = tmp_path / f"v{version}.db"
    with session_manager.open(f"sqlite:///{target}") as sm:
        a = sm.create(metadata={"owner": "a"}).session_id
        b = sm.create(metadata={"owner": "b"}).session_id
        for i in range(12):
            sm.append(a if i % 2 else b, message=_user(f"Élan vital brown fox {i} " + "owl " * (i % 3)))
        sm.append(a, message={"role": "assistant", "content": [{"type": "text", "text": "brown owl"}],
                              "timestamp": 2, "stop_reason": "end", "model": "m", "provider": "p"})
        calls = [{"query": q} for q in ("elan", "fox", "owl", "brown o")]
        calls += [{"query": "brown", "metadata": {"owner": "a"}}, {"query": "owl", "roles": ["assistant"]},
                  {"query": "brown", "limit": 3}]
        before = [sm.call("session::search", c) for c in calls]
        assert before[-1]["next_cursor"]
        calls.append({"query": "brown", "limit": 3, "cursor": before[-1]["next_cursor"]})
        before.append(sm.call("session::search", calls[-1]))
        listed = sm.call("session::list", {})
    with sqlite3.connect(target) as conn:
        last = conn.execute("SELECT max(seq) FROM entries").fetchone()[0]
        (_drop_list_key if version == 4 else _as_version_5)(conn, last - 1)  # (its last entry not indexed yet)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == version
        assert "entry_id" in {r[1] for r in conn.execute("PRAGMA table_info(search_docs)")}
        assert ("listed_at" in {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}) == (version == 5)
    with session_manager.open(f"sqlite:///{target}") as sm:
        assert [sm.call("session::search", c) for c in calls] == before
        assert sm.call("session::list", {}) == listed
    with sqlite3.connect(target) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) == 9
        assert {r[1] for r in conn.execute("PRAGMA table_info(search_docs)")} == {
            "seq", "sess", "role", "ts", "length", "words"}
        assert conn.execute("SELECT count(*) FROM search_docs").fetchone()[0] == 13
        assert conn.execute("SELECT last_seq FROM search_state").fetchone()[0] == last
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'search_docs_session'").fetchone()[0] == 0
        assert conn.execute("SELECT session_id, docs FROM search_totals ORDER BY session_id").fetchall() == sorted(
            [(a, 7), (b, 6)])


def test_a_version_1_file_is_upgraded_in_place(tmp_path: Path) -> None:
    # Prevents: a file written before the entries_depth index (schema version 1) failing to open,
    # being rebuilt (its data lost), or read without the index; the upgrade is one in-place step.
    target = tmp_path / "v1.db"
    with session_manager.open(f"sqlite:///{target}") as sm:
        sid = sm.create().session_id
        ids = [sm.append(sid, message=_user(f"m{i}")).entry_id for i in range(30)]
        sm.append(sid, message=_user("branch"), parent_id=ids[9])
        sm.set_active_leaf(sid, entry_id=ids[29])
        before = sm.call("session::messages-tail", {"session_id": sid, "limit": 10})
    with sqlite3.connect(target) as conn:  # back to version 1: exactly what migration 1 alone makes
        _drop_search(conn)
        conn.execute("DROP INDEX entries_depth")
        conn.execute("PRAGMA user_version = 1")
        v1 = sqlite3.connect(":memory:")
        v1.executescript(MIGRATIONS[0])
        assert _schema_of(conn) == _schema_of(v1)
    with session_manager.open(f"sqlite:///{target}") as sm:
        assert sm.call("session::messages-tail", {"session_id": sid, "limit": 10}) == before
        assert sm.get(sid).meta.message_count == 31
    with sqlite3.connect(target) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) == 9
        plan = conn.execute("EXPLAIN QUERY PLAN " + _RANGE_SQL, (sid, 0, 9, 20)).fetchall()
        assert any("entries_depth" in str(row) for row in plan)
        assert conn.execute("SELECT count(*) FROM entries").fetchone()[0] == 31


def _plan(conn: sqlite3.Connection, sql: str, params: Any) -> str:
    return " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + qmark(sql), params))


def test_a_version_6_file_is_upgraded_in_place_to_integer_session_keys(tmp_path: Path) -> None:
    # Prevents: the move to entries naming their session by an integer key (schema version 7)
    # losing or misattributing a version 6 file's entries (two sessions, a branch, a revision, an
    # entry the search index had not caught up with, entries whose session had no row), breaking
    # its search index (kept: its rows are keyed by seq, which the upgrade keeps), or leaving a
    # statement on a scan: each probe is checked with EXPLAIN QUERY PLAN.
    target = tmp_path / "v6.db"
    with session_manager.open(f"sqlite:///{target}") as sm:
        a = sm.create(metadata={"owner": "a"}).session_id
        b = sm.create(metadata={"owner": "b"}).session_id
        ids = [sm.append(a if i % 3 else b, message=_user(f"brown fox {i}")).entry_id for i in range(30)]
        mine = [e for i, e in enumerate(ids) if i % 3]
        branch = sm.append(a, message=_user("brown owl branch"), parent_id=mine[4]).entry_id
        sm.set_active_leaf(a, entry_id=mine[-1])
        sm.update_message(a, entry_id=mine[2], content="brown cat, revised")
        last = sm.append(b, message=_user("brown heron, not indexed yet")).entry_id
        calls = [{"query": q} for q in ("brown", "fox", "owl", "cat", "heron", "brown f")]
        calls += [{"query": "brown", "metadata": {"owner": "b"}}, {"query": "brown", "limit": 4}]
        searched = [sm.call("session::search", c) for c in calls[:-1]]
        reads = [sm.call("session::messages-tail", {"session_id": s, "limit": 5}) for s in (a, b)]
        reads += [sm.call("session::messages", {"session_id": a, "limit": 4})]
        got = [sm.call("session::get-message", {"session_id": a, "entry_id": e}) for e in (mine[2], branch)]
        entries = {s: sm.service.store.entries(s) for s in (a, b)}
    with sqlite3.connect(target) as conn:
        _as_version_6(conn)
        # The file as version 6 left it, schema and all: exactly what migrations 1 to 6 make.
        v6 = sqlite3.connect(":memory:")
        for step in MIGRATIONS[:6]:
            for statement in statements(step):
                v6.execute(statement)
        assert _schema_of(conn) == _schema_of(v6)
        # The heron not indexed yet; and an entry whose session has no row (a foreign writer's).
        conn.execute("DELETE FROM search_docs WHERE seq = (SELECT max(seq) FROM entries)")
        conn.execute("UPDATE search_state SET last_seq = last_seq - 1")
        conn.execute("INSERT INTO entries (session_id, entry_id, parent_id, depth, jump_id, jump_depth, body)"
                     " SELECT 'stray', entry_id, NULL, 0, entry_id, 0, json_set(body, '$.kind', 'custom')"
                     " FROM entries WHERE entry_id = ?", (last,))  # (not searchable: the answers stay)
        seqs = dict(conn.execute("SELECT entry_id, seq FROM entries WHERE session_id != 'stray'").fetchall())
    with session_manager.open(f"sqlite:///{target}") as sm:
        assert [sm.call("session::search", c) for c in calls[:-1]] == searched
        assert [sm.call("session::messages-tail", {"session_id": s, "limit": 5}) for s in (a, b)] == reads[:2]
        assert sm.call("session::messages", {"session_id": a, "limit": 4}) == reads[2]
        assert [sm.call("session::get-message", {"session_id": a, "entry_id": e}) for e in (mine[2], branch)] == got
        assert {s: sm.service.store.entries(s) for s in (a, b)} == entries
        assert [e["id"] for e in sm.service.store.entries("stray")] == [last]
        # Writes after the upgrade: a revision (re-indexed: the trigger is back), an append, a new
        # session (its key the next one), a deletion (its entries and index rows go with it).
        sm.update_message(a, entry_id=mine[3], content="brown lynx, revised after")
        assert [h["entry_id"] for h in sm.call("session::search", {"query": "lynx"})["hits"]] == [mine[3]]
        c = sm.create().session_id
        later = sm.append(c, message=_user("brown wren")).entry_id
        assert [h["entry_id"] for h in sm.call("session::search", {"query": "wren"})["hits"]] == [later]
        sm.delete(b)
        assert sm.call("session::search", {"query": "heron"})["hits"] == []
    with sqlite3.connect(target) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) == 9
        assert "session_id" not in {r[1] for r in conn.execute("PRAGMA table_info(entries)")}
        keys = dict(conn.execute("SELECT session_id, sk FROM sessions").fetchall())
        assert set(keys) == {a, c, "stray"} and len(set(keys.values())) == 3
        assert keys[c] == max(keys.values())  # (b's was the highest but one or not: a new one is past all)
        kept = dict(conn.execute("SELECT entry_id, seq FROM entries WHERE sk = ?", (keys[a],)).fetchall())
        assert all(seqs[e] == seq for e, seq in kept.items() if e in seqs)  # seq kept: the index's key
        assert conn.execute("SELECT count(*) FROM entries e LEFT JOIN sessions s ON s.sk = e.sk"
                            " WHERE s.session_id IS NULL").fetchone()[0] == 0
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # The plans: each probe a search of an index (no scan of entries, no temporary sort).
        sk = "sk = (SELECT sk FROM sessions WHERE session_id = %s)"
        args = {"s": a, "start": mine[-1], "e": mine[1], "a": 0, "b": 3}
        plans = {
            "tail": _plan(conn, _RANGE_SQL, (a, 0, 9, 20)),
            "get-message": _plan(conn, f"SELECT body FROM entries WHERE {sk} AND entry_id = %s", (a, mine[2])),
            "leaf": _plan(conn, "SELECT s.meta, s.leaf, e.depth FROM sessions s LEFT JOIN entries e"
                                " ON e.sk = s.sk AND e.entry_id = s.leaf WHERE s.session_id = %s", (a,)),
            "walk": _plan(conn, SqlitePath.window_sql, args),
            "holds": _plan(conn, SqlitePath.holds_sql, args),
            "hit": _plan(conn, HIT_SQL, args),
            "entries": _plan(conn, f"SELECT body FROM entries WHERE {sk} ORDER BY seq", (a,)),
        }
        for name, plan in plans.items():
            assert "SCAN e" not in plan and "SCAN entries" not in plan, (name, plan)
        assert "SEARCH entries USING INDEX entries_depth (sk=? AND depth>? AND depth<?)" in plans["tail"]
        for name in ("get-message", "leaf", "walk", "holds", "hit"):
            assert "USING INDEX entries_id (sk=? AND entry_id=?)" in plans[name], (name, plans[name])
