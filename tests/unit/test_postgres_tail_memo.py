"""messages-tail pages kept per session version (issue 24's warm tail): an instance
answers a page it built before only when the session is still exactly as it was,
which its one read proves each call; so every write is seen at once, another
instance's as well as its own, and the answer equals a page built afresh."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import session_manager
from session_manager._service.page_memo import PageMemo
from session_manager.clock import ManualClock
from tests import pg_support
from tests.pg_support import text
from tests.unit.scripted import PNG

pytestmark = pytest.mark.postgres

REQUESTS: list[dict[str, Any]] = [
    {"limit": 50}, {"limit": 3}, {"limit": 2, "include_custom": False}, {"limit": 4, "include_image_data": False},
]


def open_sm(schema_name: str, **kw: Any) -> session_manager.SessionManager:
    return session_manager.open(store=pg_support.open_store(schema_name), **kw)


def tails(sm: session_manager.SessionManager, sid: str) -> list[Any]:
    out: list[Any] = []
    for req in REQUESTS:
        try:
            out.append(sm.call("session::messages-tail", {"session_id": sid, **req}))
        except session_manager.SessionError as e:
            out.append(e.code)
    return out


def test_every_write_by_either_instance_is_in_the_next_tail_as_built_afresh(schema: str) -> None:
    # Prevents: a kept page answered after a write it does not show: another instance's append,
    # update-message (a revision leaves the leaf and, within one millisecond, the meta text as they
    # were), set-active-leaf, set-meta, a delete and a recreate under the same id; or this instance's own.
    clock = ManualClock(5_000)  # never moves: consecutive writes leave updated_at as it was
    a, b = open_sm(schema, clock=clock), open_sm(schema, clock=clock)
    fresh = open_sm(schema)
    fresh.service.core.tail_pages = PageMemo(max_pages=0)  # keeps nothing: builds every page
    try:
        sid = a.call("session::ensure", {"session_id": "s", "title": "t"})["session_id"]
        ids: list[str] = []

        def append(sm: session_manager.SessionManager, i: int) -> None:
            ids.append(sm.call("session::append", {"session_id": sid, "message": text(f"m{i}")})["entry_id"])

        steps: list[Callable[[], Any]] = [
            lambda: [append(b, i) for i in range(6)],
            lambda: append(a, 6),
            lambda: b.call("session::update-message", {"session_id": sid, "entry_id": ids[-1],
                                                      "content": [{"type": "text", "text": "revised"}]}),
            lambda: b.call("session::update-message", {"session_id": sid, "entry_id": ids[-1],
                                                      "content": [{"type": "text", "text": "revised again"}]}),
            lambda: b.call("session::append", {"session_id": sid, "message": {
                "role": "assistant", "timestamp": 8, "stop_reason": "function_call", "model": "m", "provider": "p",
                "content": [{"type": "function_call", "id": "c1", "function_id": "weather::get"}]}}),
            lambda: a.call("session::append", {"session_id": sid, "message": {
                "role": "function_result", "timestamp": 9, "function_call_id": "c1", "function_id": "weather::get",
                "content": [{"type": "text", "text": "wet"}]}}),
            lambda: a.call("session::append", {"session_id": sid, "custom": {"custom_type": "marker"}}),
            lambda: b.call("session::append", {"session_id": sid, "message": {
                "role": "user", "timestamp": 7, "content": [{"type": "image", "mime": "image/png", "data": PNG}]}}),
            lambda: b.call("session::set-active-leaf", {"session_id": sid, "entry_id": ids[3]}),
            lambda: append(a, 7),
            lambda: b.call("session::set-meta", {"session_id": sid, "title": "renamed"}),
            lambda: b.call("session::delete", {"session_id": sid}),
            lambda: b.call("session::ensure", {"session_id": sid, "title": "again"}),
            lambda: append(b, 8),
        ]
        assert tails(a, sid) == tails(fresh, sid)
        for step in steps:
            step()
            seen = tails(a, sid)
            assert seen == tails(fresh, sid)
            assert tails(a, sid) == seen  # and kept: answered again, unchanged
            assert tails(b, sid) == seen
    finally:
        a.close()
        b.close()
        fresh.close()


def test_a_kept_page_is_answered_as_a_copy_of_its_own(schema: str) -> None:
    # Prevents: two callers handed one object, so one's change shows in the other's answer.
    with open_sm(schema) as sm:
        sid = sm.call("session::create", {})["session_id"]
        for i in range(3):
            sm.call("session::append", {"session_id": sid, "message": text(f"m{i}")})
        req = {"session_id": sid, "limit": 10}
        first = sm.call("session::messages-tail", req)
        expected = sm.call("session::messages-tail", req)
        assert first == expected
        first["messages"][0]["message"]["content"].append({"type": "text", "text": "mine"})
        first["messages"].clear()
        assert sm.call("session::messages-tail", req) == expected


def test_the_version_changes_with_every_write_and_only_then(schema: str) -> None:
    # Prevents: a version that two states of one session share (a write it misses), or that
    # changes with no write (no page ever answered again: the warm tail back to a path walk).
    with open_sm(schema, clock=ManualClock(1)) as sm:
        store = sm.service.store
        sid = sm.call("session::ensure", {"session_id": "v"})["session_id"]
        eid = sm.call("session::append", {"session_id": sid, "message": text("a")})["entry_id"]
        seen = []
        writes: list[Callable[[], Any]] = [
            lambda: sm.call("session::update-message", {"session_id": sid, "entry_id": eid,
                                                       "content": [{"type": "text", "text": "b"}]}),
            lambda: sm.call("session::update-message", {"session_id": sid, "entry_id": eid,
                                                       "content": [{"type": "text", "text": "c"}]}),
            lambda: sm.call("session::append", {"session_id": sid, "message": text("d")}),
            lambda: sm.call("session::set-active-leaf", {"session_id": sid, "entry_id": eid}),
            lambda: (sm.call("session::delete", {"session_id": sid}), sm.call("session::ensure", {"session_id": sid})),
        ]
        for write in [lambda: None, *writes]:
            write()
            meta, leaf, version = store.meta_and_leaf_since(sid, None)
            assert meta is not None and version is not None
            again = store.meta_and_leaf_since(sid, version)
            assert again == (meta, leaf, version)  # unchanged: the same, its path not read again
            # The server compares the whole version: a row at the same xmin whose leaf or meta
            # text differs (the 32-bit xmin come round again) is read as changed.
            xmin, stored_leaf, text_ = version  # type: ignore[misc]
            for other in ((xmin, stored_leaf, text_ + " "), (xmin, "elsewhere", text_)):
                assert store.meta_and_leaf_since(sid, other) == (meta, leaf, version)
            seen.append(version)
        assert len(set(seen)) == len(seen)
        sm.call("session::delete", {"session_id": sid})
        assert store.meta_and_leaf_since(sid, seen[-1]) == (None, None, None)


def test_a_cold_stores_first_call_opens_one_connection(schema: str) -> None:
    # Prevents: the pool growing for the first call, which waits for the connection open()
    # started: a second backend started on the server during that call, and the next calls
    # alternating between two backends that each prepare and plan every statement anew.
    pg_support.open_store(schema).close()  # the schema migrated: what follows is a cold open
    with open_sm(schema) as sm:
        sid = sm.call("session::create", {})["session_id"]
        for _ in range(5):
            sm.call("session::messages-tail", {"session_id": sid, "limit": 5})
        assert sm.service.store.db.pool.get_stats()["pool_size"] == 1
