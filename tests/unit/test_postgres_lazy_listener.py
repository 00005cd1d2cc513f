"""A postgres instance listens only when it has something to deliver to (issue 24).

Every listening process is woken by every append's notification (a backend and a
Python thread each time), so an instance nobody observes opens no listener: its
appends still write their outbox rows and notify whoever listens; its first
observer starts the listener, which from then on gets every later event of the
other instances; and with nobody listening anywhere the writers prune the outbox.
"""

from __future__ import annotations

from typing import Any

import pytest

import session_manager
from session_manager._wire import events as ev
from session_manager.store.postgres.outbox import channel_of
from tests import pg_support
from tests.pg_support import text
from tests.unit.test_postgres_instances import open_sm, wait_for

pytestmark = pytest.mark.postgres


def _server(query: str, params: Any = None) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


def listeners(schema: str) -> int:
    """The backends listening on the schema's channel (any process)."""
    return int(_server("SELECT count(*) FROM pg_stat_activity WHERE query = %s",
                       (f'LISTEN "{channel_of(schema)}"',))[0][0])


def outbox_rows(schema: str, instance: str | None = None) -> int:
    where = "" if instance is None else " WHERE instance = %s"
    return int(_server(f'SELECT count(*) FROM "{schema}".outbox' + where,
                       None if instance is None else (instance,))[0][0])


def added(seen: list[str]) -> Any:
    return lambda e: seen.append(e["entry_id"])


def test_an_unobserved_instance_opens_no_listener_and_its_events_reach_other_observers(schema: str) -> None:
    # Prevents: every instance opened (observed or not) paying for every other instance's
    # notifications with a listening backend and thread; or an unlistening writer's events
    # no longer reaching the instances that observe.
    writer = open_sm(schema)
    watcher = open_sm(schema)
    try:
        seen: list[str] = []
        watcher.observe({"function_id": ev.ON_MESSAGE_ADDED}, added(seen))
        writer.call("session::ensure", {"session_id": "s"})
        ids = [writer.call("session::append", {"session_id": "s", "message": text(str(i))})["entry_id"]
               for i in range(5)]
        assert wait_for(lambda: seen == ids)
        outbox = writer.service.store.outbox
        assert outbox._thread is None and not outbox.listening
        assert listeners(schema) == 1  # the watcher's alone
        # On-created and five appends, recorded as the writer's that nobody there observed.
        assert outbox_rows(schema, writer.service.store.outbox.unheard) == 6
    finally:
        writer.close()
        watcher.close()


def test_an_observer_added_later_starts_the_listener_and_gets_every_later_event_once(schema: str) -> None:
    # Prevents: a listener that never starts when the first observer comes after open (the
    # events of other instances silently missing), or one that replays what came before.
    writer = open_sm(schema)
    late = open_sm(schema)
    try:
        writer.call("session::ensure", {"session_id": "s"})
        for i in range(3):
            writer.call("session::append", {"session_id": "s", "message": text(f"before {i}")})
        late.call("session::append", {"session_id": "s", "message": text("own, unobserved")})
        assert late.service.store.outbox._thread is None and listeners(schema) == 0
        seen: list[str] = []
        late.observe({"function_id": ev.ON_MESSAGE_ADDED}, added(seen))
        assert late.service.store.outbox.listening and listeners(schema) == 1
        expected = []
        for i in range(4):
            expected.append(writer.call("session::append", {"session_id": "s", "message": text(f"after {i}")})
                            ["entry_id"])
            if i == 1:  # its own, at its place among the others'
                expected.append(late.call("session::append", {"session_id": "s", "message": text("own")})
                                ["entry_id"])
        assert wait_for(lambda: len(seen) >= len(expected))
        assert seen == expected
    finally:
        writer.close()
        late.close()


def test_with_nobody_listening_the_writers_prune_the_outbox(schema: str) -> None:
    # Prevents: the outbox growing without bound once no instance listens (pruning was the
    # listeners' job alone).
    sm = open_sm(schema, outbox_retention_s=0.3)
    other = open_sm(schema, outbox_retention_s=0.3)
    try:
        sm.call("session::ensure", {"session_id": "p"})
        other.call("session::append", {"session_id": "p", "message": text("x")})
        assert listeners(schema) == 0
        assert wait_for(lambda: outbox_rows(schema) == 0, timeout=20)
        other.call("session::append", {"session_id": "p", "message": text("y")})
        assert wait_for(lambda: outbox_rows(schema) == 0, timeout=20)
        assert sm.call("session::get", {"session_id": "p"})["meta"]["message_count"] == 2
        assert listeners(schema) == 0  # (the writers pruned)
    finally:
        sm.close()
        other.close()


def test_a_read_only_store_nobody_observes_neither_listens_nor_prunes(schema: str) -> None:
    # Prevents: a read-only open writing (its prune is a DELETE) or listening for nobody.
    writer = open_sm(schema)
    try:
        writer.call("session::ensure", {"session_id": "r"})
        reader: session_manager.SessionManager = open_sm(schema, read_only=True)
        try:
            assert reader.call("session::get", {"session_id": "r"}) is not None
            outbox = reader.service.store.outbox
            assert outbox._thread is None and outbox._pruning is None
        finally:
            reader.close()
    finally:
        writer.close()
