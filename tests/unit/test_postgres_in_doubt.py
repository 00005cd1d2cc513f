"""No commit left in doubt: a mutation whose connection is cut right after its
``COMMIT`` reached the server (it commits, its answer is lost) answers as
applied and fires its events once; one cut right before (the server never
ran it) is applied again, once. Retries then
behave: the same ``entry_id`` is a replay, and calls without ids were never
stored twice because of a lost answer (held-out defect of issue 24: committed
writes answered as failures, retried into duplicates)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import session_manager
from session_manager._wire import events as ev
from tests.pg_relay import Relay
from tests.pg_support import text

pytestmark = pytest.mark.postgres


@pytest.fixture
def sm(schema: str, relay: Relay) -> Iterator[session_manager.SessionManager]:
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    settings = PostgresSettings(dsn=relay.dsn(), schema=schema, timeout_ms=10_000, connect_timeout_ms=2000)
    with session_manager.open(store=PostgresStore(settings)) as opened:
        yield opened


class Seen:
    """Every event this instance fired, by function."""

    def __init__(self, sm: session_manager.SessionManager) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        for fid in ev.EVENT_FUNCTIONS:
            sm.observe({"function_id": fid}, lambda e, fid=fid: self.events.append((fid, e)))

    def of(self, fid: str) -> list[dict[str, Any]]:
        return [e for f, e in self.events if f == fid]


def messages(sm: session_manager.SessionManager, sid: str) -> list[dict[str, Any]]:
    return list(sm.call("session::messages", {"session_id": sid})["messages"])


def cut_after_commit(relay: Relay, sm: session_manager.SessionManager, function_id: str,
                     payload: dict[str, Any]) -> Any:
    relay.cut_at_commit("after")
    response = sm.call(function_id, payload)
    assert relay.cuts == 1, "the relay never saw the COMMIT: the test proved nothing"
    return response


def test_append_without_an_id_whose_commit_answer_was_lost_answers_applied_once(
        sm: session_manager.SessionManager, relay: Relay) -> None:
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    seen = Seen(sm)
    response = cut_after_commit(relay, sm, "session::append", {"session_id": sid, "message": text("once")})
    stored = messages(sm, sid)
    assert [m["entry_id"] for m in stored] == [response["entry_id"]]
    assert [e["entry_id"] for e in seen.of(ev.ON_MESSAGE_ADDED)] == [response["entry_id"]]
    assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 1
    assert ev.ON_CREATED not in {f for f, _ in seen.events}


def test_append_with_an_id_answers_applied_and_its_retry_is_a_replay(
        sm: session_manager.SessionManager, relay: Relay) -> None:
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    seen = Seen(sm)
    payload = {"session_id": sid, "entry_id": "e1", "message": text("x")}
    response = cut_after_commit(relay, sm, "session::append", payload)
    assert response["entry_id"] == "e1"
    assert sm.call("session::append", payload) == response  # the retry: a replay, same answer
    assert [m["entry_id"] for m in messages(sm, sid)] == ["e1"]
    assert [e["entry_id"] for e in seen.of(ev.ON_MESSAGE_ADDED)] == ["e1"]  # fired once, not on the replay
    assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 1


def test_append_many_answers_applied_once(sm: session_manager.SessionManager, relay: Relay) -> None:
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    seen = Seen(sm)
    batch = {"session_id": sid, "messages": [text(str(i)) for i in range(3)]}  # no ids: a retry would duplicate
    response = cut_after_commit(relay, sm, "session::append-many", batch)
    assert len(response["entry_ids"]) == 3
    assert [m["entry_id"] for m in messages(sm, sid)] == response["entry_ids"]
    assert [e["entry_id"] for e in seen.of(ev.ON_MESSAGE_ADDED)] == response["entry_ids"]
    assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 3


def test_create_answers_applied_and_makes_one_session(sm: session_manager.SessionManager, relay: Relay) -> None:
    seen = Seen(sm)
    response = cut_after_commit(relay, sm, "session::create", {"title": "only"})
    listed = sm.call("session::list", {})["sessions"]
    assert [s["session_id"] for s in listed] == [response["session_id"]]
    assert [e["session_id"] for e in seen.of(ev.ON_CREATED)] == [response["session_id"]]


def test_update_message_answers_updated_once(sm: session_manager.SessionManager, relay: Relay) -> None:
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    sm.call("session::append", {"session_id": sid, "entry_id": "e1", "message": text("old")})
    seen = Seen(sm)
    update = {"session_id": sid, "entry_id": "e1", "content": [{"type": "text", "text": "new"}],
              "expected_revision": 0}
    response = cut_after_commit(relay, sm, "session::update-message", update)
    assert response["updated"] is True
    revision = response["revision"]
    got = sm.call("session::get-message", {"session_id": sid, "entry_id": "e1"})
    assert got["entry"]["message"]["content"] == [{"type": "text", "text": "new"}]
    assert len(seen.of(ev.ON_MESSAGE_UPDATED)) == 1
    # A retry of the same compare-and-set now loses it (updated: false at the applied revision):
    # the update was applied exactly once, and the retry fires nothing.
    assert sm.call("session::update-message", update) == {"updated": False, "revision": revision}
    assert revision == 1 and len(seen.of(ev.ON_MESSAGE_UPDATED)) == 1
    assert sm.call("session::get-message", {"session_id": sid, "entry_id": "e1"}) == got


def test_a_commit_cut_before_it_reached_the_server_is_applied_once_not_twice(
        sm: session_manager.SessionManager, relay: Relay) -> None:
    # Not committed (the server never ran it): the adapter applies it again (or would answer
    # session/storage), never both: one row, one event, the count up by one.
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    seen = Seen(sm)
    relay.cut_at_commit("before")
    response = sm.call("session::append", {"session_id": sid, "message": text("x")})
    assert relay.cuts == 1
    assert [m["entry_id"] for m in messages(sm, sid)] == [response["entry_id"]]
    assert [e["entry_id"] for e in seen.of(ev.ON_MESSAGE_ADDED)] == [response["entry_id"]]
    assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 1


@pytest.mark.parametrize("when", ["after", "before"])
def test_a_transaction_whose_commit_answer_was_lost_is_settled(
        sm: session_manager.SessionManager, relay: Relay, when: str) -> None:
    # The transactional path (a fork: two sessions, one transaction): a COMMIT cut after it
    # reached the server answers as applied (one new session, on-created once); one cut
    # before answers session/storage with nothing stored and nothing fired, never both.
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    first = sm.call("session::append", {"session_id": sid, "message": text("one")})
    seen = Seen(sm)
    relay.cut_at_commit(when, on=(b"COMMIT",))
    try:
        forked: Any = sm.call("session::fork", {"session_id": sid, "entry_id": first["entry_id"]})
    except session_manager.SessionError as e:
        forked = e
    assert relay.cuts == 1
    listed = sorted(s["session_id"] for s in sm.call("session::list", {})["sessions"])
    if when == "after":
        assert isinstance(forked, dict)
        assert listed == sorted([sid, forked["session_id"]])
        assert [e["session_id"] for e in seen.of(ev.ON_CREATED)] == [forked["session_id"]]
        tail = sm.call("session::messages-tail", {"session_id": forked["session_id"], "limit": 5})["messages"]
        assert [m["message"]["content"][0]["text"] for m in tail] == ["one"]
    else:
        assert isinstance(forked, session_manager.SessionError) and forked.code == "session/storage"
        assert listed == [sid] and seen.events == []
