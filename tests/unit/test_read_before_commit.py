"""The read a mutation makes right before its commit (fs store): the session is marked
most recent there and charged once, by the commit; a mutation that ends without a commit
(an idempotent replay, a stale expected_revision, an error) leaves the cache as a read does."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from session_manager._service.service import SessionService
from session_manager._wire import api
from session_manager.errors import SessionError
from session_manager.store import FsStore
from session_manager.store.fs._cache import footprint


def _text(text: str, role: str = "user") -> dict[str, Any]:
    message = {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1}
    if role == "assistant":
        message.update(stop_reason="end", model="m", provider="p")
    return message


def _append(service: SessionService, body: dict[str, Any]) -> tuple[Any, list[Any]]:
    return service.append(api.AppendRequest.model_validate(body))  # type: ignore[no-any-return]


def _update(service: SessionService, body: dict[str, Any]) -> tuple[Any, list[Any]]:
    return service.update_message(api.UpdateMessageRequest.model_validate(body))  # type: ignore[no-any-return]


def _assert_charged_as_held(store: FsStore) -> None:
    """Once what was handed out is settled, every cached session is charged what it holds."""
    cache = store._sessions
    cache.settle()
    for sid, state in cache.items():
        assert cache._charges[sid] == footprint(state), sid
    assert cache.total == sum(cache._charges.values())


@pytest.fixture
def reopened(tmp_path: Path) -> tuple[FsStore, SessionService, str, str, str]:
    """A session (s_1: an assistant message a_1, then a custom c_1) and a second one (s_2),
    written by one store and read by a fresh one, so bodies are decoded only when read."""
    first = FsStore(tmp_path)
    service = SessionService(first)
    sid = service.create(api.CreateRequest.model_validate({}))[0]["session_id"]
    other = service.create(api.CreateRequest.model_validate({}))[0]["session_id"]
    _append(service, {"session_id": sid, "entry_id": "a_1", "message": _text("x" * 500, "assistant")})
    _append(service, {"session_id": sid, "entry_id": "c_1", "custom": {"custom_type": "k", "data": {"d": "y" * 500}}})
    first.close()
    store = FsStore(tmp_path)
    return store, SessionService(store), sid, other, str(store.file_path(sid))


def test_a_mutation_ending_without_a_commit_leaves_the_cache_charged_and_ordered(
        reopened: tuple[FsStore, SessionService, str, str, str]) -> None:
    # Prevents: the read before a commit leaving the session's charge to a commit that never
    # comes (a replay, a stale revision, an error), so the bodies that read decoded go uncounted,
    # or the session not marked most recent.
    store, service, sid, other, log = reopened
    store.get_meta(sid)
    store.get_meta(other)
    size = os.path.getsize(log)

    # Idempotent replay: the original answered, nothing written, nothing fired.
    response, events = _append(service, {"session_id": sid, "entry_id": "a_1", "message": _text("again")})
    assert response["entry_id"] == "a_1" and events == []
    assert list(store._sessions)[-1] == sid
    _assert_charged_as_held(store)

    store.get_meta(other)
    # A stale expected_revision: not updated, nothing written, nothing fired.
    response, events = _update(service, {"session_id": sid, "entry_id": "a_1", "expected_revision": 7,
                                         "content": [{"type": "text", "text": "new"}]})
    assert response == {"updated": False, "revision": 0} and events == []
    assert list(store._sessions)[-1] == sid
    _assert_charged_as_held(store)

    store.get_meta(other)
    # An error after the read: the custom entry is not a message.
    with pytest.raises(SessionError):
        _update(service, {"session_id": sid, "entry_id": "c_1", "content": [{"type": "text", "text": "no"}]})
    with pytest.raises(SessionError):
        _append(service, {"session_id": sid})  # neither message nor custom
    with pytest.raises(SessionError, match="at least one"):
        service.append_many(api.AppendManyRequest.model_validate({"session_id": sid, "messages": []}))
    with pytest.raises(SessionError, match="does not exist"):
        service.append_many(api.AppendManyRequest.model_validate(
            {"session_id": sid, "parent_id": "nope", "messages": [_text("m")]}))
    assert list(store._sessions)[-1] == sid
    _assert_charged_as_held(store)

    assert os.path.getsize(log) == size
    assert store.get_entry(sid, "a_1")["message"] == _text("x" * 500, "assistant")  # type: ignore[index]
    store.close()
    again = FsStore(os.path.dirname(log))
    assert again.get_meta(sid)["message_count"] == 1  # type: ignore[index]
    assert again.get_leaf(sid) == "c_1"
    again.close()


def test_a_mutation_that_commits_is_charged_what_it_holds_and_most_recent(
        reopened: tuple[FsStore, SessionService, str, str, str]) -> None:
    # Prevents: the charge left by the read before a commit never made (or made twice) by it.
    store, service, sid, other, _ = reopened
    store.get_meta(sid)
    store.get_meta(other)
    response, events = _update(service, {"session_id": sid, "entry_id": "a_1",
                                         "content": [{"type": "text", "text": "z" * 2000}]})
    assert response == {"updated": True, "revision": 1} and len(events) == 1
    assert list(store._sessions)[-1] == sid
    _assert_charged_as_held(store)
    store.get_meta(other)
    last = _append(service, {"session_id": sid, "message": _text("w" * 2000)})[0]["entry_id"]
    assert list(store._sessions)[-1] == sid
    _assert_charged_as_held(store)
    store.get_meta(other)
    response, events = service.append_many(api.AppendManyRequest.model_validate(
        {"session_id": sid, "messages": [_text("v" * 2000), _text("u")]}))
    assert len(response["entry_ids"]) == 2 and len(events) == 2
    assert store.get_meta(sid)["message_count"] == 4  # type: ignore[index]
    assert store.get_leaf(sid) == response["last_entry_id"]
    assert store.get_entry(sid, response["entry_ids"][0])["parent_id"] == last  # type: ignore[index]
    assert list(store._sessions)[-1] == sid
    _assert_charged_as_held(store)
    store.close()


def test_writers_through_the_service_racing_the_eviction_lose_nothing(tmp_path: Path) -> None:
    # Prevents: a mutation whose read left the session uncharged, then dropped by another
    # thread's eviction before its commit, writing to the dropped state (a later load would
    # not see the write).
    store = FsStore(tmp_path, cache_bytes=1)  # every other session is dropped on each touch
    service = SessionService(store)
    sids = [service.create(api.CreateRequest.model_validate({}))[0]["session_id"] for _ in range(6)]
    heads = {sid: _append(service, {"session_id": sid, "message": _text("h", "assistant")})[0]["entry_id"]
             for sid in sids}

    def writer(k: int) -> None:
        for n in range(10):
            sid = sids[(k + n) % len(sids)]
            _append(service, {"session_id": sid, "message": _text(f"{k}-{n}")})
            _update(service, {"session_id": sid, "entry_id": heads[sid],
                              "content": [{"type": "text", "text": f"{k}-{n}"}]})

    with ThreadPoolExecutor(12) as pool:
        list(pool.map(writer, range(12)))  # (re-raises a writer's error)
    seen = {sid: (store.get_meta(sid)["message_count"], store.get_entry(sid, heads[sid])["revision"])  # type: ignore[index]
            for sid in sids}
    assert sum(count for count, _ in seen.values()) == len(sids) + 12 * 10
    assert sum(revision for _, revision in seen.values()) == 12 * 10
    store.close()
    restarted = FsStore(tmp_path)
    assert {sid: (restarted.get_meta(sid)["message_count"],  # type: ignore[index]
                  restarted.get_entry(sid, heads[sid])["revision"]) for sid in sids} == seen  # type: ignore[index]
    restarted.close()
