"""What a reconnecting event listener replays: what it missed while away, nothing from before it started."""

from __future__ import annotations

import time

import pytest

from session_manager._wire.events import ON_MESSAGE_ADDED
from tests import pg_support
from tests.pg_support import text
from tests.unit.test_postgres_instances import open_sm, wait_for

pytestmark = pytest.mark.postgres


def terminate_listeners(schema_name: str) -> int:
    """Drop every instance's LISTEN connection (not the pools): the listeners reconnect and replay."""
    import psycopg

    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s AND query LIKE 'LISTEN %%'",
            (f"session-manager:{schema_name}"[:63],),
        ).fetchone()
        return int(row[0]) if row else 0


def test_a_reconnected_listener_does_not_replay_events_from_before_it_started(schema: str) -> None:
    # Prevents: the replay after a reconnect (ids above the high-water mark less a slack)
    # handing observers events committed before their instance ever listened.
    writer = open_sm(schema)
    try:
        sid = writer.call("session::create", {})["session_id"]
        before = [writer.call("session::append", {"session_id": sid, "message": text(f"old{i}")})["entry_id"]
                  for i in range(5)]
        late = open_sm(schema)
        try:
            seen: list[str] = []
            late.observe({"function_id": ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
            first = writer.call("session::append", {"session_id": sid, "message": text("first")})["entry_id"]
            assert wait_for(lambda: seen == [first])
            assert terminate_listeners(schema) >= 1
            assert wait_for(lambda: not late.service.store.outbox.listening or len(seen) > 1, timeout=10)
            assert wait_for(lambda: late.service.store.outbox.listening)
            after = writer.call("session::append", {"session_id": sid, "message": text("after")})["entry_id"]
            assert wait_for(lambda: after in seen)
            time.sleep(1.0)  # anything replayed late would be in by now
            assert seen == [first, after], f"replayed from before the start: {set(seen) & set(before)}"
            tail = late.call("session::messages-tail", {"session_id": sid, "limit": 10})["messages"]
            assert len(tail) == 7
        finally:
            late.close()
    finally:
        writer.close()
