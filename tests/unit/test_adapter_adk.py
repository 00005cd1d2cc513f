"""The ADK session service keeps ADK's session contract (the behaviours ADK's own
contract suite holds every backend to, written here in our own tests), over
fs, fs through the aio manager, sqlite, and postgres."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="the adk extra is not installed")

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types

from session_manager.adapters._adk_codec import session_key, user_state_key
from tests.unit.adk_support import (
    Backend,
    store_fixture,  # noqa: F401 (the fixture "store")
)

APP = "weather"


def said(text: str, **kw: Any) -> Event:
    return Event(invocation_id="inv", author=kw.pop("author", "user"),
                 content=types.Content(role="user", parts=[types.Part(text=text)]), **kw)


def delta(**state: Any) -> Event:
    return Event(invocation_id="inv", author="agent", actions=EventActions(state_delta=state))


def test_create_get_delete_round_trip_and_restart(store: Backend) -> None:
    # Prevents: a created session reading back different (id, state, time), a delete that leaves
    # it readable, or a generated id that is empty.
    async def create(svc: Any) -> Session:
        made = await svc.create_session(app_name=APP, user_id="u1", state={"key": "value"})
        assert (made.app_name, made.user_id, made.state, made.events) == (APP, "u1", {"key": "value"}, [])
        assert made.id and made.last_update_time <= time.time()
        assert await svc.get_session(app_name=APP, user_id="u1", session_id=made.id) == made
        assert await svc.get_session(app_name=APP, user_id="u1", session_id="123") is None
        return made

    made = store.run(create)

    async def after_restart(svc: Any) -> None:
        assert await svc.get_session(app_name=APP, user_id="u1", session_id=made.id) == made
        await svc.delete_session(app_name=APP, user_id="u1", session_id=made.id)
        assert await svc.get_session(app_name=APP, user_id="u1", session_id=made.id) is None
        await svc.delete_session(app_name=APP, user_id="u1", session_id=made.id)  # absent: a no-op

    store.run(after_restart)


def test_ids_are_stripped_and_duplicates_refused(store: Backend) -> None:
    # Prevents: a padded id making a second session beside the trimmed one, a blank id stored
    # verbatim, or a duplicate create overwriting the first session's state.
    async def scenario(svc: Any) -> None:
        made = await svc.create_session(app_name=APP, user_id="u1", session_id="  s1  ", state={"keep": 1})
        assert made.id == "s1"
        with pytest.raises(AlreadyExistsError):
            await svc.create_session(app_name=APP, user_id="u1", session_id="s1", state={"keep": 2})
        with pytest.raises(AlreadyExistsError):
            await svc.create_session(app_name=APP, user_id="u1", session_id=" s1\n", state={"keep": 3})
        got = await svc.get_session(app_name=APP, user_id="u1", session_id=" s1 ")
        assert got is not None and got.state == {"keep": 1}
        blank = await svc.create_session(app_name=APP, user_id="u1", session_id="   ")
        assert blank.id.strip() == blank.id and blank.id
        await svc.delete_session(app_name=APP, user_id="u1", session_id="\ts1 ")
        assert await svc.get_session(app_name=APP, user_id="u1", session_id="s1") is None

    store.run(scenario)


def test_sessions_are_scoped_by_user_and_app(store: Backend) -> None:
    # Prevents: one user reading (or appending to) another user's session with the same id.
    async def scenario(svc: Any) -> None:
        mine = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
        await svc.append_event(mine, said("hello"))
        theirs = await svc.create_session(app_name=APP, user_id="u2", session_id="s1")
        assert theirs.events == []
        got = await svc.get_session(app_name=APP, user_id="u2", session_id="s1")
        assert got is not None and got.user_id == "u2" and got.events == []
        assert await svc.get_session(app_name="other", user_id="u1", session_id="s1") is None
        again = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert again is not None and [e.content for e in again.events] == [said("hello").content]

    store.run(scenario)


def test_list_sessions_one_user_or_all_oldest_update_first(store: Backend) -> None:
    # Prevents: listing another user's or app's sessions, events leaking into the listing,
    # session state missing from it, or an order other than by last update.
    async def scenario(svc: Any) -> None:
        for user, sid in (("u1", "a"), ("u1", "b"), ("u2", "c")):
            await svc.create_session(app_name=APP, user_id=user, session_id=sid, state={"key": "v" + sid})
        await svc.create_session(app_name="other", user_id="u1", session_id="x")
        a = await svc.get_session(app_name=APP, user_id="u1", session_id="a")
        await asyncio.sleep(0.01)
        await svc.append_event(a, said("newest", timestamp=time.time()))
        mine = (await svc.list_sessions(app_name=APP, user_id="u1")).sessions
        assert [(s.id, s.state, s.events) for s in mine] == [("b", {"key": "vb"}, []), ("a", {"key": "va"}, [])]
        assert mine[1].last_update_time == a.last_update_time
        everyone = (await svc.list_sessions(app_name=APP)).sessions
        assert [(s.user_id, s.id, s.state) for s in everyone] == [
            ("u1", "b", {"key": "vb"}), ("u2", "c", {"key": "vc"}), ("u1", "a", {"key": "va"})]
        assert (await svc.list_sessions(app_name=APP, user_id=None)).sessions == everyone
        assert (await svc.list_sessions(app_name=APP, user_id="nobody")).sessions == []
        assert (await svc.list_sessions(app_name="unknown")).sessions == []

    store.run(scenario)


def test_app_user_and_session_state_scopes(store: Backend) -> None:
    # Prevents: app: state not reaching other users, user: state reaching another user or app,
    # session state leaking into a sibling session.
    async def scenario(svc: Any) -> None:
        s1 = await svc.create_session(app_name=APP, user_id="u1", session_id="s1",
                                      state={"app:k1": "a1", "user:k1": "u1", "sk1": "s1"})
        await svc.append_event(s1, delta(**{"app:k2": "a2", "user:k2": "u2", "sk2": "s2"}))
        assert s1.state == {"app:k1": "a1", "app:k2": "a2", "user:k1": "u1", "user:k2": "u2",
                            "sk1": "s1", "sk2": "s2"}
        sibling = await svc.create_session(app_name=APP, user_id="u1", session_id="s1b")
        assert sibling.state == {"app:k1": "a1", "app:k2": "a2", "user:k1": "u1", "user:k2": "u2"}
        stranger = await svc.create_session(app_name=APP, user_id="u2", session_id="s2")
        assert stranger.state == {"app:k1": "a1", "app:k2": "a2"}
        elsewhere = await svc.create_session(app_name="other", user_id="u1", session_id="s3")
        assert elsewhere.state == {}
        got = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert got is not None and got.state == s1.state

    store.run(scenario)


def test_state_values_replace_keep_none_and_types(store: Backend) -> None:
    # Prevents: a dict delta deep-merged into the stored dict, a None delta deleting the key,
    # or an unrelated delta turning a stored boolean into something else.
    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u1", session_id="s1", state={
            "profile": {"name": "ada", "role": "admin"}, "flag": True, "off": False,
            "app:cfg": {"name": "ada", "role": "admin"}, "user:pref": "dark"})
        await svc.append_event(s, delta(profile={"name": "bob"}, flag=None, new_flag=True,
                                        **{"app:cfg": {"name": "bob"}, "user:pref": None}))
        expected = {"profile": {"name": "bob"}, "flag": None, "off": False, "new_flag": True,
                    "app:cfg": {"name": "bob"}, "user:pref": None}
        assert s.state == expected
        got = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert got is not None and got.state == expected and got.state["off"] is False
        other = await svc.create_session(app_name=APP, user_id="u1", session_id="s2")
        assert other.state == {"app:cfg": {"name": "bob"}, "user:pref": None}

    store.run(scenario)


def test_temp_state_lives_in_the_invocation_only(store: Backend) -> None:
    # Prevents: temp: keys persisted (in state or in the stored event), or hidden from the
    # next agent of the same invocation.
    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
        first = delta(**{"temp:out": "from a1", "sk": "v"})
        await svc.append_event(s, first)
        assert s.state == {"temp:out": "from a1", "sk": "v"}
        assert first.actions.state_delta == {"sk": "v"}
        got = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert got is not None and got.state == {"sk": "v"}
        assert got.events == [first]

    store.run(scenario)


def test_events_round_trip_exactly(store: Backend) -> None:
    # Prevents: any field of an event lost or changed on the way through the store (bytes,
    # sets, nested models, exact float timestamps), or the session time drifting from it.
    complete = Event(
        invocation_id="invocation", author="user",
        content=types.Content(role="user", parts=[types.Part(text="test_text")]),
        turn_complete=True, partial=False,
        actions=EventActions(artifact_delta={"file": 0}, transfer_to_agent="agent", escalate=True,
                             requested_tool_confirmations={"call_1": ToolConfirmation(
                                 hint="dynamic hint", confirmed=False, payload={"album": "a_1"})}),
        long_running_tool_ids={"tool1", "tool0"}, error_code="error_code", error_message="error_message",
        interrupted=True, grounding_metadata=types.GroundingMetadata(web_search_queries=["query1"]),
        usage_metadata=types.GenerateContentResponseUsageMetadata(prompt_token_count=1, total_token_count=2),
        citation_metadata=types.CitationMetadata(), custom_metadata={"custom_key": "custom_value"},
        timestamp=1700000000.123,
        input_transcription=types.Transcription(text="in", finished=True),
        output_transcription=types.Transcription(text="out", finished=True))
    blob = Event(invocation_id="invocation", author="user",
                 content=types.Content(role="user", parts=[types.Part.from_bytes(data=b"\x00\xffpng",
                                                                                 mime_type="image/png")]),
                 grounding_metadata=types.GroundingMetadata(
                     search_entry_point=types.SearchEntryPoint(sdk_blob=b"sdk\x00blob")),
                 timestamp=1700000001.5)

    async def scenario(svc: Any) -> Session:
        s = await svc.create_session(app_name=APP, user_id="u1")
        assert await svc.append_event(s, complete) is complete
        await svc.append_event(s, blob)
        assert s.last_update_time == blob.timestamp
        got = await svc.get_session(app_name=APP, user_id="u1", session_id=s.id)
        assert got == s and got.events == [complete, blob]
        return s

    s = store.run(scenario)

    async def after_restart(svc: Any) -> None:
        got = await svc.get_session(app_name=APP, user_id="u1", session_id=s.id)
        assert got == s and got.last_update_time == 1700000001.5

    store.run(after_restart)


def test_last_update_time_is_the_appended_events_exact_time(store: Backend) -> None:
    # Prevents: the session time taken from the store's clock (ms) instead of the event's
    # timestamp, or lost across a read; and events reordered by a local-time round trip.
    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u1")
        created = s.last_update_time
        await svc.append_event(s, said("later", timestamp=created + 10.000001))
        assert s.last_update_time == created + 10.000001
        got = await svc.get_session(app_name=APP, user_id="u1", session_id=s.id)
        assert got is not None and got.last_update_time == created + 10.000001
        repeated_hour = [1730613600.0, 1730615400.0]  # 01:00 and 01:30 US Eastern, the second time
        for stamp in repeated_hour:
            await svc.append_event(s, said("dst", timestamp=stamp))
        got = await svc.get_session(app_name=APP, user_id="u1", session_id=s.id)
        assert got is not None and [e.timestamp for e in got.events][1:] == repeated_hour

    old = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        store.run(scenario)
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()


def test_get_session_config_limits_events_not_state(store: Backend) -> None:
    # Prevents: num_recent_events or after_timestamp (inclusive) picking other events than ADK's
    # in-memory service, or a limited read returning a partial state.
    base = float(int(time.time()))

    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u1")
        for i in range(1, 6):
            await svc.append_event(s, Event(author="user", timestamp=base + i,
                                            actions=EventActions(state_delta={f"k{i}": i})))

        async def stamps(**config: Any) -> list[float]:
            got = await svc.get_session(app_name=APP, user_id="u1", session_id=s.id,
                                        config=GetSessionConfig(**config))
            assert got is not None and got.state == {f"k{i}": i for i in range(1, 6)}
            return [e.timestamp - base for e in got.events]

        assert await stamps() == [1, 2, 3, 4, 5]
        assert await stamps(num_recent_events=0) == []
        assert await stamps(num_recent_events=3) == [3, 4, 5]
        assert await stamps(after_timestamp=base + 4) == [4, 5]
        assert await stamps(after_timestamp=base + 50) == []
        assert await stamps(after_timestamp=base + 4, num_recent_events=3) == [4, 5]

    store.run(scenario)


def test_partial_and_unknown_session_events(store: Backend) -> None:
    # Prevents: a partial (streaming) event stored, or an append to a session that is not
    # stored creating one (or changing shared state) instead of SessionNotFoundError.
    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u1")
        await svc.append_event(s, Event(author="user", partial=True))
        assert s.events == []
        got = await svc.get_session(app_name=APP, user_id="u1", session_id=s.id)
        assert got is not None and got.events == []
        ghost = Session(app_name=APP, user_id="u1", id="never_created")
        with pytest.raises(SessionNotFoundError):
            await svc.append_event(ghost, delta(**{"user:x": 1, "app:y": 2}))
        assert ghost.events == [] and ghost.state == {}
        assert await svc.get_session(app_name=APP, user_id="u1", session_id="never_created") is None
        assert await svc.get_user_state(app_name=APP, user_id="u1") == {}
        await svc.delete_session(app_name=APP, user_id="u1", session_id=s.id)
        with pytest.raises(SessionNotFoundError):
            await svc.append_event(s, said("too late"))

    store.run(scenario)


def test_get_user_state(store: Backend) -> None:
    # Prevents: user state that is empty before a session exists, mixes in session keys,
    # leaks across users or apps, or reads an older write.
    async def scenario(svc: Any) -> None:
        assert await svc.get_user_state(app_name=APP, user_id="u1") == {}
        s = await svc.create_session(app_name=APP, user_id="u1")
        await svc.append_event(s, delta(**{"user:profile": {"name": "Alice"}, "session_key": 1, "user:n": 1}))
        await svc.append_event(s, delta(**{"user:n": 2}))
        assert await svc.get_user_state(app_name=APP, user_id="u1") == {"profile": {"name": "Alice"}, "n": 2}
        assert await svc.get_user_state(app_name=APP, user_id="u2") == {}
        assert await svc.get_user_state(app_name="other", user_id="u1") == {}

    store.run(scenario)


def test_redelivered_event_is_stored_once(store: Backend) -> None:
    # Prevents: a retried append_event (the same event, or an equal copy) stored twice or
    # applying its state twice; and distinct events that share an id being dropped.
    async def scenario(svc: Any) -> str:
        s = await svc.create_session(app_name=APP, user_id="u1")
        once = delta(**{"counter": 1, "user:seen": 1})
        for again in (once, once, once.model_copy(deep=True)):
            assert await svc.append_event(s, again) is again
        twin_a = Event(id="shared-id", invocation_id="a", author="user")
        twin_b = Event(id="shared-id", invocation_id="b", author="agent")
        await svc.append_event(s, twin_a)
        await svc.append_event(s, twin_b)
        got = await svc.get_session(app_name=APP, user_id="u1", session_id=s.id)
        assert got is not None and got.events == [once, twin_a, twin_b] == s.events
        user = await svc.get_user_state(app_name=APP, user_id="u1")
        assert user == {"seen": 1}
        return s.id

    sid = store.run(scenario)
    sm = store.open_sync()
    try:
        for key, count in ((session_key(APP, "u1", sid), 3), (user_state_key(APP, "u1"), 1)):
            page = sm.call("session::messages", {"session_id": key, "include_custom": True})
            assert len(page["messages"]) == count
    finally:
        sm.close()


def test_read_state_is_not_shared_with_read_events(store: Backend) -> None:
    # Prevents: a caller editing a read session's state in place and so changing the events
    # read with it (or the other way round).
    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u1")
        await svc.append_event(s, delta(profile={"name": "ada"}))
        got = await svc.get_session(app_name=APP, user_id="u1", session_id=s.id)
        assert got is not None
        got.state["profile"]["name"] = "mallory"
        assert got.events[0].actions.state_delta == {"profile": {"name": "ada"}}
        again = await svc.get_session(app_name=APP, user_id="u1", session_id=s.id)
        assert again is not None and again.state == {"profile": {"name": "ada"}}

    store.run(scenario)


def test_values_without_json_form_are_stored_as_text(store: Backend) -> None:
    # Prevents: a state value with no JSON form (a datetime, a callable) failing the write or
    # reading back as something other than what create_session returned.
    import datetime

    when = datetime.datetime(2026, 12, 6, 1, 2, 3, tzinfo=datetime.timezone.utc)

    async def scenario(svc: Any) -> None:
        made = await svc.create_session(app_name=APP, user_id="u1", state={"when": when, "pair": (1, 2)})
        assert made.state == {"when": "2026-12-06T01:02:03Z", "pair": [1, 2]}
        got = await svc.get_session(app_name=APP, user_id="u1", session_id=made.id)
        assert got is not None and got.state == made.state
        await svc.append_event(made, delta(fn=len))
        got = await svc.get_session(app_name=APP, user_id="u1", session_id=made.id)
        assert got is not None and isinstance(got.state["fn"], str) and len(got.events) == 1

    store.run(scenario)


def test_refused_event_changes_nothing(tmp_path: Path) -> None:
    # Prevents: an event the store refuses (past max_request_bytes) surfacing as a traceback
    # other than SessionError, or half-applied: in the caller's session or in shared state.
    import session_manager
    from session_manager.adapters.adk import SessionManagerSessionService
    from session_manager.errors import INVALID_REQUEST, SessionError

    async def scenario() -> None:
        with session_manager.open(tmp_path / "data", max_request_bytes=4096) as sm:
            svc = SessionManagerSessionService(sm)
            s = await svc.create_session(app_name=APP, user_id="u1")
            with pytest.raises(SessionError) as refused:
                await svc.append_event(s, said("x" * 10_000, actions=EventActions(state_delta={"user:k": 1})))
            assert refused.value.code == INVALID_REQUEST
            assert s.events == [] and s.state == {}
            got = await svc.get_session(app_name=APP, user_id="u1", session_id=s.id)
            assert got is not None and got.events == [] and got.state == {}
            assert await svc.get_user_state(app_name=APP, user_id="u1") == {}

    asyncio.run(scenario())
