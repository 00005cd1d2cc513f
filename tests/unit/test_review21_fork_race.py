"""Review 21: a fork whose drawn session id a client names itself meanwhile (``session::ensure``
of that id, on another thread of the same instance). The fork checks the id is free before it
copies the path's attachments (test_fork_ids_repeated.py); on memory and fs nothing stopped the
other call from creating the session between that check and the copy."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from tests.unit.store_openers import bare_opener
from tests.unit.test_append_new_ids_taken import Scripted

STORES = ["memory", "fs", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    with bare_opener(request.param, tmp_path) as opener:
        yield opener()

class DrawsX(Scripted):
    """Session id ``X`` while ``forking``; with ``once``, the first such draw alone."""

    forking = False
    once = False

    def session_id(self) -> str:
        if not self.forking:
            return super().session_id()
        if self.once:
            self.forking = False
        return "X"


def _fork_racing(sm: session_manager.SessionManager, store: Any, ids: DrawsX, race: Callable[[], Any],
                 on_race: Callable[[], None] = lambda: None) -> tuple[dict[str, Any], list[Any], list[BaseException]]:
    """Forks session ``S`` (one attachment) at ``e_001`` while ``race`` runs on another thread,
    started at the fork's check of its drawn id ``X`` (after ``on_race``); the fork's answer,
    the race's answers and its failures."""
    answers: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            answers.append(race())
        except BaseException as e:  # (handed to the test)
            failed.append(e)

    racer = threading.Thread(target=run)
    get_meta = store.get_meta

    def checked(session_id: str, *args: Any, **kwargs: Any) -> Any:
        found = get_meta(session_id, *args, **kwargs)
        if session_id == "X" and ids.forking:  # the fork's check: the other call comes in now
            ids.forking = False
            on_race()
            racer.start()
            racer.join(2)  # (done, or waiting for the fork: sqlite's write lock, postgres's row)
        return found

    sm.call("session::ensure", {"session_id": "S"})
    put = sm.call("session::put-attachment", {"session_id": "S", "name": "n.txt", "mime": "text/plain",
                                              "data": "aGk="})
    sm.call("session::append", {"session_id": "S", "message": {
        "role": "user", "timestamp": 1, "content": [put["block"]]}})
    store.get_meta = checked
    ids.forking = True
    try:
        fork = sm.call("session::fork", {"session_id": "S", "entry_id": "e_001"})
        racer.join()
    finally:
        store.get_meta = get_meta
    return fork, answers, failed


def test_a_fork_racing_an_ensure_of_its_drawn_id_copies_nothing_into_that_session(store: Any) -> None:
    # Prevents: the fork checked X free, then another thread's session::ensure created X, then
    # the fork copied its path's attachment into X (a session that never uploaded it), its
    # commit conflicted and it was decided again under a fresh id: the refused attempt's
    # attachment stayed in the other session (memory, fs: the fork took no lock of X).
    ids = DrawsX()
    sm = session_manager.open(store=store, ids=ids)
    created: list[str] = []
    sm.observe({"function_id": session_manager.ON_CREATED}, lambda e: created.append(e["session_id"]))
    try:
        fork, other, failed = _fork_racing(sm, store, ids, lambda: sm.call("session::ensure", {"session_id": "X"}))
        assert failed == [] and len(other) == 1
        new_id = fork["session_id"]
        assert [(a["attachment_id"], a["name"]) for a in store.list_attachments(new_id)] == [("a_001", "n.txt")]
        assert store.read_attachment(new_id, "a_001") == b"hi"
        x = sm.call("session::get", {"session_id": "X"})["meta"]
        if new_id != "X":  # the ensure came first: X is its empty session, holding nothing of the fork
            assert x.get("forked_from") is None and x["message_count"] == 0
            assert store.list_attachments("X") == []
            assert store.entries("X") == []
            assert sorted(created) == sorted(["S", "X", new_id])
        else:  # the fork came first: the ensure found it
            assert x["forked_from"] == "S" and other[0]["meta"]["session_id"] == "X"
            assert sorted(created) == ["S", "X"]
    finally:
        sm.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Opens another store over the same database at each call (another instance)."""
    with bare_opener(request.param, tmp_path) as opener:
        yield opener


def test_a_fork_racing_another_instances_create_of_its_drawn_id_copies_nothing_into_it(shared: Any) -> None:
    # Holds (review 21): another instance creating the fork's drawn id (its own generator
    # repeating it) between the fork's check and its attachment copy waits for the fork's
    # transaction (sqlite's write lock, postgres's), then finds the id taken and draws again.
    store, other_store = shared(), shared()
    ids, other_ids = DrawsX(), DrawsX()
    other_ids.once = True
    sm, other = session_manager.open(store=store, ids=ids), session_manager.open(store=other_store, ids=other_ids)
    try:
        fork, made, failed = _fork_racing(sm, store, ids, lambda: other.call("session::create", {"title": "other"}),
                                          on_race=lambda: setattr(other_ids, "forking", True))  # (its first draw: X)
        assert failed == [] and len(made) == 1
        mine, theirs = fork["session_id"], made[0]["session_id"]
        assert mine == "X" and theirs != "X"  # the fork's transaction first; the create drew again
        assert [(a["attachment_id"], a["name"]) for a in store.list_attachments("X")] == [("a_001", "n.txt")]
        assert store.list_attachments(theirs) == []
        assert other.call("session::get", {"session_id": theirs})["meta"]["title"] == "other"
        assert sm.call("session::get", {"session_id": "X"})["meta"]["forked_from"] == "S"
    finally:
        sm.close()
        other.close()
