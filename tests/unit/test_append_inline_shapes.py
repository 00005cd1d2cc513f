"""``appending._append`` builds a new message entry and its response as dict literals, and its event
without ``Event.__init__`` (the hot
path's own, without ``build[MessageEntry]`` and ``build[AppendResponse]`` calls): the same dicts,
key for key and in the same order (stored bytes follow it), with and without an origin, on an
empty session (parent None) and after another entry."""

from __future__ import annotations

from typing import Any

import pytest

from session_manager._service.service import SessionService
from session_manager._wire import api
from session_manager._wire import events as ev
from session_manager._wire.dumping import fast_dump
from session_manager._wire.events import Event
from session_manager._wire.models import MessageEntry
from session_manager._wire.shape import build
from session_manager.store import MemoryStore


@pytest.mark.parametrize("origin", [None, {"kind": "agent", "name": "a"}])
def test_a_new_message_entry_and_its_answer_are_the_builders_dicts(origin: Any) -> None:
    # Prevents: the written-out entry or answer differing from the builders' (a key order, a None
    # origin stored as null, a parent left out), which the stored JSON and every read would show.
    service = SessionService(MemoryStore())
    service.ensure(api.EnsureRequest.model_validate({"session_id": "s"}))
    message = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}
    for parent_expected in (None, "first"):
        payload: dict[str, Any] = {"session_id": "s", "message": message}
        if origin is not None:
            payload["origin"] = origin
        if parent_expected is None:
            payload["entry_id"] = "first"
        req = api.AppendRequest.model_validate(payload)
        response, events = service.append(req)
        entry = service.store.get_entry("s", response["entry_id"])
        assert entry is not None
        expected = build[MessageEntry](kind="message", id=response["entry_id"], parent_id=parent_expected,
                                       timestamp=entry["timestamp"], revision=0, origin=req.origin,
                                       message=fast_dump(req.message))
        assert entry == expected and list(entry) == list(expected)
        answer = build[api.AppendResponse](entry_id=entry["id"], parent_id=parent_expected,
                                           timestamp=entry["timestamp"])
        assert response == answer and list(response) == list(answer)
        assert [e.function_id for e in events] == ["session::on-message-added"]
        # The event, made without Event.__init__: every slot set (a slot added later fails here),
        # the same as ev.message_added's.
        for slot in Event.__slots__:
            getattr(events[0], slot)
        ref = ev.message_added("s", entry, None)
        assert events[0].about() == ref.about() and events[0].payload == ref.payload
        assert events[0].payload["entry_id"] == entry["id"] and events[0].payload["parent_id"] == parent_expected
