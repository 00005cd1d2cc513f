"""Review 21: attacks on the sqlite store handing an ended thread's connection to the next new
thread (core.SqliteDatastore._take_back, issue 29). See docs/sqlite.md, "Review 21"."""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
from pathlib import Path

import pytest

import session_manager
from session_manager.store.sqlite import SqliteSettings, SqliteStore

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork: POSIX only")


def test_a_fork_while_another_thread_writes_leaves_that_write_whole(tmp_path: Path) -> None:
    # Prevents: after os.fork() the child clears the parent's other threads' states (CPython drops
    # every thread state but the forking one's), which handed their connections "back" in the
    # child: the child rolled back a transaction the parent's thread still had open on that
    # connection (the same WAL index in shared memory), dropping the WAL index's entries for
    # the frames it had spilled, and the parent's COMMIT then left a malformed database
    # ("database disk image is malformed"). The child also kept those connections to hand
    # to its own threads, and its new threads took the parent's idle ones (one SQLite connection
    # used by two processes).
    path = str(tmp_path / "d.db")
    store = SqliteStore(SqliteSettings(path=path))
    db = store.db
    began, forked = threading.Event(), threading.Event()
    failed: list[BaseException] = []
    theirs: list[sqlite3.Connection] = []

    def write() -> None:
        try:
            conn = db.conn()
            theirs.append(conn)  # (the idle one: taken by this new thread)
            conn.execute("CREATE TABLE scratch (k INTEGER PRIMARY KEY, v BLOB)")
            db.begin()
            for i in range(6000):  # ~24 MB: past the page cache, frames spill into the WAL before COMMIT
                conn.execute("INSERT INTO scratch (v) VALUES (?)", (bytes([i % 251]) * 4000,))
            began.set()
            forked.wait()
            db.end(conn, commit=True)
        except BaseException as e:  # (handed to the test)
            failed.append(e)
            began.set()

    both = threading.Barrier(2)  # two idle ones before the fork: the writer takes one
    ended = [threading.Thread(target=lambda: (theirs.append(db.conn()), both.wait())) for _ in range(2)]
    for e in ended:
        e.start()
    for e in ended:
        e.join()
    gc.collect()
    assert len(db._idle) == 2
    t = threading.Thread(target=write)
    t.start()
    began.wait()
    pid = os.fork()
    if pid == 0:  # the child: looks at what it kept, then leaves at once
        code = 1
        try:
            gc.collect()
            mine: list[sqlite3.Connection] = []
            child = threading.Thread(target=lambda: mine.append(db.conn()))
            child.start()
            child.join()
            code = 0 if not any(c is k for c in theirs for k in [*db._idle, *mine]) else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    forked.set()
    t.join()
    assert failed == []
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert check.execute("SELECT count(*), sum(length(v)) FROM scratch").fetchone() == (6000, 24_000_000)
        assert check.execute("SELECT v FROM scratch WHERE k = 4321").fetchone() == (bytes([4320 % 251]) * 4000,)
    finally:
        check.close()
    assert os.waitstatus_to_exitcode(status) == 0  # the child kept no connection of the parent's threads
    store.close()


def test_a_reload_landing_while_a_thread_takes_a_connection_is_not_lost(tmp_path: Path) -> None:
    # Prevents: a thread taking a connection (an ended thread's, or a new one) set it to the
    # durability read once and noted the level read again: a reload between the two (flush ->
    # fsync) left the connection at NORMAL noted as FULL, so no later write set it and every
    # commit acknowledged under fsync went unsynced. The reload is made to land there by the
    # connection's trace callback, as SQLite runs the PRAGMA.
    with session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db", durability="flush") as sm:
        store = sm.service.store
        db = store.db
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        ended = threading.Thread(target=db.conn)
        ended.start()
        ended.join()
        gc.collect()
        assert len(db._idle) == 1
        idle = db._idle[0]

        def reload(statement: str) -> None:
            if statement == "PRAGMA synchronous=NORMAL":
                store.durability = "fsync"

        idle.set_trace_callback(reload)
        levels: list[int] = []

        def write() -> None:
            sm.call("session::append", {"session_id": sid, "message": {
                "role": "user", "content": [{"type": "text", "text": "after"}], "timestamp": 1}})
            conn = db.local.state.conn
            assert conn is idle
            conn.set_trace_callback(None)
            levels.append(conn.execute("PRAGMA synchronous").fetchone()[0])

        t = threading.Thread(target=write)
        t.start()
        t.join()
        assert store.durability == "fsync"
        assert levels == [2]  # FULL: the append committed at the durability of its time
        assert [e["message"]["content"][0]["text"] for e in store.entries(sid)] == ["after"]
