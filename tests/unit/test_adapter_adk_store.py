"""What the ADK session service adds to ADK's contract: the layout our own tools
read, fork_session, cancellation, and appends from several threads and
processes with no event lost."""

from __future__ import annotations

import asyncio
import multiprocessing
import re
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="the adk extra is not installed")

from google.adk.agents import LlmAgent
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

from session_manager.adapters._adk_codec import app_state_key, session_key, user_state_key
from session_manager.adapters.adk import SessionManagerSessionService
from tests import pg_support
from tests.unit.adk_support import (
    Backend,
    append_from_process,
    session_manager_open,
    store_fixture,  # noqa: F401 (the fixture "store")
)

APP = "weather"
ROOT = Path(__file__).resolve().parents[2]


def text_event(author: str, text: str, **state: Any) -> Event:
    role = "user" if author == "user" else "model"
    return Event(invocation_id="inv", author=author, actions=EventActions(state_delta=state),
                 content=types.Content(role=role, parts=[types.Part(text=text)]))


class ScriptedModel(BaseLlm):
    """An ADK model that answers from a script and records what each turn was sent."""

    script: list[types.Content] = []
    seen: list[list[str | None]] = []

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncIterator[LlmResponse]:
        self.seen.append([c.role for c in llm_request.contents])
        yield LlmResponse(content=self.script.pop(0))


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def test_runner_turns_persist_and_resume_after_restart(store: Backend) -> None:
    # Prevents: a real ADK Runner failing on the service, a tool round trip not stored, or a
    # later turn (after a restart) not seeing the earlier turns' events and state.
    model = ScriptedModel(model="scripted", script=[
        types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(
            name="get_weather", args={"city": "Paris"}))]),
        types.Content(role="model", parts=[types.Part(text="It is sunny.")]),
        types.Content(role="model", parts=[types.Part(text="Bye.")])])
    agent = LlmAgent(name="forecaster", model=model, tools=[get_weather], output_key="last_answer")

    def ask(text: str) -> types.Content:
        return types.Content(role="user", parts=[types.Part(text=text)])

    async def first(svc: Any) -> None:
        await svc.create_session(app_name=APP, user_id="u1", session_id="chat")
        runner = Runner(agent=agent, app_name=APP, session_service=svc)
        out = [e async for e in runner.run_async(user_id="u1", session_id="chat", new_message=ask("Paris?"))]
        assert [e.content.parts[0].text for e in out if e.content] == [None, None, "It is sunny."]

    async def second(svc: Any) -> Any:
        runner = Runner(agent=agent, app_name=APP, session_service=svc)
        out = [e async for e in runner.run_async(user_id="u1", session_id="chat", new_message=ask("Thanks"))]
        assert [e.content.parts[0].text for e in out if e.content] == ["Bye."]
        return await svc.get_session(app_name=APP, user_id="u1", session_id="chat")

    store.run(first)
    got = store.run(second)
    assert model.seen[-1] == ["user", "model", "user", "model", "user"]  # the whole history, after a restart
    assert [e.author for e in got.events] == ["user", "forecaster", "forecaster", "forecaster", "user", "forecaster"]
    assert got.events[1].get_function_calls()[0].args == {"city": "Paris"}
    assert got.events[2].get_function_responses()[0].response == {"result": "sunny in Paris"}
    assert got.state == {"last_answer": "Bye."}
    sm = store.open_sync()
    try:
        texts = sm.call("session::messages", {"session_id": session_key(APP, "u1", "chat")})["messages"]
        assert [(t["message"]["role"], t["message"]["content"][0]["text"]) for t in texts] == [
            ("user", "Paris?"), ("assistant", "It is sunny."), ("user", "Thanks"), ("assistant", "Bye.")]
    finally:
        sm.close()


