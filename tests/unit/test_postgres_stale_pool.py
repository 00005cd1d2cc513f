"""Pooled connections the server ended while they sat idle (a restart, a
failover, a DBA's pg_terminate_backend, idle_session_timeout)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

import session_manager
from session_manager._wire import events as ev
from tests import pg_support
from tests.pg_support import text

pytestmark = pytest.mark.postgres


def warm(sm: session_manager.SessionManager, sid: str, threads: int) -> None:
    """Leave ``threads`` connections idle in the pool: all taken at once, then given back.
    (Concurrent reads left it to timing: once reads got fast, six threads' calls rarely
    overlapped and the pool stayed at two connections; the test failed so in a CI run.)"""
    assert sm.call("session::get", {"session_id": sid})["meta"]["session_id"] == sid
    pool = sm.service.store.db.pool  # type: ignore[attr-defined]
    taken = [pool.getconn(timeout=10) for _ in range(threads)]
    for conn in taken:
        pool.putconn(conn)


def end_idle_pool_connections(schema_name: str) -> int:
    # Only idle pooled ones: the listener's (LISTEN) is the outbox's to recover.
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s"
            " AND state = 'idle' AND query NOT LIKE 'LISTEN%%' AND pid <> pg_backend_pid()",
            (f"session-manager:{schema_name}"[:63],),
        ).fetchone()
        return int(row[0]) if row else 0


def test_calls_after_the_server_ended_idle_pooled_connections_all_succeed(schema: str) -> None:
    # Prevents: each of the next pool_size calls (mutations and reads alike) failing with
    # session/storage on a dead pooled connection while the server is up, instead of
    # the store recovering on the next call.
    sm = session_manager.open(store=pg_support.open_store(schema, pool_size=6))
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        warm(sm, sid, 6)
        assert sm.service.store.db.pool.get_stats()["pool_available"] >= 3
        seen: list[dict[str, Any]] = []
        sm.observe({"function_id": ev.ON_MESSAGE_ADDED}, seen.append)
        assert end_idle_pool_connections(schema) >= 3

        outcomes: list[str] = []
        for i in range(6):
            for function_id, payload in (
                ("session::append", {"session_id": sid, "entry_id": f"e{i}", "message": text(str(i))}),
                ("session::get", {"session_id": sid}),
            ):
                try:
                    sm.call(function_id, payload)
                    outcomes.append("ok")
                except session_manager.SessionError as e:
                    outcomes.append(f"{function_id}: {e}")
        assert outcomes == ["ok"] * 12
        # Every append is stored once, in order, and announced once.
        ids = [m["entry_id"] for m in sm.call("session::messages", {"session_id": sid})["messages"]]
        assert ids == [f"e{i}" for i in range(6)]
        assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 6
        assert [e["entry_id"] for e in seen] == ids
    finally:
        sm.close()
    with session_manager.open(store=pg_support.open_store(schema)) as again:  # and after a restart
        assert [m["entry_id"] for m in again.call("session::messages", {"session_id": sid})["messages"]] == ids


def test_a_read_after_the_server_ended_idle_pooled_connections_succeeds(schema: str) -> None:
    # Prevents: an autocommit read (outside any mutation) failing on a dead pooled connection.
    sm = session_manager.open(store=pg_support.open_store(schema, pool_size=4))
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        warm(sm, sid, 4)
        assert end_idle_pool_connections(schema) >= 1
        for _ in range(4):
            assert sm.call("session::get", {"session_id": sid})["meta"]["title"] == "t"
            assert [m["session_id"] for m in sm.call("session::list", {})["sessions"]] == [sid]
    finally:
        sm.close()


def test_a_store_starts_one_pool_worker_which_replaces_every_lost_connection(schema: str) -> None:
    # Prevents: a cold store's open() starting (and waiting for) threads before its first
    # connection is attempted beyond the pool's scheduler and one worker; and that one worker
    # leaving lost connections unreplaced (each call after a restart then waiting in turn).
    before = set(threading.enumerate())
    sm = session_manager.open(store=pg_support.open_store(schema, pool_size=4))
    try:
        started = [t.name for t in set(threading.enumerate()) - before if t.name.startswith("session-manager-")]
        assert sorted(started) == ["session-manager-deadline", "session-manager-scheduler", "session-manager-worker-0"]
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        warm(sm, sid, 4)
        assert end_idle_pool_connections(schema) == 4
        # Four callers at once, each needing a connection of its own: all answered, the pool
        # back to four live connections.
        pool = sm.service.store.db.pool
        taken: list[Any] = []
        assert sm.call("session::get", {"session_id": sid})["meta"]["title"] == "t"  # (checks the pool)
        with ThreadPoolExecutor(4) as ex:
            titles = list(ex.map(lambda _: sm.call("session::get", {"session_id": sid})["meta"]["title"], range(4)))
        assert titles == ["t"] * 4
        taken = [pool.getconn(timeout=10) for _ in range(4)]
        assert all(not conn.broken and conn.execute("SELECT 1").fetchone() == (1,) for conn in taken)
        for conn in taken:
            pool.putconn(conn)
    finally:
        sm.close()
