"""An append whose new entry id is already stored, over postgres: never written over.

Every path an append takes (the plain statement, ``sm_append_at`` while someone
observes, ``sm_apply`` optimistically, the transactional path of a contended session,
a batch past one NOTIFY upgraded to a transaction) must refuse a new entry whose id the
session holds (another instance's, drawn by a generator two instances repeat, or a
repeat within one batch): the service then draws fresh ids (a caller's id answers as
a replay), nothing of the refused attempt stays and no event names it. Before, the
transactional path upserted the new entry over the stored one (``sm_apply`` with no
check), and every path but the plain one did so for a batch's later entries (only the
first entry's absence was checked): the answer then named the entry as its own parent.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import session_manager
from tests import pg_support
from tests.pg_support import text
from tests.unit.test_append_new_ids_taken import Scripted

pytestmark = pytest.mark.postgres

PATHS = ["plain", "observed", "contended"]




@pytest.fixture
def schema() -> Iterator[str]:
    pg_support.require()
    name = f"sm_pgdup_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        pg_support.drop_schema(name)


def open_sm(schema_name: str, ids: Scripted, path: str, seen: list[dict[str, Any]]) -> session_manager.SessionManager:
    sm = session_manager.open(store=pg_support.open_store(schema_name), ids=ids)
    if path == "observed":  # appends take sm_append_at (or sm_apply), recording events
        sm.observe({"function_id": session_manager.ON_MESSAGE_ADDED}, seen.append)
    return sm


def contend(sm: session_manager.SessionManager, path: str, session_id: str) -> None:
    if path == "contended":  # another writer beat this instance a moment ago: the transactional path
        sm.service.store.optimistic._contend(session_id)


def rows(sm: session_manager.SessionManager, session_id: str) -> dict[str, tuple[str | None, str]]:
    """The session's entries as stored: id -> (parent, first text)."""
    return {e["id"]: (e.get("parent_id"), e["message"]["content"][0]["text"])
            for e in sm.service.store.entries(session_id)}


def settled(seen: list[dict[str, Any]], count: int) -> list[str]:
    deadline = time.monotonic() + 10
    while len(seen) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # (an event the refused attempt fired would come as soon)
    return [e["entry_id"] for e in seen]


@pytest.mark.parametrize("path", PATHS)
def test_an_append_whose_drawn_id_another_instance_stored_draws_again(schema: str, path: str) -> None:
    # Prevents: the transactional path writing the new entry over the other instance's
    # (same id): its text lost, and the answer naming the entry as its own parent.
    seen: list[dict[str, Any]] = []
    first = session_manager.open(store=pg_support.open_store(schema), ids=Scripted("x1"))
    second = open_sm(schema, Scripted("x1", "x2"), path, seen)
    try:
        first.call("session::ensure", {"session_id": "S"})
        assert first.call("session::append", {"session_id": "S", "message": text("one")})["entry_id"] == "x1"
        second.call("session::get", {"session_id": "S"})  # (known to the second: its warm path)
        contend(second, path, "S")
        answer = second.call("session::append", {"session_id": "S", "message": text("two")})
        assert (answer["entry_id"], answer["parent_id"]) == ("x2", "x1")
        assert rows(first, "S") == {"x1": (None, "one"), "x2": ("x1", "two")}
        assert first.call("session::get", {"session_id": "S"})["meta"]["message_count"] == 2
        if path == "observed":
            assert settled(seen, 2) == ["x1", "x2"] or settled(seen, 1) == ["x2"]
            assert "x1" not in [e["entry_id"] for e in seen if e["message"]["content"][0]["text"] == "two"]
    finally:
        second.close()
        first.close()


@pytest.mark.parametrize("path", PATHS)
def test_a_caller_s_entry_id_another_instance_stored_is_a_replay(schema: str, path: str) -> None:
    # Prevents: an idempotent append (the caller's id) decided on a stale read writing over
    # the stored entry, or firing an event for it.
    seen: list[dict[str, Any]] = []
    first = session_manager.open(store=pg_support.open_store(schema), ids=Scripted())
    second = open_sm(schema, Scripted(), path, seen)
    try:
        first.call("session::ensure", {"session_id": "S"})
        original = first.call("session::append", {"session_id": "S", "entry_id": "m1", "message": text("one")})
        second.call("session::get", {"session_id": "S"})
        contend(second, path, "S")
        answer = second.call("session::append", {"session_id": "S", "entry_id": "m1", "message": text("two")})
        assert answer == original
        assert rows(first, "S") == {"m1": (None, "one")}
        assert first.call("session::get", {"session_id": "S"})["meta"]["message_count"] == 1
        if path == "observed":
            assert settled(seen, 1) in ([], ["m1"])  # (the first instance's own append, if it came)
            assert all(e["message"]["content"][0]["text"] == "one" for e in seen)
    finally:
        second.close()
        first.close()


@pytest.mark.parametrize("size", [2, 400])  # 400: past one NOTIFY's events, so committed in a transaction
@pytest.mark.parametrize("path", PATHS)
def test_a_batch_whose_later_id_is_stored_draws_again(schema: str, path: str, size: int) -> None:
    # Prevents: only a batch's first entry checked absent, so its second (a stored id)
    # written over the stored entry (which then named the first as its parent: a cycle).
    seen: list[dict[str, Any]] = []
    sm = open_sm(schema, Scripted("x1", "x2", "x1"), path, seen)
    try:
        sm.call("session::ensure", {"session_id": "S"})
        sm.call("session::append", {"session_id": "S", "message": text("one")})
        contend(sm, path, "S")
        messages = [text(f"m{i}") for i in range(size)]
        answer = sm.call("session::append-many", {"session_id": "S", "messages": messages})
        ids = answer["entry_ids"]
        assert len(set(ids)) == size and not {"x1", "x2"} & set(ids)
        stored = rows(sm, "S")
        assert stored["x1"] == (None, "one")
        assert "x2" not in stored  # nothing of the refused attempt
        assert len(stored) == size + 1
        assert stored[ids[0]] == ("x1", "m0")
        assert sm.call("session::get", {"session_id": "S"})["meta"]["message_count"] == size + 1
        if path == "observed":
            got = settled(seen, size + 1)
            assert got == ["x1", *ids]
    finally:
        sm.close()


@pytest.mark.parametrize("path", PATHS)
def test_a_batch_drawing_one_id_twice_draws_again(schema: str, path: str) -> None:
    # Prevents: a batch whose generator repeated an id storing one entry over the other
    # (the second naming itself as its parent) while answering both.
    seen: list[dict[str, Any]] = []
    sm = open_sm(schema, Scripted("x1", "x2", "x2"), path, seen)
    try:
        sm.call("session::ensure", {"session_id": "S"})
        sm.call("session::append", {"session_id": "S", "message": text("one")})
        contend(sm, path, "S")
        answer = sm.call("session::append-many", {"session_id": "S", "messages": [text("a"), text("b")]})
        ids = answer["entry_ids"]
        assert len(set(ids)) == 2 and "x2" not in ids
        assert rows(sm, "S") == {"x1": (None, "one"), ids[0]: ("x1", "a"), ids[1]: (ids[0], "b")}
        if path == "observed":
            assert settled(seen, 3) == ["x1", *ids]
    finally:
        sm.close()
