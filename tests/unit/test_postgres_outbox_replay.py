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


def test_own_events_keep_commit_order_with_another_instance_committing_right_after(schema: str) -> None:
    # Shows: another instance's append to the same session, committed between this call's COMMIT
    # and the delivery of its own events, reaching this instance's observer first. The window is
    # held open on purpose (the outbox's after_commit hook) until the listener has had its chance.
    from session_manager._wire.events import ON_MESSAGE_ADDED as ADDED

    a, b = open_sm(schema), open_sm(schema)
    try:
        seen: list[str] = []
        a.observe({"function_id": ADDED}, lambda e: seen.append(e["entry_id"]))
        sid = a.call("session::create", {})["session_id"]
        outbox = a.service.store.outbox  # type: ignore[attr-defined]

        def between_commit_and_delivery() -> None:
            outbox.after_commit = None  # once
            b.call("session::append", {"session_id": sid, "message": text("theirs"), "entry_id": "theirs"})
            wait_for(lambda: "theirs" in seen, timeout=3)  # the listener's chance (the bug: it takes it)

        outbox.after_commit = between_commit_and_delivery
        a.call("session::append", {"session_id": sid, "message": text("mine"), "entry_id": "mine"})
        assert wait_for(lambda: "theirs" in seen)
        assert seen == ["mine", "theirs"]
    finally:
        b.close()
        a.close()


def test_two_instances_appending_to_one_session_are_observed_in_chain_order_each_once(schema: str) -> None:
    # Prevents: an instance's own appends reaching its observer out of the session's commit
    # order with another instance's racing appends (or with its own from another thread),
    # or any event twice or never. Real concurrency: no hook holds a window open.
    import threading

    from tests.unit.test_postgres_instances import check_linear

    a, b = open_sm(schema), open_sm(schema)
    try:
        seen: list[str] = []
        a.observe({"function_id": ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
        sid = a.call("session::create", {})["session_id"]
        errors: list[BaseException] = []

        def writer(sm: object, name: str) -> None:
            try:
                for i in range(12):
                    sm.call("session::append",  # type: ignore[attr-defined]
                            {"session_id": sid, "message": text(f"{name}-{i}"), "entry_id": f"{name}-{i}"})
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(sm, name))
                   for sm, name in ((a, "a1"), (a, "a2"), (b, "b1"), (b, "b2"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert wait_for(lambda: len(seen) >= 48)
        time.sleep(0.3)  # (nothing more may come)
        chain = check_linear(a, sid)
        assert len(seen) == 48 and len(set(seen)) == 48
        assert seen == [i for i in chain if i in set(seen)]
    finally:
        b.close()
        a.close()


def test_an_observer_appending_from_its_callback_waits_for_no_turn(schema: str,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: an observer's own call (on the listener's thread for another instance's event,
    # or inside this instance's delivery of its own) waiting for a turn the listener cannot give
    # while it waits on that observer: a stall until the call gives up waiting (logged), or worse.
    import logging

    a, b = open_sm(schema), open_sm(schema)
    try:
        seen: list[str] = []
        sid = a.call("session::create", {})["session_id"]

        def on_added(e: dict[str, object]) -> None:
            seen.append(str(e["entry_id"]))
            if e["entry_id"] in ("mine", "theirs"):
                a.call("session::append", {"session_id": sid, "message": text("echo"),
                                           "entry_id": f"echo-{e['entry_id']}"})

        a.observe({"function_id": ON_MESSAGE_ADDED}, on_added)
        with caplog.at_level(logging.WARNING, logger="session_manager.store.postgres.outbox"):
            a.call("session::append", {"session_id": sid, "message": text("mine"), "entry_id": "mine"})
            b.call("session::append", {"session_id": sid, "message": text("theirs"), "entry_id": "theirs"})
            assert wait_for(lambda: len(seen) >= 4)
            a.call("session::append", {"session_id": sid, "message": text("last"), "entry_id": "last"})
            assert wait_for(lambda: "last" in seen)
        assert not [r for r in caplog.records if "not heard in time" in r.getMessage()]
        assert sorted(seen) == sorted(["mine", "echo-mine", "theirs", "echo-theirs", "last"])
    finally:
        b.close()
        a.close()


def test_a_call_waiting_for_its_turn_when_the_listener_is_lost_delivers_once_without_stalling(
        schema: str, caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: a call waiting for a notification its lost listener will never hand it (the
    # reconnected listener replays rows, skipping its own), until it gives up (logged).
    import logging

    a, b = open_sm(schema), open_sm(schema)
    try:
        seen: list[str] = []
        a.observe({"function_id": ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
        sid = a.call("session::create", {})["session_id"]
        outbox = a.service.store.outbox  # type: ignore[attr-defined]

        def lose_the_listener() -> None:
            outbox.after_commit = None  # once
            assert terminate_listeners(schema) >= 1
            assert wait_for(lambda: not outbox.listening)

        outbox.after_commit = lose_the_listener
        with caplog.at_level(logging.WARNING, logger="session_manager.store.postgres.outbox"):
            a.call("session::append", {"session_id": sid, "message": text("mine"), "entry_id": "mine"})
        assert seen == ["mine"]
        assert not [r for r in caplog.records if "not heard in time" in r.getMessage()]
        assert wait_for(lambda: outbox.listening)
        b.call("session::append", {"session_id": sid, "message": text("theirs"), "entry_id": "theirs"})
        assert wait_for(lambda: "theirs" in seen)
        time.sleep(0.3)
        assert seen == ["mine", "theirs"]
    finally:
        b.close()
        a.close()
