"""The kept tail page's checks every store that names versions runs (postgres by the
session row's ``xmin``, sqlite by its ``rev``): each adapter's test opens the managers,
these drive the writes and compare the answers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

import session_manager
from session_manager._service import page_memo
from session_manager._service.page_memo import PageMemo
from tests.pg_support import text  # (imports no driver: usable without postgres)
from tests.unit.scripted import PNG

REQUESTS: list[dict[str, Any]] = [
    {"limit": 50}, {"limit": 3}, {"limit": 2, "include_custom": False}, {"limit": 4, "include_image_data": False},
]


def tails(sm: session_manager.SessionManager, sid: str) -> list[Any]:
    out: list[Any] = []
    for req in REQUESTS:
        try:
            out.append(sm.call("session::messages-tail", {"session_id": sid, **req}))
        except session_manager.SessionError as e:
            out.append(e.code)
    return out


def every_write_is_in_the_next_tail(a: session_manager.SessionManager, b: session_manager.SessionManager,
                                    fresh: session_manager.SessionManager) -> None:
    """``a`` and ``b`` (two instances or connections on one store, whose clock never moves, so
    consecutive writes leave ``updated_at`` as it was) take turns writing every kind of write;
    after each, every tail of each equals the page ``fresh`` builds with nothing kept, and is
    answered again unchanged (kept)."""
    fresh.service.core.tail_pages = PageMemo(max_pages=0)  # keeps nothing: builds every page
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
        # Read often, a kept page is answered from its compiled shape (page_memo.PLAN_AFTER):
        # the same bytes for every kind of entry (runs collapsed, images, custom entries).
        line = orjson.dumps(seen)
        for _ in range(page_memo.PLAN_AFTER):
            assert orjson.dumps(tails(a, sid)) == line


def a_kept_page_is_answered_as_a_copy_of_its_own(sm: session_manager.SessionManager) -> None:
    """A caller's change to a kept page's answer shows in no later answer."""
    sid = sm.call("session::create", {})["session_id"]
    for i in range(3):
        sm.call("session::append", {"session_id": sid, "message": text(f"m{i}")})
    req = {"session_id": sid, "limit": 10}
    expected = sm.call("session::messages-tail", req)
    for _ in range(page_memo.PLAN_AFTER + 2):  # (answered by decoding, then from the page's shape)
        mine = sm.call("session::messages-tail", req)
        assert mine == expected
        mine["messages"][0]["message"]["content"].append({"type": "text", "text": "mine"})
        mine["messages"][-1]["message"]["role"] = "mine"
        mine["messages"].clear()
    assert sm.call("session::messages-tail", req) == expected
