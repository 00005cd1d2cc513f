"""What a caller passes in or gets back is the caller's: changing it later
changes nothing stored, neither in the cache nor after a restart.

This is the guard that lets the write path skip deep copies: if any layer
keeps a reference to a caller's dict or list, one of these fails.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds


def open_store(where: Path) -> session_manager.SessionManager:
    return session_manager.open(where, ids=SequentialIds(), clock=ManualClock(1_000_000))


def scribble(value: Any) -> None:
    """Change every dict and list inside ``value``, in place, at every depth."""
    if isinstance(value, dict):
        for key in list(value):
            scribble(value[key])
            if not isinstance(value[key], dict | list):
                value[key] = "scribbled"
        value["scribbled"] = True
    elif isinstance(value, list):
        for item in value:
            scribble(item)
        value.append("scribbled")


def everything(sm: session_manager.SessionManager, sid: str) -> dict[str, Any]:
    return {
        "get": sm.call("session::get", {"session_id": sid}),
        "list": sm.call("session::list", {}),
        "tail": sm.call("session::messages-tail", {"session_id": sid, "limit": 10}),
        "messages": sm.call("session::messages", {"session_id": sid}),
    }


def test_no_caller_object_is_kept(tmp_path: Path) -> None:
    # Prevents: a store or cache holding a reference to a request's dicts (payload, metadata, content
    # blocks, origin, custom data, details, usage) or handing out its own objects to be changed.
    no_caller_object_is_kept(lambda: open_store(tmp_path))


@pytest.mark.postgres
def test_no_caller_object_is_kept_postgres(schema: str) -> None:
    # Prevents: a postgres read answer handed over uncopied (its reads are fresh) sharing an object
    # with the store's knowledge of a session or with a later answer.
    from tests import pg_support

    no_caller_object_is_kept(lambda: session_manager.open(store=pg_support.open_store(schema), ids=SequentialIds(),
                                                          clock=ManualClock(1_000_000)))


def no_caller_object_is_kept(opener: Callable[[], session_manager.SessionManager]) -> None:
    sm = opener()
    payloads: list[Any] = []

    def call(function: str, payload: dict[str, Any]) -> Any:
        payloads.append(payload)
        return sm.call(function, payload)

    sid = call("session::create", {"title": "t", "metadata": {"team": {"name": "a", "tags": ["x"]}}})["session_id"]
    call("session::set-meta", {"session_id": sid, "metadata": {"team": {"name": "b", "tags": [1, {"deep": [2]}]}}})
    user = call("session::append", {"session_id": sid, "origin": {"client": {"id": "c", "v": [1]}},
                                    "message": {"role": "user", "timestamp": 1,
                                                "content": [{"type": "text", "text": "hi"}]}})["entry_id"]
    call("session::append", {"session_id": sid, "custom": {"custom_type": "note", "data": {"k": [1, {"j": 2}]}}})
    call("session::append-many", {"session_id": sid, "origin": {"batch": {"n": [1]}}, "messages": [
        {"role": "user", "timestamp": 2, "content": [{"type": "text", "text": "a"}]},
        {"role": "function_result", "timestamp": 3, "function_call_id": "c1", "function_id": "f", "is_error": False,
         "content": [{"type": "text", "text": "r"}], "details": {"rows": [[1, 2]]}},
    ]})
    reply = call("session::append", {"session_id": sid, "message": {
        "role": "assistant", "timestamp": 4, "content": [{"type": "text", "text": "..."}],
        "stop_reason": "end", "model": "m", "provider": "p"}})["entry_id"]
    call("session::update-message", {"session_id": sid, "entry_id": reply,
                                      "content": [{"type": "text", "text": "final"},
                                                  {"type": "function_call", "id": "t1", "function_id": "f",
                                                   "arguments": {"q": {"nested": [1]}}}],
                                      "usage": {"input": 1, "output": 2}})
    expected = everything(sm, sid)
    expected["entry"] = sm.call("session::get-message", {"session_id": sid, "entry_id": user})

    for payload in payloads:
        scribble(payload)
    results = everything(sm, sid)
    results["entry"] = sm.call("session::get-message", {"session_id": sid, "entry_id": user})
    assert results == expected  # the cache did not see the scribbles on the payloads
    scribble(results)
    again = everything(sm, sid)
    again["entry"] = sm.call("session::get-message", {"session_id": sid, "entry_id": user})
    assert again == expected  # nor on what reads handed out
    sm.close()
    restarted = opener()
    try:
        after = everything(restarted, sid)
        after["entry"] = restarted.call("session::get-message", {"session_id": sid, "entry_id": user})
    finally:
        # Left open, a postgres store's event listener outlived the test and its dropped schema,
        # logging "relation outbox does not exist" into later tests that assert quiet logs.
        restarted.close()
    assert after == expected  # and neither did the disk
