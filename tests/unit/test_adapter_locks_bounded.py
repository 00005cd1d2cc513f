"""The adapters' per-session locks live only while something uses them: a process serving
millions of distinct thread / session ids keeps O(1) of them, and mutual exclusion per id
still holds while adapter objects come and go."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")
pytest.importorskip("langchain_core", reason="the langchain extra is not installed")

from langchain_core.messages import AIMessage, HumanMessage

import session_manager
from session_manager.adapters import _transcript
from session_manager.adapters.langchain import SessionChatMessageHistory
from session_manager.adapters.langgraph import SessionManagerSaver
from session_manager.store.memory import MemoryStore
from tests.unit.test_adapter_langgraph import config

N = 10_000


def open_memory() -> session_manager.SessionManager:
    return session_manager.open(store=MemoryStore())



def checkpoint(n: int) -> Any:
    return {"v": 4, "id": f"1f0-{n:08}", "ts": "t", "channel_values": {"x": n},
            "channel_versions": {"x": f"{n}"}, "versions_seen": {}, "updated_channels": None}


RECENT = 16  # the locks kept past their last use, per sm (the tests' bound)


@pytest.fixture(autouse=True)
def few_recent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_transcript, "_RECENT", RECENT, raising=False)


def registered(sm: Any) -> int:
    """The per-session entries the adapters keep for ``sm`` (the shared registry): every
    one ever made before; now those in use and at most ``RECENT`` more."""
    gc.collect()
    registry: Any = _transcript._locks.get(sm)
    if registry is None:
        return 0
    return len(registry.live) if hasattr(registry, "live") else len(registry)  # (one per id before)


def largest_container(obj: Any) -> int:
    """The size of the largest dict / set / list among ``obj``'s attributes."""
    return max((len(v) for v in vars(obj).values() if isinstance(v, dict | set | list)), default=0)


def test_the_saver_keeps_no_lock_per_thread_it_ever_saw() -> None:
    # Prevents: the LangGraph saver (and the shared registry) keeping one lock per thread id
    # forever, so a long-running server's memory grows with every thread it ever served.
    from session_manager.adapters.langgraph import _CACHED_THREADS

    with open_memory() as sm:
        saver = SessionManagerSaver(sm)
        for n in range(N):
            saved = saver.put(config(f"t{n}"), checkpoint(n), {"step": n}, {"x": f"{n}"})
            got = saver.get_tuple(saved)
            assert got is not None and got.checkpoint["channel_values"] == {"x": n}
        assert registered(sm) <= RECENT
        assert largest_container(saver) <= _CACHED_THREADS  # (the LRU of thread indexes: bounded)
        del saver, saved, got
        assert registered(sm) <= RECENT


