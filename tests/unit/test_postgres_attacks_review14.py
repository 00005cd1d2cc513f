"""review14's attacks on the warm plain append resolved on the known leaf (pgcli5): a miss of the
plain statement (the session changed, someone observes) switches the same append to sm_append_at
(at_leaf.hold_off), keeping the id it drew. Real second instances and threads; answers, stored
rows and events compared with what was stored."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import session_manager
from session_manager._wire import events as ev
from tests import pg_support
from tests.pg_support import text
from tests.unit.test_postgres_instances import check_linear, wait_for

pytestmark = pytest.mark.postgres


@pytest.fixture
def schema() -> Iterator[str]:
    pg_support.require()
    name = f"sm_review14_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        pg_support.drop_schema(name)


def _open(schema: str, **kw: Any) -> session_manager.SessionManager:
    return session_manager.open(store=pg_support.open_store(schema), **kw)


def _chain(sm: session_manager.SessionManager, sid: str) -> list[str]:
    """The session's entries, one chain (each parent once, all on the active path): their ids."""
    store = sm.service.store
    entries = store.entries(sid)
    assert len({e["parent_id"] for e in entries}) == len(entries), "two entries share a parent"
    path = [e["id"] for e in store.path(sid, store.get_leaf(sid))]
    assert sorted(path) == sorted(e["id"] for e in entries)
    return path


@pytest.mark.parametrize("miss", ["changed", "observed"])
def test_append_many_of_one_onto_an_empty_session_after_a_miss_answers_without_a_parent_field(
        schema: str, miss: str) -> None:
    # Prevents: hold_off taking a response without a parent_id field (append-many's) for one
    # whose parent_id is the known leaf when that leaf is None (an empty session): the held-off
    # append then answered {"entry_ids", "last_entry_id", "parent_id": <the server's leaf>},
    # a field append-many's answer never has.
    a, b = _open(schema), _open(schema)
    try:
        sid = a.call("session::create", {})["session_id"]  # (a knows it: empty, leaf None)
        before: list[str] = []
        if miss == "changed":  # (the compare-and-set fails)
            before.append(b.call("session::append", {"session_id": sid, "message": text("theirs")})["entry_id"])
        else:  # (the statement sees an observer: sm_append_at places it on the leaf a knew, None)
            got: list[dict[str, Any]] = []
            b.observe({"function_id": ev.ON_MESSAGE_ADDED}, got.append)
            b.service.store.events_ready()
        answer = a.call("session::append-many", {"session_id": sid, "messages": [text("mine")]})
        assert set(answer) == {"entry_ids", "last_entry_id"}
        assert check_linear(a, sid) == [*before, answer["last_entry_id"]]
        if miss == "observed":
            assert wait_for(lambda: [e["entry_id"] for e in got] == answer["entry_ids"])
            assert got[0]["parent_id"] is None
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("typed", [False, True])
def test_an_append_at_a_leaf_another_instance_moved_on_is_refused_not_placed_after_it(
        schema: str, typed: bool) -> None:
    # Prevents: an append made only while the session is at (created_at, leaf) (append_at: the
    # adapters' own view of a session) checked against what this instance remembers, then left to
    # the server to place (the plain statement's miss held off for sm_append_at, which chains onto
    # whatever leaf the server has): another instance's append in between, and it landed after
    # that one instead of raising LeafMoved with nothing written.
    from session_manager._service.appending import LeafMoved

    a, b = _open(schema), _open(schema)
    try:
        made = a.call("session::ensure", {"session_id": "s"})["meta"]["created_at"]
        mine = a.call("session::append", {"session_id": "s", "custom": {"custom_type": "x"}})["entry_id"]
        mine = a.call("session::append", {"session_id": "s", "custom": {"custom_type": "x"}})["entry_id"]
        theirs = b.call("session::append", {"session_id": "s", "custom": {"custom_type": "t"}})["entry_id"]
        with pytest.raises(LeafMoved):
            if typed:
                a._append_owned("s", "y", 1, at=(made, mine))
            else:
                a._call_owned("session::append", {"session_id": "s", "custom": {"custom_type": "y"}},
                              at=(made, mine))
        assert _chain(b, "s")[-2:] == [mine, theirs]
        after = a._append_owned("s", "y", 2, at=(made, theirs))  # (at the leaf as it is: placed there)
        assert _chain(b, "s")[-3:] == [mine, theirs, after]
    finally:
        a.close()
        b.close()
