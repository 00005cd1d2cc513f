"""Steps for the message and branching features.

They only shorten what the generic steps in ``common.py`` already express:
seeding a transcript, asserting one event of several, streaming a reply and
walking messages-tail back to the start. Every call still goes through the
same embedded store, so events are recorded exactly as for generic calls.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_bdd import given, parsers, then, when

from tests.steps.common import World, contains, lookup, same

# A fixed message timestamp, deliberately unlike the worker clock, so a test
# can tell the entry's timestamp (worker clock) from the message's own.
MESSAGE_TS = 42


def user_message(text: str) -> dict[str, Any]:
    """A user message carrying one text block."""
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": MESSAGE_TS}


def assistant_message(text: str | None) -> dict[str, Any]:
    """An assistant message; ``None`` gives the empty reply a stream starts from."""
    content = [] if text is None else [{"type": "text", "text": text}]
    return {
        "role": "assistant",
        "content": content,
        "stop_reason": "end",
        "model": "m-1",
        "provider": "p-1",
        "timestamp": MESSAGE_TS,
    }


def _texts(raw: str) -> list[str]:
    return [t.strip() for t in raw.split(",") if t.strip()]


def _append(world: World, session_id: str, message: dict[str, Any]) -> None:
    world.call("session::append", {"session_id": session_id, "message": message})
    world.expect_ok()


@given(parsers.parse('I append user messages "{texts}" to "{sid}"'))
@when(parsers.parse('I append user messages "{texts}" to "{sid}"'))
def _append_users(world: World, texts: str, sid: str) -> None:
    for text in _texts(texts):
        _append(world, sid, user_message(text))


@given(parsers.parse('I append an empty assistant message to "{sid}"'))
@when(parsers.parse('I append an empty assistant message to "{sid}"'))
def _append_empty_assistant(world: World, sid: str) -> None:
    _append(world, sid, assistant_message(None))


@given(parsers.parse('I append the assistant reply "{text}" to "{sid}"'))
@when(parsers.parse('I append the assistant reply "{text}" to "{sid}"'))
def _append_assistant(world: World, text: str, sid: str) -> None:
    _append(world, sid, assistant_message(text))


@then(parsers.parse('event {i:d} of the call is "{fid}" with:'))
def _nth_event(world: World, i: int, fid: str, docstring: str) -> None:
    assert len(world.last_events) >= i, f"only {len(world.last_events)} events: {world.last_events!r}"
    got_fid, payload = world.last_events[i - 1]
    assert got_fid == fid, f"event {i} is {got_fid}, expected {fid}"
    contains(payload, world.substitute(docstring))


@then(parsers.parse('observer "{name}" received these "{path}" values:'))
def _observer_values(world: World, name: str, path: str, docstring: str) -> None:
    # A typo'd observer name must fail, not read as "received nothing".
    got = [lookup(e, path) for e in world.observed[name]]
    same(got, world.substitute(docstring))


@when(parsers.parse('entry "{eid}" of "{sid}" is streamed in {n:d} updates of the text "{text}"'))
def _stream(world: World, eid: str, sid: str, n: int, text: str) -> None:
    """Update ``eid`` ``n`` times with growing prefixes of ``text`` (the last
    is the whole text), each guarded by the revision the previous one returned,
    each answered by exactly one on-message-updated carrying that revision."""
    for k in range(1, n + 1):
        partial = text[: -(-len(text) * k // n)]
        world.call(
            "session::update-message",
            {
                "session_id": sid,
                "entry_id": eid,
                "content": [{"type": "text", "text": partial}],
                "expected_revision": k - 1,
            },
        )
        assert world.expect_ok() == {"updated": True, "revision": k}
        assert [f for f, _ in world.last_events] == ["session::on-message-updated"]
        assert world.last_events[0][1]["revision"] == k
        assert world.last_events[0][1]["message"]["content"] == [{"type": "text", "text": partial}]


@then(parsers.re(r'reading the active path of "(?P<sid>[^"]+)" gives "(?P<ids>[^"]*)"'))
def _active_path(world: World, sid: str, ids: str) -> None:
    """Read-back: every entry (customs included) on the active path, in order."""
    world.call("session::messages", {"session_id": sid, "include_custom": True, "limit": 500})
    got = [m["entry_id"] for m in world.expect_ok()["messages"]]
    assert got == _texts(ids), got
    assert world.last_events == []


@then(parsers.parse('walking "{sid}" back with messages-tail at limit {limit:d} reproduces its messages'))
def _walk_back(world: World, sid: str, limit: int) -> None:
    """Prepending messages-tail pages until has_more is false yields exactly
    the entry ids session::messages (customs included) lists, never an empty
    page while more remain, and oldest_entry_id always names the page's first item."""
    world.call("session::messages", {"session_id": sid, "include_custom": True, "limit": 500})
    expected = [m["entry_id"] for m in world.expect_ok()["messages"]]
    collected: list[str] = []
    request: dict[str, Any] = {"session_id": sid, "limit": limit}
    for _ in range(len(expected) + 1):
        world.call("session::messages-tail", request)
        page = world.expect_ok()
        assert world.last_events == []
        ids = [m["entry_id"] for m in page["messages"]]
        if page["has_more"]:
            assert ids, f"empty page while has_more: {json.dumps(page)}"
        if ids:
            assert page["oldest_entry_id"] == ids[0]
        collected = ids + collected
        if not page["has_more"]:
            break
        request = {**request, "before_entry_id": page["oldest_entry_id"]}
    else:
        raise AssertionError("messages-tail never reported has_more: false")
    assert collected == expected, (collected, expected)


def call_message(call_id: str) -> dict[str, Any]:
    """An assistant turn that calls ``shell::run`` once, with a thinking block."""
    return {
        "role": "assistant",
        "content": [
            {"type": "thinking", "text": f"why {call_id}"},
            {"type": "function_call", "id": call_id, "function_id": "shell::run", "arguments": {"cmd": "ls"}},
        ],
        "stop_reason": "function_call",
        "model": "m-1",
        "provider": "p-1",
        "timestamp": MESSAGE_TS,
    }


def result_message(call_id: str) -> dict[str, Any]:
    """The function result answering ``call_id``."""
    return {
        "role": "function_result",
        "function_call_id": call_id,
        "function_id": "shell::run",
        "content": [{"type": "text", "text": "README.md"}],
        "details": {"code": 0},
        "timestamp": MESSAGE_TS,
    }


@given(parsers.parse('I append tool call pairs "{call_ids}" to "{sid}"'))
@when(parsers.parse('I append tool call pairs "{call_ids}" to "{sid}"'))
def _append_pairs(world: World, call_ids: str, sid: str) -> None:
    """Each id becomes two entries: the assistant call, then its result."""
    for call_id in _texts(call_ids):
        _append(world, sid, call_message(call_id))
        _append(world, sid, result_message(call_id))
