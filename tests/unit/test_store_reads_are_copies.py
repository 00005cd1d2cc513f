"""A store's own ``get_entry`` / ``entries()`` answer the caller's copies over every store: a
caller changing what it got (a key, a message's content list, a custom entry's data) changes
nothing stored, nothing the session API answers, nothing read after a restart. Before, the fs
and memory stores answered the very dicts they keep (the sqlite and postgres stores decode
afresh), so such a caller corrupted the store, and every reader of it (a LangGraph saver)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import session_manager
from tests.unit.store_openers import store_opener_fixture  # noqa: F401 (the fixture "opener")
from tests.unit.test_append_new_ids_taken import Scripted, text


def vandalize(entry: dict[str, Any]) -> None:
    """What a careless caller does to an entry it was handed."""
    entry["parent_id"] = "elsewhere"
    entry["revision"] = 99
    if "message" in entry:
        entry["message"]["content"].append({"type": "text", "text": "injected"})
        entry["message"]["content"][0]["text"] = "changed"
    else:
        entry["data"]["k"].append("injected")
        entry["data"]["new"] = 1


def test_changing_what_get_entry_and_entries_answer_changes_nothing_stored(opener: Callable[[], Any]) -> None:
    # Prevents: fs/memory handing out their cached entry dicts, so a caller's edit of one was
    # the store's (its transcript, its parent chain, its revision), served to everyone after.
    store = opener()
    sm = session_manager.open(store=store, ids=Scripted("m1", "c1"))
    try:
        sm.call("session::ensure", {"session_id": "S"})
        sm.call("session::append", {"session_id": "S", "message": text("one")})
        sm.call("session::append", {"session_id": "S", "custom": {"custom_type": "t", "data": {"k": ["v"]}}})
        before = copy.deepcopy(store.entries("S"))
        answered = sm.call("session::messages", {"session_id": "S", "include_custom": True})
        vandalize(store.get_entry("S", "m1"))
        vandalize(store.get_entry("S", "c1"))
        for entry in store.entries("S"):
            vandalize(entry)
        assert store.entries("S") == before
        assert store.get_entry("S", "m1") == before[0] and store.get_entry("S", "c1") == before[1]
        assert sm.call("session::messages", {"session_id": "S", "include_custom": True}) == answered
        # The store goes on from what it holds: an update and an append see the stored entries.
        assert sm.call("session::update-message", {"session_id": "S", "entry_id": "m1", "expected_revision": 0,
                                                   "content": [{"type": "text", "text": "edited"}]})["revision"] == 1
        added = sm.call("session::append", {"session_id": "S", "message": text("two")})
        assert added["parent_id"] == "c1"
    finally:
        sm.close()
    again = opener()  # after a restart: as written, not as vandalized
    try:
        got = {e["id"]: e for e in again.entries("S")}
        assert got["m1"]["message"]["content"] == [{"type": "text", "text": "edited"}]
        assert got["m1"]["parent_id"] is None and got["m1"]["revision"] == 1
        assert got["c1"]["data"] == {"k": ["v"]} and got["c1"]["parent_id"] == "m1"
    finally:
        again.close()
