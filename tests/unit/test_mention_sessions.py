"""session::mention::search and session::mention::get against real stores: ids
no store can hold, store failures, and searches racing writers."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.clock import ManualClock
from session_manager.errors import STORAGE, SessionError, StoreError
from session_manager.store.memory import MemoryStore


def _events_of(sm: session_manager.SessionManager) -> list[str]:
    fired: list[str] = []
    for fid in session_manager.EVENT_FUNCTIONS:
        sm.observe({"function_id": fid}, lambda _e, fid=fid: fired.append(fid))
    return fired


@pytest.mark.parametrize("mention_id", ["x" * 300, "é" * 130, "x" * 512])
def test_get_of_an_id_too_long_for_the_data_dir_answers_null(tmp_path: Path, mention_id: str) -> None:
    # Prevents: a token whose id no fs data_dir can hold as a file name (the grammar allows 512
    # characters) answered as session/storage, a server fault, where the contract says an id the
    # provider does not know answers null.
    with session_manager.open(tmp_path) as sm:
        sm.call("session::ensure", {"session_id": "s_1", "title": "kept"})
        fired = _events_of(sm)
        assert sm.call("session::mention::get", {"id": mention_id}) is None
        assert fired == []
        assert sm.call("session::mention::get", {"id": "s_1"})["label"] == "kept"
        with pytest.raises(SessionError) as e:  # session::get keeps naming its field as too long
            sm.call("session::get", {"session_id": mention_id})
        assert e.value.code == "session/invalid_request" and "session_id" in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["s_1.jsonl"]


class _Failing(MemoryStore):
    """A store whose reads of the session list and of one meta fail with ``error``."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error
        self.failing = False

    def list_metas(self) -> list[Any]:
        if self.failing:
            raise self.error
        return super().list_metas()

    def get_meta(self, session_id: str) -> Any:
        if self.failing:
            raise self.error
        return super().get_meta(session_id)


@pytest.mark.parametrize("error", [StoreError("disk gone"), OSError(5, "Input/output error")])
def test_a_failing_store_is_session_storage_and_the_data_stays(error: BaseException) -> None:
    # Prevents: a store fault under a mention call leaking as a traceback, or reported as anything
    # but session/storage.
    store = _Failing(error)
    with session_manager.open(store=store) as sm:
        sm.call("session::ensure", {"session_id": "s_1", "title": "kept"})
        fired = _events_of(sm)
        store.failing = True
        for fid, payload in (("session::mention::search", {"query": "k"}), ("session::mention::get", {"id": "s_1"})):
            with pytest.raises(SessionError) as e:
                sm.call(fid, payload)
            assert e.value.code == STORAGE
        store.failing = False
        assert [r["id"] for r in sm.call("session::mention::search", {"query": "k"})["items"]] == ["s_1"]
        assert fired == []


class StepClock(ManualClock):
    def now_ms(self) -> int:
        self.advance(1)
        return super().now_ms()


def _msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def _rows(sm: session_manager.SessionManager, query: str) -> list[tuple[str, str, str]]:
    got = sm.call("session::mention::search", {"query": query, "limit": 50})["items"]
    return [(r["id"], r["label"], r["description"]) for r in got]


@pytest.mark.parametrize("where", ["fs", "fs-cold", "memory"])
def test_search_follows_every_mutation_and_a_restart(tmp_path: Path, where: str) -> None:
    # Prevents: mention rows going stale after update-message, set-meta (title), fork, delete, a
    # re-create of the same id, or a restart (through the sessions index a close saved).
    clock = StepClock()  # every call a later millisecond: ranking ties never decide the order

    def opened() -> session_manager.SessionManager:
        if where == "memory":
            return session_manager.open(store=memory, clock=clock)
        return session_manager.open(tmp_path, clock=clock)

    memory = MemoryStore()
    sm = opened()
    sm.call("session::ensure", {"session_id": "s_a", "title": "alpha plan"})
    entry = sm.call("session::append", {"session_id": "s_a", "message": _msg("one")})["entry_id"]
    if where == "fs-cold":
        sm.call("session::list", {})
        sm.close()
        sm = opened()  # the catalog comes from the saved index, metas still undecoded
    fired = _events_of(sm)
    assert _rows(sm, "alpha") == [("s_a", "alpha plan", "Idle · 1 message")]
    sm.call("session::update-message", {"session_id": "s_a", "entry_id": entry, "content": _msg("two")["content"]})
    sm.call("session::set-meta", {"session_id": "s_a", "title": "beta plan"})
    assert _rows(sm, "alpha") == []
    assert _rows(sm, "beta") == [("s_a", "beta plan", "Idle · 1 message")]
    fork = sm.call("session::fork", {"session_id": "s_a", "entry_id": entry, "title": "beta fork"})["session_id"]
    assert _rows(sm, "beta") == [(fork, "beta fork", "Idle · 1 message"), ("s_a", "beta plan", "Idle · 1 message")]
    sm.call("session::delete", {"session_id": "s_a"})
    assert _rows(sm, "beta") == [(fork, "beta fork", "Idle · 1 message")]
    assert sm.call("session::mention::get", {"id": "s_a"}) is None
    sm.call("session::ensure", {"session_id": "s_a", "title": "gamma"})
    assert _rows(sm, "beta") == [(fork, "beta fork", "Idle · 1 message")]
    assert _rows(sm, "s_a") == [("s_a", "gamma", "Idle · 0 messages")]
    assert sm.call("session::mention::get", {"id": "s_a"})["description"] == "Idle · 0 messages"
    assert fired == ["session::on-message-updated", "session::on-meta-updated", "session::on-created",
                     "session::on-deleted", "session::on-created"]
    sm.close()
    again = opened()
    assert _rows(again, "") == [("s_a", "gamma", "Idle · 0 messages"), (fork, "beta fork", "Idle · 1 message")]
    assert _rows(again, "beta") == [(fork, "beta fork", "Idle · 1 message")]
    again.close()