def test_layout_is_ordinary_sessions_and_messages(store: Backend) -> None:
    # Prevents: ADK data our tools cannot see: text events stored opaquely (not as user /
    # assistant messages), sessions without app and user in metadata (no tenant filter), or
    # shared state nowhere a reader finds it.
    call = Event(invocation_id="inv", author="helper", content=types.Content(role="model", parts=[
        types.Part(function_call=types.FunctionCall(id="c1", name="get_weather", args={"city": "Paris"}))]))

    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u1", session_id="chat", state={"app:units": "C"})
        await svc.append_event(s, text_event("user", "Rain in Paris?", **{"user:city": "Paris"}))
        await svc.append_event(s, call)
        await svc.append_event(s, text_event("helper", "Light rain."))

    store.run(scenario)
    sm = store.open_sync()
    try:
        key = session_key(APP, "u1", "chat")
        listed = sm.call("session::list", {"metadata": {"app_name": APP, "user_id": "u1"}})["sessions"]
        assert sorted(m["session_id"] for m in listed) == sorted([key, user_state_key(APP, "u1")])
        meta = sm.call("session::get", {"session_id": key})["meta"]["metadata"]
        assert (meta["adk_kind"], meta["adk_session_id"], meta["adk_state"]) == ("session", "chat", {})
        items = sm.call("session::messages", {"session_id": key, "include_custom": True})["messages"]
        assert [i["message"]["content"] for i in items if "message" in i] == [
            [{"type": "text", "text": "Rain in Paris?"}], [{"type": "text", "text": "Light rain."}]]
        assert [i["message"]["role"] for i in items if "message" in i] == ["user", "assistant"]
        assert items[0]["origin"]["adk"]["event"]["content"]["parts"] == [{"text": "Rain in Paris?"}]
        assert items[1]["custom"]["custom_type"] == "adk.event"
        assert items[1]["custom"]["data"]["id"] == call.id
        texts = sm.call("session::messages", {"session_id": key, "roles": ["assistant"]})["messages"]
        assert [t["message"]["content"][0]["text"] for t in texts] == ["Light rain."]
        for state_key, shared in ((app_state_key(APP), {"units": "C"}), (user_state_key(APP, "u1"), {"city": "Paris"})):
            entries = sm.call("session::messages", {"session_id": state_key, "include_custom": True})["messages"]
            assert [e["custom"] for e in entries] == [{"custom_type": "adk.state", "data": {"delta": shared}}]
            stored = sm.call("session::get-message", {"session_id": state_key, "entry_id": entries[0]["entry_id"]})
            assert stored["entry"]["origin"] == {"adk": {"session_id": "chat"}}
    finally:
        sm.close()


def test_fork_session_at_any_event(store: Backend) -> None:
    # Prevents: a fork that copies too much or too little, carries the wrong session state,
    # changes the source, or is lost after a restart; and silent forks of absent sessions.
    async def scenario(svc: Any) -> list[Event]:
        s = await svc.create_session(app_name=APP, user_id="u1", session_id="src", state={"n": 0})
        events = [text_event("user", f"turn {i}", n=i) for i in range(1, 4)]
        for e in events:
            await svc.append_event(s, e)
        fork = await svc.fork_session(app_name=APP, user_id="u1", session_id="src", event_id=events[1].id,
                                      new_session_id=" alt ")
        assert (fork.id, fork.events, fork.state) == ("alt", events[:2], {"n": 2})
        await svc.append_event(fork, text_event("user", "other way", n=9))
        src = await svc.get_session(app_name=APP, user_id="u1", session_id="src")
        assert src is not None and src.events == events and src.state == {"n": 3}
        whole = await svc.fork_session(app_name=APP, user_id="u1", session_id="src")
        assert whole.id and whole.id not in ("src", "alt") and whole.events == events
        with pytest.raises(AlreadyExistsError):
            await svc.fork_session(app_name=APP, user_id="u1", session_id="src", new_session_id="alt")
        with pytest.raises(SessionNotFoundError):
            await svc.fork_session(app_name=APP, user_id="u1", session_id="src", event_id="nope")
        with pytest.raises(SessionNotFoundError):
            await svc.fork_session(app_name=APP, user_id="u2", session_id="src")
        listed = (await svc.list_sessions(app_name=APP, user_id="u1")).sessions
        assert sorted(x.id for x in listed) == sorted(["src", "alt", whole.id])
        return events

    events = store.run(scenario)

    async def after_restart(svc: Any) -> None:
        fork = await svc.get_session(app_name=APP, user_id="u1", session_id="alt")
        assert fork is not None and fork.events[:2] == events[:2] and len(fork.events) == 3
        assert fork.state == {"n": 9}

    store.run(after_restart)


