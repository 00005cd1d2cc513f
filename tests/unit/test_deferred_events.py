"""Event payloads built on first read (appends and updates): what they say is the mutation's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import session_manager
from session_manager._wire import api
from session_manager._wire import events as ev
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds


def _text(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def test_an_append_event_read_after_later_mutations_tells_of_the_append(tmp_path: Path) -> None:
    # Prevents: a deferred on-message-added payload built from the session as it is when the
    # payload is first read (later metadata, a later leaf) instead of as the append left it.
    clock = ManualClock(5_000)
    with session_manager.open(tmp_path / "d", ids=SequentialIds(), clock=clock) as sm:
        sid = sm.call("session::create", {"metadata": {"tenant": "a"}})["session_id"]
        service = sm.service
        response, events = service.append(api.AppendRequest.model_validate(
            {"session_id": sid, "message": _text("first"), "origin": {"by": "me"}}))
        clock.advance(10)
        service.set_meta(api.SetMetaRequest.model_validate({"session_id": sid, "metadata": {"tenant": "b"}}))
        service.append(api.AppendRequest.model_validate({"session_id": sid, "message": _text("second")}))

        assert response == {"entry_id": "e_001", "parent_id": None, "timestamp": 5_000}
        assert [e.function_id for e in events] == [ev.ON_MESSAGE_ADDED]
        assert events[0].payload == {
            "session_id": sid, "entry_id": "e_001", "parent_id": None, "message": _text("first"),
            "origin": {"by": "me"}, "timestamp": 5_000, "session_metadata": {"tenant": "a"},
        }
        assert events[0].payload is events[0].payload  # built once, then kept
        assert events[0] == ev.Event(ev.ON_MESSAGE_ADDED, dict(events[0].payload))


def test_an_update_event_read_after_a_later_update_tells_of_its_own_revision(tmp_path: Path) -> None:
    # Prevents: a deferred on-message-updated payload that reads the stored entry at first
    # read, so an observer behind a later revision sees that one twice and never its own.
    clock = ManualClock(7_000)
    with session_manager.open(tmp_path / "d", ids=SequentialIds(), clock=clock) as sm:
        sid = sm.call("session::create", {})["session_id"]
        entry_id = sm.call("session::append", {"session_id": sid, "message": _text("draft")})["entry_id"]
        service = sm.service
        clock.advance(1)

        def update(text: str) -> list[ev.Event]:
            _, events = service.update_message(api.UpdateMessageRequest.model_validate(
                {"session_id": sid, "entry_id": entry_id, "content": [{"type": "text", "text": text}]}))
            return events

        first = update("one")
        clock.advance(1)
        second = update("two")

        assert [e.function_id for e in first + second] == [ev.ON_MESSAGE_UPDATED] * 2
        assert first[0].payload == {"session_id": sid, "entry_id": entry_id, "message": _text("one"),
                                    "revision": 1, "timestamp": 7_001}
        assert second[0].payload["revision"] == 2 and second[0].payload["message"] == _text("two")
        assert sm.call("session::get-message", {"session_id": sid, "entry_id": entry_id})["entry"]["revision"] == 2


def test_what_an_event_says_of_its_session_matches_its_payload_and_builds_nothing() -> None:
    # Prevents: the known-sessions record (KnownSessions.note, run on every commit of a SQL
    # store) building each append's deferred payload just to read two fields, or reading
    # from Event.about() a session or metadata other than the payload's.
    from session_manager.store.resync import KnownSessions

    entry = {"kind": "message", "id": "e1", "parent_id": None, "timestamp": 3, "revision": 2,
             "message": _text("hi")}
    for metadata in ({"tenant": "a"}, None):
        made = [ev.message_added("s1", entry, metadata), ev.message_updated("s1", entry, None, 4, metadata)]
        known = KnownSessions()
        known.load([{"session_id": "s1", "metadata": "before"}])
        known.note(made)
        assert all(e._payload is None for e in made)  # nothing built
        assert known.snapshot() == [{"session_id": "s1", "metadata": metadata}]
        for event in made:
            assert event.about() == (event.payload["session_id"], event.payload.get("session_metadata"))
    built = ev.Event(ev.ON_DELETED, {"session_id": "s2", "timestamp": 1})
    assert built.about() == ("s2", None)
