"""messages-tail pages kept per session version (issue 24's warm tail): an instance
answers a page it built before only when the session is still exactly as it was,
which its one read proves each call; so every write is seen at once, another
instance's as well as its own, and the answer equals a page built afresh."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import session_manager
from session_manager.clock import ManualClock
from tests import pg_support
from tests.pg_support import text
from tests.unit.tail_memo_support import a_kept_page_is_answered_as_a_copy_of_its_own, every_write_is_in_the_next_tail

pytestmark = pytest.mark.postgres


def open_sm(schema_name: str, **kw: Any) -> session_manager.SessionManager:
    return session_manager.open(store=pg_support.open_store(schema_name), **kw)


def test_every_write_by_either_instance_is_in_the_next_tail_as_built_afresh(schema: str) -> None:
    # Prevents: a kept page answered after a write it does not show: another instance's append,
    # update-message (a revision leaves the leaf and, within one millisecond, the meta text as they
    # were), set-active-leaf, set-meta, a delete and a recreate under the same id; or this instance's own.
    clock = ManualClock(5_000)  # never moves: consecutive writes leave updated_at as it was
    a, b = open_sm(schema, clock=clock), open_sm(schema, clock=clock)
    fresh = open_sm(schema)
    try:
        every_write_is_in_the_next_tail(a, b, fresh)
    finally:
        a.close()
        b.close()
        fresh.close()


def test_a_kept_page_is_answered_as_a_copy_of_its_own(schema: str) -> None:
    # Prevents: two callers handed one object, so one's change shows in the other's answer.
    with open_sm(schema) as sm:
        a_kept_page_is_answered_as_a_copy_of_its_own(sm)


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
