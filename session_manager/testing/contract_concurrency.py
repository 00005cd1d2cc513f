"""Concurrent writers on one session: the compare-and-set part of the storage contract.

:class:`ConcurrentWriters` is mixed into
:class:`~session_manager.testing.contract.StoreContract`, so every adapter's
contract class runs these. Each writer is a :class:`SessionService` of its
own (its own per-session locks, as two processes would have), so nothing but
the store's compare-and-set keeps them from interleaving a decision with the
other's write. By default both writers share the store under test (threads
over one store object); an adapter whose writers are separate clients (the
bridge: two bridged instances over one main) overrides :meth:`second_writer`.
Every test runs real threads and then checks the whole state, read back
through a reopened store where the adapter has one: one linear chain, exact
counts, no lost change.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from session_manager._service.service import SessionService
from session_manager._wire import api
from session_manager.errors import SessionError
from session_manager.ids import SequentialIds
from session_manager.store import SessionStore

PER_WRITER = 100


class TickingClock:
    """Every reading is a new millisecond, so two decisions never share a stamp."""

    def __init__(self, start: int = 1_000_000) -> None:
        self._next = itertools.count(start)
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return next(self._next)


class Writers:
    """Two services over one backing store, plus a fresh reader of it."""

    def __init__(self, stores: list[SessionStore], reader: Callable[[], SessionStore]) -> None:
        ids, clock = SequentialIds(), TickingClock()
        self.services = [SessionService(s, ids=ids, clock=clock) for s in stores]
        self.reader = reader

    def call(self, n: int, method: str, model: type[Any], payload: dict[str, Any]) -> Any:
        response, _events = getattr(self.services[n], method)(model.model_validate(payload))
        return response

    def retries(self) -> int:
        return sum(s.stats.get("cas_retries") for s in self.services)


def run_threads(count: int, work: Callable[[int], None]) -> None:
    """``work(0)`` ... ``work(count - 1)`` on as many threads, started together; none may raise."""
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def run(n: int) -> None:
        try:
            start.wait()
            work(n)
        except BaseException as e:  # reported below
            errors.append(e)

    pool = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(120)
    assert errors == []


def run_both(work: Callable[[int], None]) -> None:
    run_threads(2, work)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def chain(store: SessionStore, sid: str) -> list[dict[str, Any]]:
    """The active path, checked to be the only branch: every entry is on it."""
    path = list(store.path(sid, store.get_leaf(sid)))
    assert len(path) == len(store.entries(sid)), "an entry fell off the active path"
    return path


class ConcurrentWriters:
    """Two writers on one session; see the module docstring."""

    def second_writer(self, store: SessionStore) -> SessionStore:
        """The other writer's store: by default the same object (threads)."""
        return store

    def reopened(self, tmp_path: Path) -> list[SessionStore]:
        return []

    @pytest.fixture
    def writers(self, store: SessionStore, tmp_path: Path) -> Writers:
        def reader() -> SessionStore:
            fresh = self.reopened(tmp_path)
            return fresh[0] if fresh else store

        return Writers([store, self.second_writer(store)], reader)

    def test_default_parent_appends_form_one_linear_chain(self, writers: Writers) -> None:
        # Prevents: two writers reading the same leaf and forking the session, or a lost message_count.
        writers.call(0, "ensure", api.EnsureRequest, {"session_id": "s"})
        answers: list[list[dict[str, Any]]] = [[], []]

        def work(n: int) -> None:
            for i in range(PER_WRITER):
                answers[n].append(writers.call(n, "append", api.AppendRequest,
                                               {"session_id": "s", "message": user(f"{n}-{i}")}))

        run_both(work)
        store = writers.reader()
        path = chain(store, "s")
        assert len(path) == 2 * PER_WRITER
        assert (store.get_meta("s") or {})["message_count"] == 2 * PER_WRITER
        # each answer names the parent it really got: the chain is exactly the acknowledged appends
        by_id = {e["id"]: e for e in path}
        for a in answers[0] + answers[1]:
            assert by_id[a["entry_id"]]["parent_id"] == a["parent_id"]
        for n in range(2):  # and each writer's appends are in its own order
            mine = [e["message"]["content"][0]["text"] for e in path if e["message"]["content"][0]["text"][0] == str(n)]
            assert mine == [f"{n}-{i}" for i in range(PER_WRITER)]


    def test_explicit_parent_appends_keep_every_entry_and_count(self, writers: Writers) -> None:
        # Prevents: explicit-parent appends from two writers overwriting each other's message_count.
        writers.call(0, "ensure", api.EnsureRequest, {"session_id": "s"})
        root = writers.call(0, "append", api.AppendRequest, {"session_id": "s", "message": user("root")})["entry_id"]

        def work(n: int) -> None:
            for i in range(PER_WRITER // 2):
                writers.call(n, "append", api.AppendRequest,
                             {"session_id": "s", "parent_id": root, "message": user(f"{n}-{i}")})

        run_both(work)
        store = writers.reader()
        entries = store.entries("s")
        assert len(entries) == PER_WRITER + 1
        assert all(e["parent_id"] == root for e in entries if e["id"] != root)
        assert (store.get_meta("s") or {})["message_count"] == PER_WRITER + 1


    def test_update_message_with_expected_revision_never_loses_an_update(self, writers: Writers) -> None:
        # Prevents: two writers both "winning" the same expected_revision (a lost update).
        writers.call(0, "ensure", api.EnsureRequest, {"session_id": "s"})
        eid = writers.call(0, "append", api.AppendRequest, {"session_id": "s", "message": user("v0")})["entry_id"]
        won: list[list[int]] = [[], []]

        def work(n: int) -> None:
            for i in range(PER_WRITER // 2):
                seen = writers.call(n, "get_message", api.GetMessageRequest, {"session_id": "s", "entry_id": eid})
                revision = seen["entry"]["revision"]
                answer = writers.call(n, "update_message", api.UpdateMessageRequest, {
                    "session_id": "s", "entry_id": eid, "expected_revision": revision,
                    "content": [{"type": "text", "text": f"{n}-{i}"}]})
                if answer["updated"]:
                    assert answer["revision"] == revision + 1
                    won[n].append(answer["revision"])

        run_both(work)
        store = writers.reader()
        final = store.get_entry("s", eid) or {}
        wins = sorted(won[0] + won[1])
        assert wins == list(range(1, len(wins) + 1))  # each revision won exactly once
        assert final["revision"] == len(wins)
        assert (store.get_meta("s") or {})["message_count"] == 1


    def test_meta_changes_survive_concurrent_appends(self, writers: Writers) -> None:
        # Prevents: an append (or a status change) carrying a stale meta back over a title just set.
        writers.call(0, "ensure", api.EnsureRequest, {"session_id": "s", "metadata": {"owner": "u"}})

        def work(n: int) -> None:
            for i in range(PER_WRITER):
                if n == 0:
                    writers.call(0, "set_meta", api.SetMetaRequest, {"session_id": "s", "title": f"t{i}"})
                    writers.call(0, "set_status", api.SetStatusRequest,
                                 {"session_id": "s", "status": "working" if i % 2 else "done"})
                else:
                    writers.call(1, "append", api.AppendRequest, {"session_id": "s", "message": user(str(i))})

        run_both(work)
        meta = writers.reader().get_meta("s") or {}
        assert meta["title"] == f"t{PER_WRITER - 1}"
        assert meta["status"] == ("working" if (PER_WRITER - 1) % 2 else "done")
        assert meta["metadata"] == {"owner": "u"}
        assert meta["message_count"] == PER_WRITER
        assert len(chain(writers.reader(), "s")) == PER_WRITER


    def test_set_active_leaf_and_fork_against_appends(self, writers: Writers) -> None:
        # Prevents: a leaf move or a fork decided on a stale session losing counts or copying a torn path.
        writers.call(0, "ensure", api.EnsureRequest, {"session_id": "s"})
        first = writers.call(0, "append", api.AppendRequest, {"session_id": "s", "message": user("first")})["entry_id"]
        forks: list[str] = []

        def work(n: int) -> None:
            for i in range(PER_WRITER // 2):
                if n == 0:
                    writers.call(0, "set_active_leaf", api.SetActiveLeafRequest, {"session_id": "s", "entry_id": first})
                    forks.append(writers.call(0, "fork", api.ForkRequest, {"session_id": "s", "entry_id": first})[
                        "session_id"])
                else:
                    writers.call(1, "append", api.AppendRequest, {"session_id": "s", "message": user(str(i))})

        run_both(work)
        store = writers.reader()
        assert len(store.entries("s")) == PER_WRITER // 2 + 1
        assert (store.get_meta("s") or {})["message_count"] == PER_WRITER // 2 + 1
        leaf_path = list(store.path("s", store.get_leaf("s")))
        assert leaf_path[0]["id"] == first and all(
            b["parent_id"] == a["id"] for a, b in itertools.pairwise(leaf_path))
        for fid in forks:
            copy = list(store.path(fid, store.get_leaf(fid)))
            assert [e["message"]["content"] for e in copy] == [[{"type": "text", "text": "first"}]]
            assert (store.get_meta(fid) or {})["message_count"] == 1


    def test_delete_against_appends_leaves_nothing_behind(self, writers: Writers) -> None:
        # Prevents: an append racing a delete resurrecting a session without a meta (entries, a leaf).
        writers.call(0, "ensure", api.EnsureRequest, {"session_id": "s"})
        outcomes: list[str] = []
        some_done = threading.Event()

        def work(n: int) -> None:
            if n == 0:
                for i in range(100_000):  # until the delete lands
                    try:
                        writers.call(0, "append", api.AppendRequest, {"session_id": "s", "message": user(str(i))})
                        outcomes.append("ok")
                    except SessionError as e:
                        outcomes.append(e.code)
                        if len(outcomes) - outcomes.index("session/not_found") >= 5:
                            return
                    if len(outcomes) == PER_WRITER // 4:
                        some_done.set()
            else:
                assert some_done.wait(60)
                assert writers.call(1, "delete", api.DeleteRequest, {"session_id": "s"}) == {"deleted": True}

        run_both(work)
        store = writers.reader()
        assert store.get_meta("s") is None and store.get_leaf("s") is None and store.entries("s") == []
        assert "session/not_found" in outcomes
        first_refusal = outcomes.index("session/not_found")
        assert set(outcomes[first_refusal:]) == {"session/not_found"}  # once gone, it stays gone
        assert set(outcomes[:first_refusal]) == {"ok"}
