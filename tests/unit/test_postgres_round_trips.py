"""Round trips at the wire: one per mutation and per read when the instance is
warm and uncontended (issue 24), counted by a relay that parses every message
the client sends (each Sync or simple Query it then waits on; pool health
checks and the schema check included). And the optimistic commit behind that
count stays exact when what the instance remembers is stale: another
instance's writes are never overwritten, and an answer decided on remembered
state is never given without the database's word."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import session_manager
from session_manager._wire import events as ev
from tests import pg_support
from tests.pg_relay import Relay
from tests.pg_support import text
from tests.unit.test_postgres_instances import check_linear, open_sm, wait_for

pytestmark = pytest.mark.postgres


@pytest.fixture
def sm(schema: str, relay: Relay) -> Iterator[session_manager.SessionManager]:
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    # pool_size 1: every call reuses one warm connection (a new one costs its own handshake).
    with session_manager.open(store=PostgresStore(PostgresSettings(dsn=relay.dsn(), schema=schema,
                                                                   pool_size=1))) as opened:
        # Its event listener (which connects in the background, through the relay too)
        # connected and past its first outbox prune: none of its messages is counted.
        opened.service.store.events_ready()
        time.sleep(1.0)
        yield opened


def trips(relay: Relay, sm: session_manager.SessionManager, function_id: str, payload: dict[str, Any]) -> int:
    before = relay.round_trips
    sm.call(function_id, payload)
    return relay.round_trips - before


def test_warm_uncontended_calls_take_one_round_trip_each(sm: session_manager.SessionManager, relay: Relay) -> None:
    # Prevents: an append going back to several round trips (lock, meta, leaf, link, write, outbox, commit),
    # or a messages-tail or messages page to four (meta, leaf, depth, window).
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    for i in range(60):  # warm: the session known, the connection open, its statements prepared
        sm.call("session::append", {"session_id": sid, "message": text(str(i))})
        sm.call("session::messages-tail", {"session_id": sid, "limit": 50})
    counts = {
        "append": trips(relay, sm, "session::append", {"session_id": sid, "message": text("a")}),
        "append with entry_id": trips(relay, sm, "session::append",
                                      {"session_id": sid, "entry_id": "e1", "message": text("b")}),
        "append-many": trips(relay, sm, "session::append-many",
                             {"session_id": sid, "messages": [text("c"), text("d")]}),
        "update-message": trips(relay, sm, "session::update-message",
                                {"session_id": sid, "entry_id": "e1", "content": [{"type": "text", "text": "B"}]}),
        "messages-tail": trips(relay, sm, "session::messages-tail", {"session_id": sid, "limit": 50}),
        "messages": trips(relay, sm, "session::messages", {"session_id": sid, "limit": 50}),
        "get": trips(relay, sm, "session::get", {"session_id": sid}),
        "get-message": trips(relay, sm, "session::get-message", {"session_id": sid, "entry_id": "e1"}),
        "list": trips(relay, sm, "session::list", {}),
    }
    assert counts == dict.fromkeys(counts, 1)
    # And each did what it says: read back.
    tail = sm.call("session::messages-tail", {"session_id": sid, "limit": 3})["messages"]
    assert [m["message"]["content"][0]["text"] for m in tail] == ["B", "c", "d"] and tail[0]["entry_id"] == "e1"
    assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 64
    page = sm.call("session::messages", {"session_id": sid, "limit": 50})
    assert [m["message"]["content"][0]["text"] for m in page["messages"]] == [str(i) for i in range(50)]
    assert page["next_cursor"] is not None


@pytest.mark.parametrize("observed_here", [False, True], ids=["listener only", "observed here too"])
def test_a_warm_append_is_one_round_trip_while_another_instance_observes(schema: str, relay: Relay,
                                                                        observed_here: bool) -> None:
    # Prevents: this instance's own listener paying a round trip per own append (fetching the
    # notification's row to tell which call it is) whenever another instance observes, so every
    # append is recorded and notified: a warm append then costs 2 at the wire, not 1 (issue 24).
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    pg_support.require()
    other = open_sm(schema)  # another store object (another process): straight to the server, not counted
    seen_there: list[str] = []
    other.observe({"function_id": ev.ON_MESSAGE_ADDED}, lambda e: seen_there.append(e["entry_id"]))
    with session_manager.open(store=PostgresStore(PostgresSettings(dsn=relay.dsn(), schema=schema,
                                                                   pool_size=1))) as sm:
        seen_here: list[str] = []
        if observed_here:
            sm.observe({"function_id": ev.ON_MESSAGE_ADDED}, lambda e: seen_here.append(e["entry_id"]))
        sm.service.store.events_ready()  # its own listener runs (through the relay: counted)
        time.sleep(1.0)  # connected, registered and past its first outbox prune
        try:
            sid = sm.call("session::create", {"title": "t"})["session_id"]
            for i in range(30):  # warm
                sm.call("session::append", {"session_id": sid, "message": text(str(i))})
            ids, counts = [], []
            for i in range(10):
                before = relay.round_trips
                ids.append(sm.call("session::append", {"session_id": sid, "message": text(f"c{i}")})["entry_id"])
                # Its listener heard the notification and is done with it before the next is counted.
                assert wait_for(lambda: ids[-1] in seen_there, 10.0)
                time.sleep(0.05)
                counts.append(relay.round_trips - before)
            assert counts == [1] * 10
            # Each append was delivered: there once each, in order; here (observed) once each.
            assert seen_there[-10:] == ids and len(set(seen_there)) == len(seen_there) == 40
            if observed_here:
                assert seen_here[-10:] == ids and len(seen_here) == 40
            assert check_linear(other, sid)[-10:] == ids
        finally:
            other.close()


def test_two_instances_appending_in_turn_form_one_chain(schema: str) -> None:
    # Prevents: an instance appending on its remembered (stale) leaf and meta after another
    # instance wrote the session: a forked chain or a lost message_count.
    a, b = open_sm(schema), open_sm(schema)
    try:
        sid = a.call("session::create", {"title": "t"})["session_id"]
        seen: list[str] = []
        a.observe({"function_id": ev.ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
        ids = []
        for i in range(20):
            writer = (a, b)[i % 2]
            ids.append(writer.call("session::append", {"session_id": sid, "message": text(str(i))})["entry_id"])
        assert check_linear(a, sid) == ids
        assert a.call("session::get", {"session_id": sid})["meta"]["message_count"] == 20
        assert b.call("session::get", {"session_id": sid})["meta"]["message_count"] == 20
        assert [m["entry_id"] for m in b.call("session::messages", {"session_id": sid})["messages"]] == ids
    finally:
        a.close()
        b.close()


def test_an_answer_decided_on_a_stale_revision_is_rechecked(schema: str) -> None:
    # Prevents: update-message answering `updated: false` from a revision this instance remembers
    # while the database holds the one the caller expected (another instance updated it).
    a, b = open_sm(schema), open_sm(schema)
    try:
        sid = a.call("session::create", {"title": "t"})["session_id"]
        a.call("session::append", {"session_id": sid, "entry_id": "e1", "message": text("v0")})
        assert b.call("session::update-message", {"session_id": sid, "entry_id": "e1", "expected_revision": 0,
                                                  "content": [{"type": "text", "text": "v1"}]})["updated"]
        got = a.call("session::update-message", {"session_id": sid, "entry_id": "e1", "expected_revision": 1,
                                                 "content": [{"type": "text", "text": "v2"}]})
        assert got == {"updated": True, "revision": 2}
        entry = b.call("session::get-message", {"session_id": sid, "entry_id": "e1"})["entry"]
        assert entry["message"]["content"] == [{"type": "text", "text": "v2"}]
    finally:
        a.close()
        b.close()


def test_an_append_retried_on_another_instance_is_a_replay(schema: str) -> None:
    # Prevents: an instance assuming an unknown entry_id unused and storing a second copy
    # of an append another instance already stored.
    a, b = open_sm(schema), open_sm(schema)
    try:
        sid = a.call("session::create", {"title": "t"})["session_id"]
        b.call("session::get", {"session_id": sid})
        b.call("session::append", {"session_id": sid, "entry_id": "warm", "message": text("w")})  # b knows it
        first = a.call("session::append", {"session_id": sid, "entry_id": "x", "message": text("x")})
        again = b.call("session::append", {"session_id": sid, "entry_id": "x", "message": text("x")})
        assert again == first
        assert [m["entry_id"] for m in a.call("session::messages", {"session_id": sid})["messages"]] == ["warm", "x"]
        assert a.call("session::get", {"session_id": sid})["meta"]["message_count"] == 2
    finally:
        a.close()
        b.close()


def test_messages_from_the_root_reads_the_active_branch_page_by_page(sm: session_manager.SessionManager) -> None:
    # Prevents: the first window read with the meta (jump pointers from the leaf down to depth 63)
    # serving another branch's entries, a wrong path length, or a page that skips or repeats an
    # entry where the later windows (fetched by cursor) join it.
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    ids = [sm.call("session::append", {"session_id": sid, "message": text(str(i))})["entry_id"] for i in range(150)]
    # A branch off entry 99: the active leaf moves to it; the old entries 100..149 are off the path.
    branch = [sm.call("session::append", {"session_id": sid, "parent_id": ids[99], "message": text("b0")})["entry_id"]]
    branch += [sm.call("session::append", {"session_id": sid, "message": text(f"b{i}")})["entry_id"] for i in (1, 2)]
    seen: list[str] = []
    cursor = None
    while True:
        payload: dict[str, Any] = {"session_id": sid, "limit": 40}
        if cursor is not None:
            payload["cursor"] = cursor
        page = sm.call("session::messages", payload)
        seen += [m["entry_id"] for m in page["messages"]]
        cursor = page.get("next_cursor")
        if cursor is None:
            break
    assert seen == ids[:100] + branch
    assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 153


def test_messages_of_an_unknown_or_empty_session(sm: session_manager.SessionManager) -> None:
    # Prevents: the one-read messages answering an unknown session with an empty page
    # instead of not_found, or an empty session with an error.
    with pytest.raises(session_manager.SessionError) as e:
        sm.call("session::messages", {"session_id": "nope"})
    assert e.value.code == "session/not_found"
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    assert sm.call("session::messages", {"session_id": sid})["messages"] == []


def test_open_leaves_the_listener_to_connect_and_observe_waits_for_it(schema: str, relay: Relay) -> None:
    # Prevents: a cold open waiting for the event listener's connections (most of a cold open's
    # time), or an observer added while the listener still connects missing an event another
    # instance commits after observe() returned.
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    class Listening(threading.Event):
        waits = 0

        def wait(self, timeout: float | None = None) -> bool:
            Listening.waits += 1
            return super().wait(timeout)

    store = PostgresStore(PostgresSettings(dsn=relay.dsn(), schema=schema, connect_timeout_ms=2000))
    store.outbox._listening = Listening()
    relay.silence()  # the listener's handshakes go unanswered from here
    sm = session_manager.open(store=store)
    other = open_sm(schema)
    try:
        assert Listening.waits == 0 and not store.outbox.listening  # open() returned without waiting for it
        relay.silence(False)
        seen: list[str] = []
        sm.observe({"function_id": ev.ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
        assert store.outbox.listening  # observe() waited for it
        sid = other.call("session::create", {})["session_id"]
        entry = other.call("session::append", {"session_id": sid, "message": text("after")})["entry_id"]
        assert wait_for(lambda: seen == [entry])
    finally:
        other.close()
        sm.close()


def test_a_statements_first_uses_on_a_connection_are_one_round_trip_too(sm: session_manager.SessionManager,
                                                                       relay: Relay) -> None:
    # Prevents: psycopg preparing a statement in a round trip of its own (at its fifth use on a
    # connection), so that one append or tail in a connection's first few took two.
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    counts = [trips(relay, sm, "session::append", {"session_id": sid, "message": text(str(i))}) for i in range(7)]
    counts += [trips(relay, sm, "session::messages-tail", {"session_id": sid, "limit": 50}) for _ in range(7)]
    assert counts == [1] * 14


def test_a_cold_stores_first_tail_is_one_round_trip(schema: str, relay: Relay) -> None:
    # Prevents: a new pooled connection running a statement of its own before it serves the
    # first call (its backend's start, read at connect for a lost append's settling: a round
    # trip a cold open's first read waited for), or the first tail taking more than one.
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    settings = PostgresSettings(dsn=relay.dsn(), schema=schema, pool_size=1)
    with session_manager.open(store=PostgresStore(settings)) as first:  # migrates: what follows is a cold open
        sid = first.call("session::create", {"title": "t"})["session_id"]
        for i in range(3):
            first.call("session::append", {"session_id": sid, "message": text(str(i))})
    before = relay.round_trips
    with session_manager.open(store=PostgresStore(settings)) as cold:
        page = cold.call("session::messages-tail", {"session_id": sid, "limit": 50})
        assert relay.round_trips - before == 1
        assert [m["message"]["content"][0]["text"] for m in page["messages"]] == ["0", "1", "2"]
        # Its first append reads the backend's start (once per connection) and lands once.
        cold.call("session::append", {"session_id": sid, "message": text("3")})
        store = cold.service.store
        with store.db.pool.connection() as conn:  # type: ignore[attr-defined]
            assert store.db.started_at(conn) is not None  # type: ignore[attr-defined]
        assert cold.call("session::get", {"session_id": sid})["meta"]["message_count"] == 4
