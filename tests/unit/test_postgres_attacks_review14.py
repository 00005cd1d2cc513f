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
