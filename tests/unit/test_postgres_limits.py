"""Ids at the edges of what the postgres adapter stores: too long to index, or holding NUL."""

from __future__ import annotations

import os

import pytest

import session_manager
from session_manager._wire import events as ev
from session_manager.clock import ManualClock
from session_manager.store.sql.keys import ID_BYTES
from tests import pg_support
from tests.pg_support import text

pytestmark = pytest.mark.postgres


def test_an_entry_id_too_long_to_index_is_invalid_request_and_writes_nothing(schema: str) -> None:
    # Prevents: a caller-chosen entry_id past PostgreSQL's index row limit answering
    # session/storage (a database fault) instead of invalid_request naming the field and the
    # limit, with a limit that moved with how well the id compressed.
    with session_manager.open(store=pg_support.open_store(schema)) as sm:
        seen: list[str] = []
        sm.observe({"function_id": ev.ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
        sid = sm.call("session::create", {})["session_id"]
        longest = os.urandom(ID_BYTES).hex()[:ID_BYTES]  # incompressible
        assert sm.call("session::append", {"session_id": sid, "entry_id": longest, "message": text("a")})
        for too_long in (os.urandom(ID_BYTES).hex()[: ID_BYTES + 1], "é" * (ID_BYTES // 2 + 1), "e" * 100_000):
            for call, args in (
                ("session::append", {"session_id": sid, "entry_id": too_long, "message": text("b")}),
                ("session::append", {"session_id": sid, "entry_id": too_long, "custom": {"custom_type": "t"}}),
            ):
                with pytest.raises(session_manager.SessionError) as err:
                    sm.call(call, args)
                assert err.value.code == "session/invalid_request", (call, err.value)
                assert "entry_id" in err.value.message and str(ID_BYTES) in err.value.message
        meta = sm.call("session::get", {"session_id": sid})["meta"]
        assert meta["message_count"] == 1 and seen == [longest]
        tail = sm.call("session::messages-tail", {"session_id": sid, "limit": 10})["messages"]
        assert len(tail) == 1


@pytest.mark.parametrize("order", ["created_asc", "created_desc", "updated_desc"])
def test_list_pages_through_session_ids_holding_nul_and_its_escape(schema: str, order: str) -> None:
    # Prevents: the client's list cursor compared raw against the stored (escaped) ids:
    # a NUL in the cursor's id failing the next page as session/storage, and ids holding
    # U+0001 skipped or repeated among sessions created in the same millisecond.
    ids = ["n", "n\x00", "n\x00\x00", "n\x01", "n\x01\x01", "n\x01\x02", "n\x02", "o"]
    with session_manager.open(store=pg_support.open_store(schema), clock=ManualClock(1_000)) as sm:
        for sid in ids:
            sm.call("session::ensure", {"session_id": sid})
        seen: list[str] = []
        cursor = None
        while True:
            page = sm.call("session::list", {"limit": 1, "order": order, **({"cursor": cursor} if cursor else {})})
            seen += [m["session_id"] for m in page["sessions"]]
            cursor = page.get("next_cursor")
            if cursor is None:
                break
        assert seen == sorted(ids, reverse=order != "created_asc")
