"""Attacks on the ADK session service's contract (issue 29, review 6): cancellation,
retries, unusual values, ADK's in-memory semantics at the edges, restarts and
appends from several processes, over fs, fs through the aio manager, sqlite and
postgres. The LangGraph and transcript adapters' attacks are in
``test_adapter_attacks_review6_langgraph.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="the adk extra is not installed")

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.in_memory_session_service import InMemorySessionService
from google.genai import types

from session_manager import SessionError
from session_manager.adapters._adk_codec import session_key, user_state_key
from session_manager.adapters.adk import SessionManagerSessionService
from session_manager.errors import STORAGE
from tests.unit.adk_support import (
    Backend,
    backend,
    store_fixture,  # noqa: F401 (the fixture "store")
)
from tests.unit.attack_support import Held, cancel_twice_while_held, run_spawned

APP = "attack"


def said(text: str, author: str = "user", **state: Any) -> Event:
    role = "user" if author == "user" else "model"
    return Event(invocation_id="inv", author=author, actions=EventActions(state_delta=state),
                 content=types.Content(role=role, parts=[types.Part(text=text)]))


async def cancel_twice_holding(svc: Any, function_id: str, start: Callable[[], Any]) -> list[bool]:
    """:func:`cancel_twice_while_held` with the service's store calls of ``function_id`` held
    (its ``_call`` put back afterwards)."""
    held = Held(svc, function_id, "_call")
    try:
        return await cancel_twice_while_held(held, start)
    finally:
        held.restore()


# -- cancellation -------------------------------------------------------------------------


def test_twice_cancelled_append_event_has_landed_and_shows_when_cancelled_error_is_seen(store: Backend) -> None:
    # Prevents: a second cancellation (a TaskGroup's cancel, then a timeout) surfacing
    # CancelledError while the event is still being written: the event then lands unannounced
    # and the caller's session never shows it (a retry would store it twice).
    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u", session_id="c")
        event = said("cancel me twice", k=1)
        assert await cancel_twice_holding(svc, "session::append", lambda: svc.append_event(s, event)) == [True]
        got = await svc.get_session(app_name=APP, user_id="u", session_id="c")
        assert got is not None and got.events == [event] and s.events == [event]
        assert s.state == got.state == {"k": 1}

    store.run(scenario)


def test_twice_cancelled_create_and_delete_have_settled_when_cancelled_error_is_seen(store: Backend) -> None:
    # Prevents: create_session / delete_session raising CancelledError (on a second
    # cancellation) before their write settled: the session appears, or disappears, later.
    async def scenario(svc: Any) -> None:
        assert await cancel_twice_holding(
            svc, "session::ensure", lambda: svc.create_session(app_name=APP, user_id="u", session_id="made")) == [True]
        assert await svc.get_session(app_name=APP, user_id="u", session_id="made") is not None
        assert await cancel_twice_holding(
            svc, "session::delete", lambda: svc.delete_session(app_name=APP, user_id="u", session_id="made")) == [True]
        assert await svc.get_session(app_name=APP, user_id="u", session_id="made") is None

    store.run(scenario)


# -- retries and re-deliveries (ADK's in-memory service dedupes against what it stored) ----


def test_retry_after_an_append_that_landed_but_failed_stores_the_event_once(store: Backend) -> None:
    # Prevents: an append_event whose event landed but whose call then failed (the shared
    # state write after it refused, a connection lost after the commit) stored a second time
    # when the caller retries it, and the shared state never written.
    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u", session_id="r")
        real = svc._call
        failed: list[str] = []

        def flaky(fid: str, payload: Any) -> Any:
            if fid == "session::append" and payload["session_id"] != session_key(APP, "u", "r") and not failed:
                failed.append(fid)
                raise SessionError(STORAGE, "injected: the shared state write failed")
            return real(fid, payload)

        svc._call = flaky
        event = said("once", k=1, **{"app:a": 1, "user:b": 2})
        with pytest.raises(SessionError):
            await svc.append_event(s, event)
        assert failed
        await svc.append_event(s, event)  # the caller's retry
        got = await svc.get_session(app_name=APP, user_id="u", session_id="r")
        assert got is not None and got.events == [event]
        assert got.state == {"k": 1, "app:a": 1, "user:b": 2}

    store.run(scenario)


def test_redelivery_through_a_stale_copy_is_stored_once_and_changes_no_state(store: Backend) -> None:
    # Prevents: an equal event re-delivered through another (stale) copy of the session stored
    # again, or its (old) state delta applied again over newer values, where ADK's in-memory
    # service returns it untouched; while distinct events that share an id are both kept.
    async def scenario(svc: Any) -> tuple[Any, ...]:
        s = await svc.create_session(app_name=APP, user_id="u", session_id="d")
        stale = await svc.get_session(app_name=APP, user_id="u", session_id="d")
        first = said("first", k=1, **{"app:a": 1, "user:b": 1})
        await svc.append_event(s, first)
        await svc.append_event(s, said("second", k=2, **{"app:a": 2, "user:b": 2}))
        again = first.model_copy(deep=True)
        assert await svc.append_event(stale, again) is again
        twin = said("twin")
        twin.id = first.id  # another event that merely shares the id: kept
        await svc.append_event(s, twin)
        got = await svc.get_session(app_name=APP, user_id="u", session_id="d")
        assert got is not None
        return [e.content.parts[0].text for e in got.events], got.state

    ours = store.run(scenario)
    assert ours == asyncio.run(scenario(InMemorySessionService()))
    assert ours[0] == ["first", "second", "twin"]


# -- values -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 10**40])
def test_an_integer_beyond_64_bits_in_state_is_kept_and_reads_never_break(store: Backend, value: int) -> None:
    # Prevents: an int outside 64 bits (a 128-bit id kept as an int) stored in the event and
    # the state, after which every read of the session, the user's state and the app's
    # listing fails with "Integer exceeds 64-bit range" (the session bricked for good).
    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u", session_id="big", state={"start": value})
        event = said("big", plain=value, **{"user:u": value, "app:a": [value]})
        await svc.append_event(s, event)
        got = await svc.get_session(app_name=APP, user_id="u", session_id="big")
        assert got is not None and got.events == [event]
        assert got.state == {"start": value, "plain": value, "user:u": value, "app:a": [value]}
        assert await svc.get_user_state(app_name=APP, user_id="u") == {"u": value}
        listed = await svc.list_sessions(app_name=APP)
        assert [x.state for x in listed.sessions] == [got.state]

    async def after_restart(svc: Any) -> None:
        got = await svc.get_session(app_name=APP, user_id="u", session_id="big")
        assert got is not None and got.state["plain"] == value and got.events[0].actions.state_delta["plain"] == value

    store.run(scenario)
    store.run(after_restart)


def test_odd_but_json_values_round_trip_exactly(store: Backend) -> None:
    # Prevents: non-ASCII text (astral planes, combining marks, RTL, NUL), huge / tiny / negative-zero
    # floats, nested custom_metadata, and raw bytes changed on the way through the store, on a
    # text event (stored as a message) and on one without text (a custom entry).
    odd = "z\u0000\u00e9\u0301 \u05e9\u05dc\u05d5\u05dd \U0001f600 \U0010fffd \u2028\ufeff"
    meta = {"nested": {"list": [1e308, -0.0, 5e-324, -1.5, 2**63 - 1, -(2**63), None, True, odd],
                       "deep": {"a": {"b": {"c": [{"d": odd}]}}}}, odd: odd}
    text_event = said(odd, **{odd: odd, "f": 1e308, "z": -0.0, "n": None})
    text_event.custom_metadata = meta
    blob = Event(invocation_id="inv", author="agent", custom_metadata=meta, content=types.Content(
        role="model", parts=[types.Part.from_bytes(data=bytes(range(256)), mime_type="application/octet-stream")]))

    async def scenario(svc: Any) -> Any:
        s = await svc.create_session(app_name=APP, user_id="u", session_id="odd", state={"nz": -0.0})
        await svc.append_event(s, text_event)
        await svc.append_event(s, blob)
        got = await svc.get_session(app_name=APP, user_id="u", session_id="odd")
        assert got is not None and got.events == [text_event, blob] and got == s
        return got

    got = store.run(scenario)

    async def after_restart(svc: Any) -> None:
        again = await svc.get_session(app_name=APP, user_id="u", session_id="odd")
        assert again == got
        assert str(again.state["z"]) == "-0.0" and str(again.state["nz"]) == "-0.0" and again.state[odd] == odd
        assert again.events[1].content.parts[0].inline_data.data == bytes(range(256))

    store.run(after_restart)


def test_an_events_timestamp_far_in_the_future_still_stores(store: Backend) -> None:
    # Prevents: an event with text whose timestamp is huge (1e306 s) failing the append with
    # OverflowError (its message time in ms computed from it), where every other store keeps it.
    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u", session_id="far")
        event = said("far away")
        event.timestamp = 1e306
        await svc.append_event(s, event)
        got = await svc.get_session(app_name=APP, user_id="u", session_id="far")
        assert got is not None and got.events == [event] and got.last_update_time == 1e306

    store.run(scenario)


# -- ADK's in-memory service at the edges ---------------------------------------------------


def test_state_scopes_temp_and_none_match_the_in_memory_service(store: Backend) -> None:
    # Prevents: temp: keys persisted (in the state, or inside a stored event), None not stored,
    # app: state not shared by another user, user: state leaking to another user, or an initial
    # create state with temp: keys kept.
    async def scenario(svc: Any) -> Any:
        a = await svc.create_session(app_name=APP, user_id="u1", session_id="s",
                                     state={"temp:t0": 1, "p": 0, "app:x": 0, "user:y": 0})
        b = await svc.create_session(app_name=APP, user_id="u2", session_id="s")
        await svc.append_event(a, said("one", **{"temp:t": 1, "p": None, "app:x": None, "user:y": {"n": None}}))
        await svc.append_event(b, said("two", **{"app:x": [1, 2], "user:y": "two", "temp:t": 2}))
        await svc.append_event(a, said("three", **{"app:later": 1}))
        out = []
        for user in ("u1", "u2"):
            got = await svc.get_session(app_name=APP, user_id=user, session_id="s")
            out.append((got.state, [e.actions.state_delta for e in got.events]))
        out.append(await svc.get_user_state(app_name=APP, user_id="u1"))
        out.append(a.state)  # the caller's copy: temp: keys kept for the invocation, as ADK does
        return out

    ours = store.run(scenario)
    assert ours == asyncio.run(scenario(InMemorySessionService()))
    assert all("temp:" not in k for state, deltas in ours[:2] for d in [state, *deltas] for k in d)


def test_get_session_config_edges_match_the_in_memory_service(store: Backend) -> None:
    # Prevents: num_recent_events=0 / larger than the session / negative-free edges, or an
    # after_timestamp equal to several events' time (inclusive) or between them, picking other
    # events than ADK's in-memory service.
    stamps = [100.0, 200.0, 200.0, 200.0, 300.0, 300.0]
    configs = [GetSessionConfig(num_recent_events=n) for n in (0, 1, 3, 6, 50)]
    configs += [GetSessionConfig(after_timestamp=t) for t in (0.0, 99.9, 100.0, 200.0, 250.0, 300.0, 300.1)]
    configs += [GetSessionConfig(num_recent_events=n, after_timestamp=t) for n in (0, 2, 5) for t in (200.0, 300.0)]

    async def scenario(svc: Any) -> Any:
        s = await svc.create_session(app_name=APP, user_id="u", session_id="cfg")
        for i, stamp in enumerate(stamps):
            event = said(f"#{i}", **{f"k{i}": i})
            event.timestamp = stamp
            await svc.append_event(s, event)
        out = []
        for config in configs:
            got = await svc.get_session(app_name=APP, user_id="u", session_id="cfg", config=config)
            out.append(([e.content.parts[0].text for e in got.events], got.state, got.last_update_time))
        return out

    assert store.run(scenario) == asyncio.run(scenario(InMemorySessionService()))


def test_listing_order_scoping_and_recreated_ids_match_the_in_memory_service(store: Backend) -> None:
    # Prevents: list_sessions not ordered by last update (ties by user, then id), another app's
    # sessions listed, events or temp state in the listing, or a session deleted and created
    # again with its id carrying the old events or state.
    async def scenario(svc: Any) -> Any:
        made = {}
        for user, sid, stamp in [("u2", "b", 50.0), ("u1", "c", 10.0), ("u1", "a", 50.0), ("u2", "a", 5.0)]:
            made[(user, sid)] = await svc.create_session(app_name=APP, user_id=user, session_id=sid,
                                                         state={"who": user + sid})
            event = said(f"{user}{sid}", **{"n": stamp})
            event.timestamp = stamp
            await svc.append_event(made[(user, sid)], event)
        await svc.create_session(app_name="other", user_id="u1", session_id="z")
        await svc.delete_session(app_name=APP, user_id="u2", session_id="b")
        await svc.delete_session(app_name=APP, user_id="nobody", session_id="none")  # a no-op
        again = await svc.create_session(app_name=APP, user_id="u2", session_id="b", state={"fresh": True})
        out: list[Any] = [again.events, sorted(again.state.items())]
        for user in (None, "u1", "u2", "nobody"):
            listed = await svc.list_sessions(app_name=APP, user_id=user)
            out.append([(x.user_id, x.id, x.events, x.state) for x in listed.sessions])
        with pytest.raises(AlreadyExistsError):
            await svc.create_session(app_name=APP, user_id="u2", session_id=" b ")
        return out

    ours = store.run(scenario)
    theirs = asyncio.run(scenario(InMemorySessionService()))
    assert ours[:2] == theirs[:2]
    for mine, ref in zip(ours[2:], theirs[2:], strict=True):
        # The recreated session's time is its creation time: now, on both; compare the order of
        # the rest and the contents.
        assert sorted(mine) == sorted(ref)
        assert [x[:2] for x in mine if x[:2] != ("u2", "b")] == [x[:2] for x in ref if x[:2] != ("u2", "b")]


def test_fork_at_every_event_then_writes_to_both(store: Backend) -> None:
    # Prevents: a fork that carries too much, too little, or the wrong state; a write to the fork
    # reaching the source or back; a fork lost over a restart.
    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u", session_id="src", state={"init": 0})
        events = [said(f"#{i}", **{"k": i, f"only{i}": i}) for i in range(3)]
        events.insert(1, Event(invocation_id="inv", author="agent", actions=EventActions(state_delta={"mid": 1})))
        for e in events:
            await svc.append_event(s, e)
        for i, e in enumerate(events):
            fork = await svc.fork_session(app_name=APP, user_id="u", session_id="src", event_id=e.id,
                                          new_session_id=f"f{i}")
            assert fork.events == events[: i + 1]
            expected: dict[str, Any] = {"init": 0}
            for kept in events[: i + 1]:
                expected.update(kept.actions.state_delta)
            assert fork.state == expected
            await svc.append_event(fork, said("fork only", k=100 + i))
        await svc.append_event(s, said("source only", k=-1))

    async def after_restart(svc: Any) -> None:
        src = await svc.get_session(app_name=APP, user_id="u", session_id="src")
        assert src is not None and [e.content.parts[0].text if e.content else None for e in src.events] == [
            "#0", None, "#1", "#2", "source only"] and src.state["k"] == -1
        for i in range(4):
            fork = await svc.get_session(app_name=APP, user_id="u", session_id=f"f{i}")
            assert fork is not None and len(fork.events) == i + 2 and fork.state["k"] == 100 + i

    store.run(scenario)
    store.run(after_restart)


# -- several processes on one session --------------------------------------------------------


def _append_in_process(kind: str, where: str, worker: int, count: int, start: Any) -> None:
    """A child process: ``count`` events on the shared session through its own store."""
    backend_ = Backend(kind, Path(where), where if kind == "postgres" else None)

    async def scenario(svc: Any) -> None:
        stale = await svc.get_session(app_name="race", user_id="u", session_id="shared")
        start.wait(60)
        for j in range(count):
            state = {f"k{worker}_{j}": j, f"user:u{worker}_{j}": j, f"app:a{worker}_{j}": j,
                     "last": [worker, j], "temp:t": j, f"none{worker}": None}
            await svc.append_event(stale, said(f"w{worker} #{j}", **state))

    backend_.run(scenario)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_appends_from_several_processes_lose_no_event_and_no_key(kind: str, tmp_path: Path) -> None:
    # Prevents: events or app: / user: / plain keys lost when processes holding stale copies of
    # one session append at once (over sqlite's file lock and postgres; an fs data dir has one
    # writing process), a temp: key persisted, or a None value dropped.
    workers, count = 3, 12
    with backend(kind, tmp_path) as b:
        where = b.schema if kind == "postgres" else str(b.data_dir)

        async def create(svc: Any) -> None:
            await svc.create_session(app_name="race", user_id="u", session_id="shared")

        b.run(create)
        assert run_spawned(_append_in_process, [(kind, where, w, count) for w in range(workers)]) == [0] * workers

        async def check(svc: Any) -> None:
            got = await svc.get_session(app_name="race", user_id="u", session_id="shared")
            assert got is not None and len(got.events) == workers * count
            for w in range(workers):
                assert [e.content.parts[0].text for e in got.events if e.content.parts[0].text.startswith(f"w{w} ")] \
                    == [f"w{w} #{j}" for j in range(count)]
            keys = {f"{p}{w}_{j}" for w in range(workers) for j in range(count) for p in ("k", "user:u", "app:a")}
            assert set(got.state) == keys | {"last"} | {f"none{w}" for w in range(workers)}
            assert all(got.state[f"none{w}"] is None for w in range(workers))
            # "last" is the delta of the session's last event: the plain keys fold in log order.
            assert got.state["last"] == got.events[-1].actions.state_delta["last"]
            assert all("temp:t" not in e.actions.state_delta for e in got.events)
            user = await svc.get_user_state(app_name="race", user_id="u")
            assert user == {f"u{w}_{j}": j for w in range(workers) for j in range(count)}

        b.run(check)


# -- paging: every read goes past one page of the store --------------------------------------


def test_reads_page_through_the_store_as_the_in_memory_service(tmp_path: Path) -> None:
    # Prevents: get_session / list_sessions / get_user_state / fork_session reading only the
    # store's first page of entries or sessions (a store whose max_list_limit is small).
    import session_manager

    async def scenario(svc: Any) -> Any:
        out: list[Any] = []
        for u in range(2):
            for i in range(4):
                s = await svc.create_session(app_name=APP, user_id=f"u{u}", session_id=f"s{i}", state={"i": i})
                for j in range(5):
                    event = said(f"{u}/{i}/{j}", **{"k": j, f"user:{i}_{j}": j, f"app:{u}_{i}_{j}": j})
                    event.timestamp = 1000.0 + 100 * i + 10 * u + j
                    await svc.append_event(s, event)
        fork = await svc.fork_session(app_name=APP, user_id="u1", session_id="s2", new_session_id="fork") \
            if isinstance(svc, SessionManagerSessionService) else None
        for config in (None, GetSessionConfig(num_recent_events=3), GetSessionConfig(after_timestamp=1212.0)):
            got = await svc.get_session(app_name=APP, user_id="u1", session_id="s2", config=config)
            out.append(([e.content.parts[0].text for e in got.events], got.state, got.last_update_time))
            if fork is not None and config is None:
                assert [e.content.parts[0].text for e in fork.events] == out[-1][0]
        for user in (None, "u0"):
            listed = await svc.list_sessions(app_name=APP, user_id=user)
            out.append([(x.user_id, x.id, x.state, x.last_update_time) for x in listed.sessions
                        if x.id != "fork"])
        out.append(await svc.get_user_state(app_name=APP, user_id="u1"))
        return out

    async def ours() -> Any:
        with session_manager.open(tmp_path / "d", max_list_limit=2) as sm:
            return await scenario(SessionManagerSessionService(sm))

    assert asyncio.run(ours()) == asyncio.run(scenario(InMemorySessionService()))


def test_one_event_appended_twice_at_once_is_stored_and_shown_once(store: Backend) -> None:
    # Prevents: two overlapping append_event calls with the same event on one session object
    # (a retry racing the first try) storing it twice, or the caller's session listing it twice.
    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u", session_id="twice")
        event = said("once", k=1, **{"app:a": 1})
        results = await asyncio.gather(svc.append_event(s, event), svc.append_event(s, event))
        assert results == [event, event]
        assert s.events == [event]
        got = await svc.get_session(app_name=APP, user_id="u", session_id="twice")
        assert got is not None and got.events == [event] and got.state == {"k": 1, "app:a": 1}

    store.run(scenario)


def test_floats_json_lacks_read_back_as_none_as_documented(store: Backend) -> None:
    # Prevents: inf / nan failing an append or a read, or reading back as anything but what
    # docs/adk.md says (None: pydantic's JSON form of them), in state and in an event.
    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u", session_id="inf", state={"c": float("inf")})
        event = said("inf", p=float("nan"), **{"user:q": float("-inf")})
        event.custom_metadata = {"m": [float("inf")]}
        await svc.append_event(s, event)
        got = await svc.get_session(app_name=APP, user_id="u", session_id="inf")
        assert got is not None and got.state == {"c": None, "p": None, "user:q": None}
        assert got.events[0].custom_metadata == {"m": [None]}
        assert got.events[0].model_copy(update={"custom_metadata": event.custom_metadata,
                                                "actions": event.actions}) == event

    store.run(scenario)


def test_an_event_appended_again_after_delete_and_recreate_is_stored(store: Backend) -> None:
    # Prevents: the replay by entry id finding the deleted session's entry (a stale index of
    # entry ids) and so storing nothing in the session created again with the same id.
    async def scenario(svc: Any) -> None:
        event = said("again", k=1, **{"user:u": 1})
        first = await svc.create_session(app_name=APP, user_id="u", session_id="phoenix")
        await svc.append_event(first, event)
        await svc.delete_session(app_name=APP, user_id="u", session_id="phoenix")
        second = await svc.create_session(app_name=APP, user_id="u", session_id="phoenix")
        await svc.append_event(second, event)
        got = await svc.get_session(app_name=APP, user_id="u", session_id="phoenix")
        assert got is not None and got.events == [event] and got.state == {"k": 1, "user:u": 1}

    async def after_restart(svc: Any) -> None:
        got = await svc.get_session(app_name=APP, user_id="u", session_id="phoenix")
        assert got is not None and [e.content.parts[0].text for e in got.events] == ["again"]

    store.run(scenario)
    store.run(after_restart)


def test_an_event_appended_again_after_re_create_applies_its_shared_delta_again(store: Backend) -> None:
    # Prevents: the shared-state delta of an event appended again to a session deleted and
    # created again (a new session that does not hold it) taken for a replay of the deleted
    # session's delta, so newer user: / app: values are not replaced, where ADK's in-memory
    # service applies it.
    async def scenario(svc: Any) -> Any:
        event = said("again", **{"user:u": 1, "app:a": 1})
        first = await svc.create_session(app_name=APP, user_id="u", session_id="phoenix")
        await svc.append_event(first, event)
        await svc.delete_session(app_name=APP, user_id="u", session_id="phoenix")
        other = await svc.create_session(app_name=APP, user_id="u", session_id="other")
        await svc.append_event(other, said("newer", **{"user:u": 5, "app:a": 5}))
        second = await svc.create_session(app_name=APP, user_id="u", session_id="phoenix")
        await svc.append_event(second, event)
        got = await svc.get_session(app_name=APP, user_id="u", session_id="phoenix")
        return got.state, [e.content.parts[0].text for e in got.events]

    ours = store.run(scenario)
    assert ours == asyncio.run(scenario(InMemorySessionService()))
    assert ours[0] == {"user:u": 1, "app:a": 1}


def _redeliver_in_process(kind: str, where: str, payloads: list[str], start: Any) -> None:
    """A child process: append every event (JSON) to the shared session, through a stale copy."""
    backend_ = Backend(kind, Path(where), where if kind == "postgres" else None)

    async def scenario(svc: Any) -> None:
        stale = await svc.get_session(app_name="race", user_id="u", session_id="dup")
        start.wait(60)
        for payload in payloads:
            await svc.append_event(stale, Event.model_validate_json(payload))

    backend_.run(scenario)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_one_event_redelivered_by_several_processes_at_once_is_stored_once(kind: str, tmp_path: Path) -> None:
    # Prevents: the replay check (an entry with the event's id exists?) racing between
    # processes: an event re-delivered by three processes at once stored twice, or one of them
    # failing on the duplicate entry id; its user: delta applied more than once.
    events = [said(f"#{i}", **{f"k{i}": i, "user:n": i}) for i in range(15)]
    payloads = [e.model_dump_json() for e in events]
    with backend(kind, tmp_path) as b:
        where = b.schema if kind == "postgres" else str(b.data_dir)

        async def create(svc: Any) -> None:
            await svc.create_session(app_name="race", user_id="u", session_id="dup")

        b.run(create)
        assert run_spawned(_redeliver_in_process, [(kind, where, payloads) for _ in range(3)]) == [0, 0, 0]

        async def check(svc: Any) -> None:
            got = await svc.get_session(app_name="race", user_id="u", session_id="dup")
            assert got is not None and got.events == events
            assert got.state == {**{f"k{i}": i for i in range(15)}, "user:n": 14}
            sm = svc._sm
            deltas = sm.call("session::messages", {"session_id": user_state_key("race", "u"),
                                                   "include_custom": True, "limit": 1000})["messages"]
            assert len(deltas) == 15

        b.run(check)