@pytest.mark.parametrize("where", ["fs-cold", "memory"])
def test_searches_racing_appends_deletes_and_recreates_never_raise(tmp_path: Path, where: str) -> None:
    # Prevents: a search or get failing (a dict changed size during iteration, a meta half gone)
    # while other threads append to, delete and re-create the sessions it reads.
    ids = [f"s_{i:02d}" for i in range(40)]
    memory = MemoryStore()
    opened = (lambda: session_manager.open(store=memory)) if where == "memory" else (
        lambda: session_manager.open(tmp_path))
    with opened() as sm:
        for sid in ids:
            sm.call("session::ensure", {"session_id": sid, "title": f"topic {sid}"})
        sm.call("session::list", {})
    sm = opened()
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: set[str] = set()

    def guarded(work: Any) -> Any:
        def run() -> None:
            try:
                work()
            except BaseException as e:  # reported by the main thread
                errors.append(e)
                stop.set()
        return threading.Thread(target=run)

    def searcher() -> None:
        while not stop.is_set():
            for row in sm.call("session::mention::search", {"query": "topic", "limit": 50})["items"]:
                assert row["label"] == f"topic {row['id']}"
                seen.add(row["id"])
            view = sm.call("session::mention::get", {"id": ids[len(seen) % len(ids)]})
            assert view is None or view["data"]["session_id"] == view["id"]

    def churn(mine: list[str]) -> None:
        for round_ in range(6):
            for sid in mine:
                sm.call("session::append", {"session_id": sid, "message": _msg(f"r{round_}")})
                sm.call("session::delete", {"session_id": sid})
                sm.call("session::ensure", {"session_id": sid, "title": f"topic {sid}"})

    threads = [guarded(searcher) for _ in range(3)] + [
        guarded(lambda k=k: churn(ids[k::2])) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads[3:]:
        t.join(120)
    stop.set()
    for t in threads[:3]:
        t.join(30)
    assert not errors, errors[0]
    assert seen and seen <= set(ids)
    rows = sm.call("session::mention::search", {"query": "topic", "limit": 50})["items"]
    assert sorted(r["id"] for r in rows) == ids
    assert all(r["description"] == "Idle · 0 messages" for r in rows)
    assert len(sm.call("session::list", {"limit": 100})["sessions"]) == len(ids)
    sm.close()
    if where != "memory":
        with opened() as again:
            assert sorted(r["id"] for r in again.call("session::mention::search",
                                                      {"query": "topic", "limit": 50})["items"]) == ids


@pytest.mark.parametrize(("query", "found"), [("日本", True), ("éé", True), ("ÉÉ", True), ("abcd", True),
                                              ("é", False), ("abc", False), ("日", False)])
def test_mention_id_prefix_rule_counts_utf8_bytes_not_characters(tmp_path: Path, query: str, found: bool) -> None:
    # Prevents: the id-prefix rule counting characters (len(q) >= 4) where the reference counts
    # UTF-8 bytes, so `日本` (6 bytes) and `éé` (4 bytes) found nothing here and a session there.
    with session_manager.open(tmp_path) as sm:
        for sid in ("日本語-chat", "ééé-chat", "abcdef"):
            sm.call("session::ensure", {"session_id": sid, "title": "unrelated"})
        fired = _events_of(sm)
        rows = sm.call("session::mention::search", {"query": query})["items"]
        expected = [sid for sid in ("日本語-chat", "ééé-chat", "abcdef") if sid.startswith(query.lower())]
        assert [r["id"] for r in rows] == (expected if found else [])
        assert fired == []