def test_history_objects_dropped_leave_no_lock_behind() -> None:
    # Prevents: every LangChain history / Agents session object ever made (one per request)
    # leaving its session's lock and "rooted" flag in the registry after it is gone.
    from session_manager.adapters.openai_agents import AgentsSession

    with open_memory() as sm:
        for n in range(N):
            history = SessionChatMessageHistory(f"h{n}", sm)
            history.add_messages([HumanMessage(f"q{n}")])
        del history

        async def agents() -> None:
            for n in range(N // 10):
                session = AgentsSession(f"a{n}", sm)
                await session.add_items([{"role": "user", "content": f"q{n}"}])
                assert len(await session.get_items()) == 1

        asyncio.run(agents())
        assert registered(sm) <= RECENT
        # A kept object keeps its session's entry (and what it knows) however many come after.
        kept = SessionChatMessageHistory("h1", sm)
        kept.add_messages([AIMessage("a1")])
        for n in range(10 * RECENT):
            SessionChatMessageHistory(f"later{n}", sm).add_messages([HumanMessage("x")])
        assert registered(sm) <= RECENT + 1
        assert SessionChatMessageHistory("h1", sm)._transcript.lock is kept._transcript.lock
        assert kept._transcript._rooted
        assert [m.content for m in kept.messages] == ["q1", "a1"]


def test_the_adk_service_keeps_a_bounded_set_of_state_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the ADK service remembering every app/user state session it ensured, forever.
    pytest.importorskip("google.adk.sessions", reason="the adk extra is not installed")
    from google.adk.events import Event, EventActions

    from session_manager.adapters import adk

    monkeypatch.setattr(adk, "_ENSURED_KEPT", 8, raising=False)
    with open_memory() as sm:
        service = adk.SessionManagerSessionService(sm)

        async def run() -> None:
            for n in range(40):
                session = await service.create_session(app_name="app", user_id=f"u{n}")
                event = Event(author="user", invocation_id=f"i{n}",
                              actions=EventActions(state_delta={"user:seen": n}))
                await service.append_event(session, event)
                assert await service.get_user_state(app_name="app", user_id=f"u{n}") == {"seen": n}
            # Forgotten, a state session is ensured again: its deltas still land.
            session = await service.create_session(app_name="app", user_id="u0")
            await service.append_event(session, Event(author="user", invocation_id="again",
                                                      actions=EventActions(state_delta={"user:seen": 99})))
            assert await service.get_user_state(app_name="app", user_id="u0") == {"seen": 99}

        asyncio.run(run())
        assert len(service._ensured) <= 8


# -- mutual exclusion while entries come and go -------------------------------------------------


class Exclusion:
    """Counts, per session id, the threads inside an instrumented critical section at once."""

    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.inside: Counter[str] = Counter()
        self.overlaps: list[str] = []
        self.entered = 0

    def wrap(self, session_id: str, run: Callable[[], Any]) -> Any:
        with self.guard:
            self.inside[session_id] += 1
            self.entered += 1
            if self.inside[session_id] > 1:
                self.overlaps.append(session_id)
        try:
            time.sleep(0.0002)  # widen the window: another holder of the "same" lock would get in now
            return run()
        finally:
            with self.guard:
                self.inside[session_id] -= 1


@pytest.fixture
def fast_switching() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


def test_one_lock_per_session_while_objects_and_ids_come_and_go(
        monkeypatch: pytest.MonkeyPatch, fast_switching: None) -> None:
    # Prevents: a registry that drops an entry while a caller still holds its lock, so a
    # second caller gets a fresh lock for the same session and both write at once (a
    # LangGraph put losing the race, a history batch forked off the path).
    check = Exclusion()
    real_append = _transcript.Transcript._append

    def append(self: _transcript.Transcript, messages: list[_transcript.Write]) -> None:
        check.wrap(self.session_id, lambda: real_append(self, messages))

    monkeypatch.setattr(_transcript.Transcript, "_append", append)
    hot_threads, hot_histories = ["g0", "g1"], ["c0", "c1"]
    rounds, workers = 25, 3
    with open_memory() as sm:
        savers = [SessionManagerSaver(sm) for _ in range(workers)]
        for saver in savers:
            real_checked = saver._checked

            def checked(thread_id: str, index: Any, write: Any, real: Any = real_checked) -> Any:
                return check.wrap(thread_id, lambda: real(thread_id, index, write))

            saver._checked = checked  # type: ignore[method-assign]
        start = threading.Barrier(2 * workers + 2)
        errors: list[BaseException] = []

        def hot_saver(w: int) -> None:
            saver = savers[w]
            start.wait()
            for r in range(rounds):
                for thread in hot_threads:
                    saver.put(config(thread), checkpoint(w * 1000 + r), {"step": r}, {"x": "1"})

        def hot_history(w: int) -> None:
            start.wait()
            for r in range(rounds):
                for sid in hot_histories:
                    # A new object per request (as RunnableWithMessageHistory makes them), dropped after.
                    SessionChatMessageHistory(sid, sm).add_messages(
                        [HumanMessage(f"{w}.{r}q"), AIMessage(f"{w}.{r}a")])

        def churn() -> None:
            saver = SessionManagerSaver(sm)
            start.wait()
            for n in range(rounds * 8):
                saver.put(config(f"new{n}"), checkpoint(n), {"step": n}, {"x": "1"})
                SessionChatMessageHistory(f"newh{n}", sm).add_messages([HumanMessage("x")])
                if n % 16 == 0:
                    gc.collect()

        def guarded(fn: Callable[..., None], *args: Any) -> Callable[[], None]:
            def run() -> None:
                try:
                    fn(*args)
                except BaseException as e:  # (reported by the test thread)
                    errors.append(e)
            return run

        threads = [threading.Thread(target=guarded(hot_saver, w)) for w in range(workers)]
        threads += [threading.Thread(target=guarded(hot_history, w)) for w in range(workers)]
        threads += [threading.Thread(target=guarded(churn)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert check.overlaps == []
        assert check.entered >= 2 * workers * rounds * 2
        # No lost writes: every put is a checkpoint of its thread, every batch on the path, whole.
        reader = SessionManagerSaver(sm)
        for thread in hot_threads:
            assert len(list(reader.list(config(thread)))) == workers * rounds
        for sid in hot_histories:
            messages = SessionChatMessageHistory(sid, sm).messages
            pairs = [(q.content, a.content) for q, a in zip(messages[::2], messages[1::2], strict=True)]
            assert sorted(pairs) == sorted((f"{w}.{r}q", f"{w}.{r}a") for w in range(workers) for r in range(rounds))
        savers.clear()
        del reader
        assert registered(sm) <= RECENT


def test_a_lock_held_by_a_call_stays_the_sessions_one_lock_after_it_is_let_go_of_everywhere_else() -> None:
    # Prevents: the entry of a lock a put holds (nothing else referencing it: no adapter
    # object, pushed out of the recent ones) dropped, so a history object on the same session
    # gets a new lock and writes while the put is inside its critical section.
    with open_memory() as sm:
        saver = SessionManagerSaver(sm)
        inside, leave, done = threading.Event(), threading.Event(), threading.Event()

        def hold() -> None:
            with saver._lock("x"):
                inside.set()
                leave.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        assert inside.wait(10)
        for n in range(4 * RECENT):  # "x" leaves the recent ones
            saver.put(config(f"other{n}"), checkpoint(n), {"step": n}, {"x": "1"})
        gc.collect()
        history = SessionChatMessageHistory("x", sm)
        assert history._transcript.lock is saver._lock("x")
        assert not history._transcript.lock.acquire(blocking=False)  # the put's, still held
        def write() -> None:
            history.add_messages([HumanMessage("q")])
            done.set()

        writer = threading.Thread(target=write)
        writer.start()
        assert not done.wait(0.2)  # waits for the holder
        leave.set()
        holder.join()
        writer.join(10)
        assert done.is_set()
        assert [m.content for m in history.messages] == ["q"]


def test_a_lock_freed_after_the_module_globals_are_cleared_drops_its_entry_quietly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: "Exception ignored in: <function _dropper.<locals>.drop> ... TypeError: 'NoneType'
    # object is not callable" printed at interpreter exit for every session lock still alive
    # when the interpreter cleared this module's globals (seen under the Agents SDK's test suite
    # run with our session), the dead entry left behind. The exit is stood in for by setting the
    # global the callback looked up to None, as the interpreter does.
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with open_memory() as sm:
        registry = _transcript._registry(sm)
        lock = _transcript._session_lock(sm, "late", registry)
        registry.recent.clear()  # ours is now the only reference
        assert registry.live["late"]() is lock
        monkeypatch.setattr(_transcript, "_remove_dead_weakref", None)
        del lock
        gc.collect()
        assert unraisable == []
        assert "late" not in registry.live
        monkeypatch.undo()
        again = _transcript._session_lock(sm, "late", registry)  # a new one is made as usual
        assert registry.live["late"]() is again
