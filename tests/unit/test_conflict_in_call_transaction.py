"""A compare-and-set conflict inside a call whose transaction the conflicting mutation does not
own (a second mutation of the call, or one upgraded to a transaction mid-mutation, as the
postgres adapter's optimistic path does at a read its plan cannot serve), over every store:
the store's transaction stays usable, so the decision taken again in the same call answers what
it says, as on every other store. Before, postgres's refused write (``sm_apply``'s ``SM409``,
an append whose new entry id is stored) aborted the call's transaction: the next statement
failed (InFailedSqlTransaction) and the call answered ``session/storage``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import session_manager
from session_manager.errors import Conflict, SessionError
from session_manager.store.base import append_commit
from tests.unit.store_openers import store_opener_fixture  # noqa: F401 (the fixture "opener")
from tests.unit.test_append_new_ids_taken import Scripted, text


def new_entry(entry_id: str, parent: str | None, said: str) -> dict[str, Any]:
    return {"kind": "message", "id": entry_id, "parent_id": parent, "timestamp": 1, "revision": 0,
            "message": text(said)}


def stored(store: Any) -> list[tuple[str, str | None, str]]:
    return [(e["id"], e.get("parent_id"), e["message"]["content"][0]["text"]) for e in store.entries("S")]


def appended(store: Any, entry_id: str, said: str) -> None:
    """One mutation as the service makes it: reads, a read a postgres plan cannot serve (the
    path: the call upgraded to a transaction from here), then an append's commit."""
    with store.mutation(("S",)):
        meta, leaf = store.meta_and_leaf_to_commit("S")
        list(store.path("S", leaf))
        store.commit("S", append_commit(meta, (new_entry(entry_id, leaf, said),), chain=True))


def seeded(opener: Callable[[], Any]) -> tuple[session_manager.SessionManager, Any]:
    store = opener()
    sm = session_manager.open(store=store, ids=Scripted("x1"))
    sm.call("session::ensure", {"session_id": "S"})
    sm.call("session::append", {"session_id": "S", "message": text("one")})
    return sm, store


def test_a_conflict_in_a_call_s_transaction_lets_the_call_decide_again(opener: Callable[[], Any]) -> None:
    # Prevents: postgres answering session/storage (the call's transaction aborted by the refused
    # write) where every other store lets the call decide again and answer.
    sm, store = seeded(opener)
    try:
        def call() -> tuple[list[str], list[Any]]:
            said: list[str] = []
            for entry_id in ("x1", "x2"):  # x1 is stored: a conflict, decided again under x2
                try:
                    appended(store, entry_id, "two")
                    said.append(f"{entry_id} written")
                except Conflict:
                    said.append(f"{entry_id} conflicted")
            return said, []

        assert store.run_call(call) == (["x1 conflicted", "x2 written"], [])
        assert stored(store) == [("x1", None, "one"), ("x2", "x1", "two")]
        assert sm.call("session::get", {"session_id": "S"})["meta"]["message_count"] == 2
    finally:
        sm.close()
    again = opener()  # after a restart: the same
    try:
        assert stored(again) == [("x1", None, "one"), ("x2", "x1", "two")]
    finally:
        again.close()


def test_a_conflict_after_an_earlier_write_of_the_call_keeps_it_and_answers_the_decision(
        opener: Callable[[], Any]) -> None:
    # Prevents: a call that wrote (y1), then conflicted, then decided to refuse (a domain error)
    # answering session/storage on postgres instead of that error, with nothing of it applied
    # there; the other stores answer the error (their earlier write stands: each mutation
    # commits by itself there).
    sm, store = seeded(opener)
    try:
        def call() -> tuple[None, list[Any]]:
            appended(store, "y1", "two")
            with pytest.raises(Conflict):
                appended(store, "x1", "three")  # stored: a conflict
            appended(store, "y2", "three")  # decided again: written
            raise SessionError("session/entry_not_found", "the decision, taken again, refuses")

        with pytest.raises(SessionError) as refused:
            store.run_call(call)
        assert refused.value.code == "session/entry_not_found"
        ids = [e[0] for e in stored(store)]
        # postgres and sqlite roll the whole call back (one transaction); memory and fs commit each
        # mutation as it ends: never half of one mutation, never the conflicting write.
        assert ids in (["x1"], ["x1", "y1", "y2"])
        assert stored(store)[0] == ("x1", None, "one")
        assert sm.call("session::get", {"session_id": "S"})["meta"]["message_count"] == len(ids)
    finally:
        sm.close()
