"""A fork whose id generator repeats an id among one fork's copies, over every store
(memory, fs, sqlite, postgres): the copies keep distinct ids (a repeat drawn again), nothing
of a refused attempt stays. Before, the second copy drawn under a repeated id was stored over
the first: the fork held fewer entries than its meta counted, and they named each other as
parents (a cycle: the transcript cut, postgres's path query never ending)."""

from __future__ import annotations

from typing import Any

import pytest

import session_manager
from tests.unit.store_openers import store_opener_fixture  # noqa: F401 (the fixture "opener")
from tests.unit.test_append_new_ids_taken import Scripted, text


def stored(store: Any, session_id: str) -> dict[str, tuple[str | None, str]]:
    return {e["id"]: (e.get("parent_id"), e["message"]["content"][0]["text"]) for e in store.entries(session_id)}


def test_a_fork_whose_generator_repeats_an_id_keeps_every_copy(opener: Any) -> None:
    # Prevents: a fork's copies drawn under one repeated id (c1, c2, c1) storing the third
    # over the first: two entries left naming each other as parents, a meta counting three.
    store = opener()
    sm = session_manager.open(store=store, ids=Scripted("a1", "a2", "a3", "c1", "c2", "c1"))
    created: list[dict[str, Any]] = []
    sm.observe({"function_id": session_manager.ON_CREATED}, created.append)
    try:
        sm.call("session::ensure", {"session_id": "S"})
        for t in ("one", "two", "three"):
            sm.call("session::append", {"session_id": "S", "message": text(t)})
        answer = sm.call("session::fork", {"session_id": "S", "entry_id": "a3"})
        new_id = answer["session_id"]
        copies = stored(store, new_id)
        assert len(copies) == 3
        ids = list(copies)
        assert ids[:2] == ["c1", "c2"] and ids[2] not in ("c1", "c2")
        assert copies == {"c1": (None, "one"), "c2": ("c1", "two"), ids[2]: ("c2", "three")}
        got = sm.call("session::get", {"session_id": new_id})
        assert got["meta"]["message_count"] == 3
        listed = sm.call("session::messages", {"session_id": new_id})
        assert [m["entry_id"] for m in listed["messages"]] == ["c1", "c2", ids[2]]
        assert stored(store, "S") == {"a1": (None, "one"), "a2": ("a1", "two"), "a3": ("a2", "three")}
        assert sorted(s["session_id"] for s in sm.call("session::list", {})["sessions"]) == sorted(["S", new_id])
        assert [e["session_id"] for e in created] == ["S", new_id]
    finally:
        sm.close()
    again = opener()  # after a restart: the same copies
    try:
        assert stored(again, new_id) == copies
    finally:
        again.close()


def test_a_fork_whose_generator_only_repeats_is_refused_with_nothing_written(opener: Any) -> None:
    # Prevents: a generator that keeps answering one id leaving a half-made fork behind its
    # refusal (a session holding one copy, or the path's attachment copied under its id).
    class Stuck(Scripted):
        forking = False

        def entry_id(self) -> str:
            return "c1" if self.forking else super().entry_id()

    store = opener()
    ids = Stuck("a1", "a2")
    sm = session_manager.open(store=store, ids=ids)
    created: list[dict[str, Any]] = []
    sm.observe({"function_id": session_manager.ON_CREATED}, created.append)
    try:
        sm.call("session::ensure", {"session_id": "S"})
        put = sm.call("session::put-attachment", {"session_id": "S", "name": "n.txt", "mime": "text/plain",
                                                  "data": "aGk="})
        sm.call("session::append", {"session_id": "S", "message": text("one")})
        sm.call("session::append", {"session_id": "S", "message": {
            "role": "user", "timestamp": 1, "content": [put["block"]]}})
        ids.forking = True
        with pytest.raises(session_manager.SessionError) as refused:
            sm.call("session::fork", {"session_id": "S", "entry_id": "a2"})
        assert refused.value.code == "session/storage"
        assert "entry id" in str(refused.value)
        assert [s["session_id"] for s in sm.call("session::list", {})["sessions"]] == ["S"]
        assert [e["session_id"] for e in created] == ["S"]
        assert [e["id"] for e in store.entries("S")] == ["a1", "a2"]
        for drawn in ("s_001", "s_002", "s_003"):  # (every session id the attempts could have drawn)
            assert store.get_meta(drawn) is None
            assert store.list_attachments(drawn) == []
            assert store.entries(drawn) == []
    finally:
        sm.close()


class RepeatedSessionIds(Scripted):
    """Session ids ``X``, ``X`` first; attachment ids ``A``, ``A`` first."""

    def __init__(self) -> None:
        super().__init__()
        self.sids, self.aids = ["X", "X"], ["A", "A"]

    def session_id(self) -> str:
        return self.sids.pop(0) if self.sids else super().session_id()

    def attachment_id(self) -> str:
        return self.aids.pop(0) if self.aids else super().attachment_id()


def test_a_fork_whose_drawn_session_id_is_taken_leaves_that_session_alone(opener: Any) -> None:
    # Prevents: a fork drawing the id of a stored session copying its path's attachments over
    # that session's own (same attachment id) before its commit conflicted and drew again, and
    # sqlite's commit writing the fork over the other session (its title and entries).
    store = opener()
    sm = session_manager.open(store=store, ids=RepeatedSessionIds())
    created: list[dict[str, Any]] = []
    sm.observe({"function_id": session_manager.ON_CREATED}, created.append)
    try:
        assert sm.call("session::create", {"title": "other"})["session_id"] == "X"
        sm.call("session::put-attachment", {"session_id": "X", "name": "x.txt", "mime": "text/plain",
                                            "data": "eHg="})
        sm.call("session::ensure", {"session_id": "S"})
        put = sm.call("session::put-attachment", {"session_id": "S", "name": "n.txt", "mime": "text/plain",
                                                  "data": "aGk="})
        sm.call("session::append", {"session_id": "S", "message": {
            "role": "user", "timestamp": 1, "content": [put["block"]]}})
        answer = sm.call("session::fork", {"session_id": "S", "entry_id": "e_001"})
        new_id = answer["session_id"]
        assert new_id not in ("X", "S")
        x = sm.call("session::get", {"session_id": "X"})["meta"]
        assert x["title"] == "other" and x["message_count"] == 0
        assert [(a["attachment_id"], a["name"]) for a in store.list_attachments("X")] == [("A", "x.txt")]
        assert store.read_attachment("X", "A") == b"xx"
        assert store.entries("X") == []
        assert [(a["attachment_id"], a["name"]) for a in store.list_attachments(new_id)] == [("A", "n.txt")]
        assert store.read_attachment(new_id, "A") == b"hi"
        assert len(store.entries(new_id)) == 1
        assert [e["session_id"] for e in created] == ["X", "S", new_id]
    finally:
        sm.close()
    again = opener()  # after a restart: the same
    try:
        assert again.get_meta("X")["title"] == "other"
        assert again.read_attachment("X", "A") == b"xx"
        assert again.read_attachment(new_id, "A") == b"hi"
    finally:
        again.close()
