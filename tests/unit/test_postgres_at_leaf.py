"""Plain appends decided by the server (issue 24): the new entry hangs on the leaf the
database has when the statement runs, so writers of one session neither retry nor fork."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import session_manager
from session_manager._wire import events as ev
from session_manager.store.sql.values import json_text
from tests.pg_relay import Relay
from tests.pg_support import text
from tests.unit.test_postgres_instances import Worker, check_linear, open_sm, wait_for

pytestmark = pytest.mark.postgres


@pytest.fixture
def sm(schema: str, relay: Relay) -> Iterator[session_manager.SessionManager]:
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    with session_manager.open(store=PostgresStore(PostgresSettings(dsn=relay.dsn(), schema=schema,
                                                                   pool_size=1))) as opened:
        yield opened


def quiet(relay: Relay) -> int:
    """The relay's round trips once no message has crossed it for a moment."""
    last = -1
    while relay.round_trips != last:
        last = relay.round_trips
        time.sleep(0.3)
    return last


def test_a_contended_append_is_still_one_round_trip(schema: str, sm: session_manager.SessionManager,
                                                   relay: Relay) -> None:
    # Prevents: an append after another instance wrote the session guessing the stale leaf,
    # conflicting and retrying (several round trips), or forking the chain.
    other = open_sm(schema)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        seen: list[dict[str, object]] = []  # what the other instance is told (the stored payloads)
        other.observe({"function_id": ev.ON_MESSAGE_ADDED}, seen.append)
        sm.service.store.events_ready()  # this instance's listener connected (it counts at the relay too)
        time.sleep(1.0)  # and past its first outbox prune
        for i in range(6):  # warm: the session known, the connection open, the statement prepared
            sm.call("session::append", {"session_id": sid, "message": text(f"warm {i}")})
        before = quiet(relay)  # measured as the contended ones are: after the same wait
        sm.call("session::append", {"session_id": sid, "message": text("uncontended")})
        alone = relay.round_trips - before
        assert alone == 1
        told: list[tuple[str, str]] = []
        for i in range(5):
            theirs = other.call("session::append", {"session_id": sid, "message": text(f"o{i}")})["entry_id"]
            before = quiet(relay)  # this instance's listener fetches that write's event: not the append's trip
            mine = sm.call("session::append", {"session_id": sid, "message": text(f"m{i}")})
            # One statement: no conflict, retry, transaction, nor a read of the meta the other
            # instance changed (sm_append checks the known text but for the two numbers it sets).
            assert relay.round_trips - before == 1
            assert mine["parent_id"] == theirs  # the response names the parent the server chose
            told.append((mine["entry_id"], theirs))
        assert wait_for(lambda: len(seen) >= 17)
        parents = {e["entry_id"]: e["parent_id"] for e in seen}
        assert all(parents[entry] == parent for entry, parent in told)
        path = check_linear(sm, sid)
        assert len(path) == 17
        assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 17
    finally:
        other.close()


def test_server_chosen_parents_store_the_bytes_the_client_path_writes(schema: str) -> None:
    # Prevents: the server's filled-in parent or meta text differing from the client encoder's
    # bytes (the stored text must round-trip exactly, as every other write's does).
    a, b = open_sm(schema), open_sm(schema)
    try:
        sid = a.call("session::create", {"title": "t", "metadata": {"k": "v\u00e9"}})["session_id"]
        for i in range(6):
            (a, b)[i % 2].call("session::append", {"session_id": sid, "message": text(f"é{i}")})
        store = a.service.store
        import psycopg

        from tests import pg_support
        with psycopg.connect(pg_support.DSN) as conn:
            rows = conn.execute(f'SELECT entry_id, body FROM "{schema}".entries WHERE session_id = %s',
                                (sid,)).fetchall()
            meta_text = conn.execute(f'SELECT meta FROM "{schema}".sessions WHERE session_id = %s',
                                     (sid,)).fetchone()
        for entry_id, body in rows:
            entry = store.get_entry(sid, entry_id)
            assert body == json_text(entry)
        assert meta_text is not None and meta_text[0] == json_text(store.get_meta(sid))
        check_linear(a, sid)
    finally:
        a.close()
        b.close()


