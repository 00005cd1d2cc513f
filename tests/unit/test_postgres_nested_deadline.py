"""A store call made on a thread that is inside another one (a signal handler run while the outer
call waits on the database, a finalizer, an observer calling back) must leave the outer call's
armed connection as it found it: the thread kept one armed slot, so the inner call's connection
took it, the outer call's hand-back disarmed the inner's (already disarmed) one, and the outer's
stayed armed in the watchdog after it went back to the pool: at the outer call's deadline the
watchdog shut that pooled connection's socket down, under whichever call used it next."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import session_manager
from tests import pg_support
from tests.pg_support import text

pytestmark = pytest.mark.postgres

TIMEOUT_MS = 1500


@pytest.fixture
def schema() -> Iterator[str]:
    with pg_support.schema("smtest_leftovers") as name:
        yield name


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer (POSIX)")
def test_a_call_from_a_signal_handler_inside_a_call_leaves_no_connection_armed(schema: str) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.fail("signal handlers run on the main thread only")
    store = pg_support.open_store(schema, timeout_ms=TIMEOUT_MS)
    sm = session_manager.open(store=store)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        other = sm.call("session::create", {"title": "other"})["session_id"]
        for i in range(2):  # (warm: the append's one statement on a pooled connection)
            sm.call("session::append", {"session_id": sid, "message": text(f"warm {i}")})
        db = store.db
        used: list[Any] = []
        real_give, real_putconn = db.give, db.putconn

        def give(conn: Any, state: Any) -> None:
            used.append(conn)
            real_give(conn, state)

        def putconn(conn: Any) -> None:
            used.append(conn)
            real_putconn(conn)

        db.give, db.putconn = give, putconn  # type: ignore[method-assign]
        inner: list[Any] = []

        def handler(signum: int, frame: Any) -> None:  # runs while the append waits for its lock
            inner.append(sm.call("session::get", {"session_id": other})["meta"]["title"])

        previous = signal.signal(signal.SIGALRM, handler)
        try:
            with psycopg.connect(pg_support.DSN) as blocker:
                blocker.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s || ':' || %s, 0))", (schema, sid))
                threading.Timer(0.6, blocker.rollback).start()  # (the lock let go: the append goes on)
                signal.setitimer(signal.ITIMER_REAL, 0.2)
                appended = sm.call("session::append", {"session_id": sid, "message": text("outer")})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            db.give, db.putconn = real_give, real_putconn  # type: ignore[method-assign]
        assert inner == ["other"], "the handler never ran inside the call: the test proved nothing"
        assert appended["entry_id"]
        with db.watchdog._lock:
            left = dict(db.watchdog._armed)
        assert left == {}, "a connection handed back is still armed"
        # Past the outer call's deadline every connection the calls used still answers.
        time.sleep(TIMEOUT_MS / 1000 + 0.5)
        for conn in {id(c): c for c in used}.values():
            if not conn.closed:
                assert conn.execute("SELECT 1").fetchone() == (1,)
        messages = sm.call("session::messages", {"session_id": sid})["messages"]
        said = [m["message"]["content"][0]["text"] for m in messages]
        assert said == ["warm 0", "warm 1", "outer"]
    finally:
        sm.close()


def test_a_commit_ended_by_the_deadline_and_found_not_landed_is_not_run_again(schema: str) -> None:
    # Prevents: the check "did the deadline end this commit's connection" after a lost commit is
    # settled reading the settlement's own connection's Armed (it took the thread's one slot):
    # not fired, so the call was run again on the transactional path past its deadline (the
    # pool's idle connections checked with that passed deadline, the watchdog ending each) and
    # answered "no connection", not the deadline's "no answer".
    from tests.pg_relay import Relay

    relay = Relay()
    try:
        from session_manager.store.postgres import PostgresSettings, PostgresStore

        store = PostgresStore(PostgresSettings(dsn=relay.dsn(), schema=schema, timeout_ms=TIMEOUT_MS,
                                               connect_timeout_ms=1000))
        sm = session_manager.open(store=store)
        try:
            sid = sm.call("session::create", {"title": "t"})["session_id"]
            for i in range(2):  # (warm: the plain append's one exchange on a pooled connection)
                sm.call("session::append", {"session_id": sid, "message": text(f"warm {i}")})
            again: list[int] = []  # (the call run again on the transactional path)
            calls = store.optimistic.calls
            real_run_call = calls.run_call

            def counted(call: Any) -> Any:
                again.append(1)
                return real_run_call(call)

            calls.run_call = counted  # type: ignore[method-assign]
            relay.drop_after(0)  # (the append's exchange never reaches the server: the deadline ends it)
            # (lifted before the deadline: the exchange sent meanwhile stays lost, and the settlement's
            # connections after it get through)
            threading.Timer(TIMEOUT_MS / 1000 - 0.4, relay.drop_after, (None,)).start()
            with pytest.raises(session_manager.SessionError) as failed:
                sm.call("session::append", {"session_id": sid, "message": text("lost")})
            assert failed.value.code == "session/storage"
            assert "no answer within timeout_ms" in str(failed.value), str(failed.value)
            assert again == []  # (not run again past the deadline)
            messages = sm.call("session::messages", {"session_id": sid})["messages"]
            assert [m["message"]["content"][0]["text"] for m in messages] == ["warm 0", "warm 1"]
        finally:
            sm.close()
    finally:
        relay.close()
