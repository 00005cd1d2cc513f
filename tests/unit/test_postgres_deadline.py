"""A deadline on every call of the postgres adapter (``timeout_ms``), whatever
the network does: a peer that accepts bytes and never answers, packet loss
from some byte on, a pool with no free connection. The call answers
``session/storage`` naming the timeout, the connection it used is closed (never
handed back to the pool), nothing is half applied, no event fires, and the
instance serves the next call once the network is back.

No wall-clock assertion: each faulty call runs on a thread joined with a
generous bound (a hang, the defect these prevent, never ends at all)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import session_manager
from session_manager._wire.events import ON_MESSAGE_ADDED
from session_manager.errors import StoreError
from tests import pg_support
from tests.pg_relay import Relay
from tests.pg_support import text
from tests.unit.test_postgres_instances import wait_for

pytestmark = pytest.mark.postgres

TIMEOUT_MS = 1000
HANG = 30.0  # far beyond the deadline and its settling margin: only a hang reaches it


def open_via(relay: Relay, schema: str, **overrides: Any) -> session_manager.SessionManager:
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    settings = PostgresSettings(dsn=relay.dsn(), schema=schema, timeout_ms=TIMEOUT_MS, connect_timeout_ms=1000,
                                **overrides)
    return session_manager.open(store=PostgresStore(settings))


def answer(sm: session_manager.SessionManager, function_id: str, payload: dict[str, Any]) -> Any:
    """The call's answer (a response or the SessionError), from a thread that must end."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(sm.call(function_id, payload))
        except session_manager.SessionError as e:
            out.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=HANG)
    assert not worker.is_alive(), f"{function_id} hung past {HANG} s"
    return out[0]


def returned_connections(sm: session_manager.SessionManager) -> list[bool]:
    """Spy on the pool: for every connection handed back, whether it was closed by then."""
    pool = sm.service.store.db.pool
    seen: list[bool] = []
    real = pool.putconn

    def putconn(conn: Any) -> None:
        seen.append(conn.closed)
        real(conn)

    pool.putconn = putconn
    return seen


def served(sm: session_manager.SessionManager) -> bool:
    try:
        sm.call("session::get", {"session_id": "s"})
        return True
    except session_manager.SessionError as e:
        assert e.code == "session/storage"
        return False


def assert_timed_out(result: Any) -> None:
    assert isinstance(result, session_manager.SessionError), result
    assert result.code == "session/storage"
    assert f"timeout_ms={TIMEOUT_MS}" in str(result)


@pytest.mark.parametrize("fault", ["silent", "drop_after_bytes"])
def test_a_call_behind_a_silent_or_lossy_network_answers_within_the_deadline(
        schema: str, relay: Relay, fault: str) -> None:
    # Prevents: an append (and a read) hanging forever behind a relay that accepts bytes and never
    # answers, or drops everything after some bytes (keepalives and statement_timeout never fire),
    # and the dead connection going back to the pool.
    sm = open_via(relay, schema)
    try:
        seen: list[str] = []
        sm.observe({"function_id": ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
        sm.call("session::ensure", {"session_id": "s"})
        sm.call("session::append", {"session_id": "s", "entry_id": "before", "message": text("before")})
        handed_back = returned_connections(sm)
        if fault == "silent":
            relay.silence()
        else:
            relay.drop_after(7)  # part of the next message's header, then nothing
        assert_timed_out(answer(sm, "session::append",
                                {"session_id": "s", "entry_id": "lost", "message": text("lost")}))
        assert_timed_out(answer(sm, "session::messages-tail", {"session_id": "s", "limit": 50}))
        assert handed_back and all(handed_back), "a connection the deadline ended went back to the pool"
        relay.silence(False)
        relay.drop_after(None)
        # Served again by the same instance (once the pool's reconnection, which backs off
        # while the network is down, gets through): the failed append left nothing, fired nothing.
        assert wait_for(lambda: served(sm))
        ids = [m["entry_id"] for m in sm.call("session::messages", {"session_id": "s"})["messages"]]
        assert ids == ["before"]
        sm.call("session::append", {"session_id": "s", "entry_id": "after", "message": text("after")})
        assert [m["entry_id"] for m in sm.call("session::messages", {"session_id": "s"})["messages"]] == [
            "before", "after"]
        assert sm.call("session::get", {"session_id": "s"})["meta"]["message_count"] == 2
        assert seen == ["before", "after"]
    finally:
        relay.silence(False)
        relay.drop_after(None)
        sm.close()
    with session_manager.open(store=pg_support.open_store(schema)) as again:  # and after a restart
        assert [m["entry_id"] for m in again.call("session::messages", {"session_id": "s"})["messages"]] == [
            "before", "after"]


def test_waiting_for_a_pooled_connection_counts_against_the_deadline(schema: str) -> None:
    # Prevents: a call waiting pool_timeout_ms (here a minute) for a connection held elsewhere
    # when its own deadline (timeout_ms) is shorter.
    store = pg_support.open_store(schema, pool_size=1, pool_timeout_ms=60_000, timeout_ms=TIMEOUT_MS)
    sm = session_manager.open(store=store)
    holding, release = threading.Event(), threading.Event()
    held: list[BaseException] = []

    def hold() -> None:
        try:
            with store.mutation(("held",)):  # the pool's only connection, in a transaction
                holding.set()
                release.wait(HANG)
        except StoreError as e:
            held.append(e)

    holder = threading.Thread(target=hold, daemon=True)
    try:
        sm.call("session::ensure", {"session_id": "s"})
        holder.start()
        assert holding.wait(HANG)
        assert_timed_out(answer(sm, "session::get", {"session_id": "s"}))
        release.set()
        holder.join(HANG)
        # The holder's own transaction outlived its deadline too: ended, not committed.
        assert len(held) == 1 and f"timeout_ms={TIMEOUT_MS}" in str(held[0])
        assert sm.call("session::get", {"session_id": "s"})["meta"]["message_count"] == 0
    finally:
        release.set()
        sm.close()