def test_four_processes_times_n_appends_form_one_chain_of_4n(schema: str) -> None:
    # Prevents: a lost update or a fork when four processes append at the server's leaf at once.
    sm = open_sm(schema)
    try:
        sm.call("session::ensure", {"session_id": "c4"})
        workers = [Worker(schema, "append", session_id="c4", n=60, tag=f"q{k}", shared=0) for k in range(4)]
        for w in workers:
            w.go()
        for k, w in enumerate(workers):
            acks, _ = w.finish()
            assert acks == [f"q{k}-{i}" for i in range(60)]
        path = check_linear(sm, "c4")
        assert len(path) == 240
        assert sm.call("session::get", {"session_id": "c4"})["meta"]["message_count"] == 240
    finally:
        sm.close()


def test_two_writers_events_reach_a_third_instance_in_chain_order_and_no_lock_stays_held(schema: str) -> None:
    # Prevents: sm_append_call's NOTIFY, sent after the write's COMMIT (migration 7), letting a
    # session's next write notify first (a third instance told of message 2 before message 1),
    # or leaving the session-level lock that orders them held by a pooled backend (every later
    # write of the session would wait on it).
    import threading

    import psycopg

    from tests import pg_support

    a, b, c = open_sm(schema), open_sm(schema), open_sm(schema)
    try:
        sid = a.call("session::create", {"title": "t"})["session_id"]
        told: list[str] = []
        c.observe({"function_id": ev.ON_MESSAGE_ADDED}, lambda e: told.append(e["entry_id"]))
        c.service.store.events_ready()

        def write(sm: session_manager.SessionManager, tag: str) -> None:
            for i in range(40):
                sm.call("session::append", {"session_id": sid, "message": text(f"{tag}{i}")})

        threads = [threading.Thread(target=write, args=(sm, tag)) for sm, tag in ((a, "a"), (b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        path = check_linear(a, sid)
        assert wait_for(lambda: len(told) >= 80)
        assert told == path
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            held = conn.execute("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity s ON s.pid = l.pid"
                                " WHERE l.locktype = 'advisory' AND s.application_name = %s",
                                (f"session-manager:{schema}"[:63],)).fetchone()
        assert held == (0,)
    finally:
        for sm in (a, b, c):
            sm.close()


def test_a_schema_one_version_older_gets_the_append_procedure(schema: str) -> None:
    # Prevents: a database written before the procedure (schema version 6, appends through
    # sm_append) failing to open, or staying without sm_append_call, after the upgrade.
    import psycopg
    from psycopg import sql

    from session_manager.store.postgres import schema as pg_schema
    from session_manager.store.postgres.at_leaf import APPEND_CALL_PROCEDURE
    from tests import pg_support

    sm = open_sm(schema)
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    sm.call("session::append", {"session_id": sid, "message": text("before")})
    sm.close()
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        ident = sql.Identifier(schema)
        conn.execute(sql.SQL("DROP PROCEDURE {}.sm_append_call").format(ident))
        _undo_observers(conn, schema)  # (migration 9's, made after it)
        conn.execute(sql.SQL("UPDATE {}.schema_version SET version = {}").format(
            ident, sql.Literal(pg_schema.MIGRATIONS.index(APPEND_CALL_PROCEDURE))))
    pg_schema.CHECKED.clear()  # the next open plays a new process
    sm = open_sm(schema)
    try:
        sm.call("session::append", {"session_id": sid, "message": text("after")})
        assert len(check_linear(sm, sid)) == 2
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            version = conn.execute(sql.SQL("SELECT version FROM {}.schema_version").format(
                sql.Identifier(schema))).fetchone()
        assert version == (len(pg_schema.MIGRATIONS),)
    finally:
        sm.close()


def _undo_observers(conn: Any, schema: str) -> None:
    """Drop what migration 9 made, as a schema of version 8 is without it."""
    from psycopg import sql

    ident = sql.Identifier(schema)
    conn.execute(sql.SQL("DROP PROCEDURE {}.sm_append_at").format(ident))
    conn.execute(sql.SQL("DROP TABLE {}.observers").format(ident))


def test_a_schema_of_version_8_upgrades_and_its_appends_keep_their_events(schema: str) -> None:
    # Prevents: a database of the previous release (schema version 8) failing to open after
    # the upgrade, its appends not reaching another instance's observer, or a listener of
    # that release, still running (it registers nothing), missing the upgraded writers' events.
    import psycopg
    from psycopg import sql

    from session_manager.store.postgres import schema as pg_schema
    from session_manager.store.postgres.outbox import channel_of
    from tests import pg_support

    sm = open_sm(schema)
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    sm.call("session::append", {"session_id": sid, "message": text("before")})
    sm.close()
    channel = channel_of(schema)
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn, \
            psycopg.connect(pg_support.DSN, autocommit=True) as old_listener:
        _undo_observers(conn, schema)
        conn.execute(sql.SQL("UPDATE {}.schema_version SET version = 8").format(sql.Identifier(schema)))
        old_listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))  # as that release listens
        pg_schema.CHECKED.clear()  # the next open plays a new process
        sm = open_sm(schema)
        try:
            entry_id = sm.call("session::append", {"session_id": sid, "message": text("after")})["entry_id"]
            assert len(check_linear(sm, sid)) == 2
            ident = sql.Identifier(schema)
            version = conn.execute(sql.SQL("SELECT version FROM {}.schema_version").format(ident)).fetchone()
            assert version == (len(pg_schema.MIGRATIONS),)
            # The old listener was counted in: the append recorded its event and notified it.
            rows = conn.execute(sql.SQL("SELECT payload FROM {}.outbox WHERE function_id = %s").format(ident),
                                (ev.ON_MESSAGE_ADDED,)).fetchall()
            assert any(entry_id in r[0] for r in rows)
            got = [n.payload for n in old_listener.notifies(timeout=5, stop_after=1)]
            assert got and got[0].startswith(sm.service.store.outbox.unheard + "|")  # (nobody observed in sm)
        finally:
            sm.close()


def test_an_error_after_the_append_committed_answers_it_as_applied_and_frees_its_lock(schema: str) -> None:
    # Prevents: sm_append_at failing after its write's COMMIT (a statement timeout during
    # the notification) being answered as a failure (a retry without an id stores it twice),
    # its event never reaching another instance, or the session-level ordering lock staying
    # held by the pooled backend (every later write of the session would hang on it).
    import psycopg
    from psycopg import sql

    from tests import pg_support

    a, b = open_sm(schema), open_sm(schema)
    try:
        sid = a.call("session::create", {"title": "t"})["session_id"]
        a.call("session::append", {"session_id": sid, "message": text("warm")})
        told: list[str] = []
        b.observe({"function_id": ev.ON_MESSAGE_ADDED}, lambda e: told.append(e["entry_id"]))
        b.service.store.events_ready()
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            proc = sql.SQL("{}.sm_append_at").format(sql.Identifier(schema)).as_string(conn)
            source = conn.execute("SELECT pg_get_functiondef(%s::regproc)", (proc,)).fetchone()
            assert source is not None
            unlock = "PERFORM pg_advisory_unlock(lock_key);"
            assert unlock in source[0]
            conn.execute(source[0].replace(unlock, "RAISE EXCEPTION 'injected after the commits';"))
            try:
                entry_id = a.call("session::append", {"session_id": sid, "message": text("x")})["entry_id"]
            finally:
                conn.execute(source[0])
        other = b.call("session::append", {"session_id": sid, "message": text("y")})["entry_id"]
        path = check_linear(a, sid)
        assert path[-2:] == [entry_id, other] and len(path) == 3
        assert wait_for(lambda: entry_id in told)
        time.sleep(0.3)
        assert told.count(entry_id) == 1
    finally:
        a.close()
        b.close()


def test_an_unobserved_plain_append_builds_no_event_payload_and_its_payload_names_the_parent(schema: str) -> None:
    # Prevents: the plain append building every event's payload to fill the server's parent in
    # (work for an append nobody observes), or a payload built later naming the hole, not the
    # parent the server chose (the deferred payload reads the entry as filled in).
    from session_manager._wire import api

    sm = open_sm(schema)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        ids = [sm.call("session::append", {"session_id": sid, "message": text(f"warm {i}")})["entry_id"]
               for i in range(3)]
        request = api.AppendRequest.model_validate({"session_id": sid, "message": text("plain")})
        store, service = sm.service.store, sm.service
        response, events = store.run_call(lambda: service.append(request))
        assert response["parent_id"] == ids[-1]
        assert len(events) == 1 and events[0].built() is None  # nobody read it
        assert events[0].payload["parent_id"] == ids[-1] and events[0].payload["entry_id"] == response["entry_id"]
        assert check_linear(sm, sid)[-1] == response["entry_id"]
    finally:
        sm.close()