def test_cancelled_append_waits_for_its_write(store: Backend) -> None:
    # Prevents: CancelledError surfacing while the write is still in flight (the event then
    # appears later, unannounced), or the caller's session missing an event that was stored.
    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u1", session_id="c")
        started = threading.Event()
        original = svc._call

        def slow(function_id: str, payload: Any) -> Any:
            if function_id == "session::append":
                started.set()
                time.sleep(0.3)
            return original(function_id, payload)

        svc._call = slow
        event = text_event("user", "cancel me", k=1)
        task = asyncio.ensure_future(svc.append_event(s, event))
        await asyncio.to_thread(started.wait)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        svc._call = original
        got = await svc.get_session(app_name=APP, user_id="u1", session_id="c")
        assert got is not None and got.events == [event] and s.events == [event]
        assert s.state == got.state == {"k": 1}

    store.run(scenario)


def test_concurrent_appends_from_threads_lose_nothing(store: Backend) -> None:
    # Prevents: lost or duplicated events, or lost state keys, when many appends on one
    # session run at once (each on its own worker thread).
    async def scenario(svc: Any) -> None:
        s = await svc.create_session(app_name=APP, user_id="u1", session_id="busy")
        events = [text_event("user", f"#{i}", **{f"k{i}": i, f"user:u{i}": i, f"app:a{i}": i}) for i in range(40)]
        await asyncio.gather(*(svc.append_event(s, e) for e in events))
        got = await svc.get_session(app_name=APP, user_id="u1", session_id="busy")
        assert got is not None and sorted(e.id for e in got.events) == sorted(e.id for e in events)
        assert len(got.events) == 40
        expected = {}
        for i in range(40):
            expected.update({f"k{i}": i, f"user:u{i}": i, f"app:a{i}": i})
        assert got.state == expected

    store.run(scenario)


@pytest.mark.postgres
def test_appends_from_several_processes_lose_nothing(tmp_path: Path) -> None:
    # Prevents: events or shared-state keys lost when processes holding stale copies of one
    # session append at once (ADK's own database service refuses them as stale).
    workers, count = 3, 15
    with pg_support.schema() as schema:
        sm = session_manager_open(schema)
        try:
            svc = SessionManagerSessionService(sm)
            asyncio.run(svc.create_session(app_name="race", user_id="u", session_id="shared"))
            context = multiprocessing.get_context("spawn")
            start = context.Event()
            procs = [context.Process(target=append_from_process, args=(schema, w, count, start))
                     for w in range(workers)]
            for p in procs:
                p.start()
            start.set()
            for p in procs:
                p.join(120)
            assert [p.exitcode for p in procs] == [0] * workers
            got = asyncio.run(svc.get_session(app_name="race", user_id="u", session_id="shared"))
            assert got is not None and len(got.events) == workers * count
            for w in range(workers):  # each writer's events, all there, in its own order
                mine = [e.content.parts[0].text for e in got.events if e.invocation_id == f"w{w}"]
                assert mine == [f"w{w} #{j}" for j in range(count)]
            keys = {f"{p}{w}_{j}" for w in range(workers) for j in range(count) for p in ("k", "user:u", "app:a")}
            assert set(got.state) == keys
            user = asyncio.run(svc.get_user_state(app_name="race", user_id="u"))
            assert user == {f"u{w}_{j}": j for w in range(workers) for j in range(count)}
        finally:
            sm.close()


def test_docs_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: docs/adk.md showing code that does not run against the adapter.
    text = (ROOT / "docs" / "adk.md").read_text(encoding="utf-8")
    snippet = re.search(r"```python\n(.*?)```", text, re.S)
    assert snippet is not None
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet.group(1), "docs/adk.md", "exec"), {"__name__": "__main__"})
    assert (tmp_path / "data" / "sessions").is_dir()


def test_concurrent_creates_of_one_id_make_one_session(store: Backend) -> None:
    # Prevents: two racing create_session calls with one id both succeeding (the second
    # overwriting the first) or failing with something other than AlreadyExistsError.
    async def scenario(svc: Any) -> None:
        for i in range(5):
            sid = f"race-{i}"
            results = await asyncio.gather(
                svc.create_session(app_name=APP, user_id="u1", session_id=sid, state={"who": "a"}),
                svc.create_session(app_name=APP, user_id="u1", session_id=sid, state={"who": "b"}),
                return_exceptions=True)
            made = [r for r in results if not isinstance(r, BaseException)]
            errors = [r for r in results if isinstance(r, BaseException)]
            assert len(made) == 1 and len(errors) == 1
            assert isinstance(errors[0], AlreadyExistsError) and sid in str(errors[0])
            got = await svc.get_session(app_name=APP, user_id="u1", session_id=sid)
            assert got == made[0]

    store.run(scenario)
