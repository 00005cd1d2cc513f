"""A cancelled adapter write is settled when the caller sees ``CancelledError``.

The adapters' async methods run their synchronous half on a worker thread,
which cancelling the awaiting task cannot stop. Before the fix the caller got
``CancelledError`` at once and the write landed a moment later, so a retry
after the cancellation doubled it (the Agents SDK's own sessions wait)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

import session_manager

pytest.importorskip("langchain_core", reason="the langchain extra is not installed")

from langchain_core.messages import AIMessage, HumanMessage

from session_manager.adapters.langchain import SessionChatMessageHistory
from session_manager.adapters.openai_agents import AgentsSession

# Its adapter imports the SDK only when used: the skip looks for it without importing it (seconds per
# xdist worker at collection).
pytestmark = pytest.mark.skipif(find_spec("agents") is None, reason="the openai-agents extra is not installed")


class Gate:
    """Holds the manager's calls of one function until released, saying when one is held."""

    def __init__(self, sm: Any, function_id: str) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        real = sm.call

        def call(fid: str, payload: Any = None) -> Any:
            if fid == function_id and not self.release.is_set():
                self.entered.set()
                self.release.wait(10)
            return real(fid, payload)

        sm.call = call


@pytest.fixture
def sm(tmp_path: Path) -> Iterator[session_manager.SessionManager]:
    with session_manager.open(tmp_path / "d") as manager:
        yield manager


def path_texts(sm: Any, session_id: str) -> list[str]:
    items = sm.call("session::messages", {"session_id": session_id})["messages"]
    return [b["text"] for i in items for b in i["message"]["content"] if b.get("type") == "text"]


def cancel_mid_write(gate: Gate, start: Callable[[], Coroutine[Any, Any, Any]],
                     settled_state: Callable[[], Any], *, cancels: int = 1) -> Any:
    """Start the write, cancel it (``cancels`` times) while it is held, release it, and
    return what ``settled_state`` reads the moment ``CancelledError`` reaches the caller."""

    async def run() -> Any:
        task = asyncio.ensure_future(start())
        await asyncio.to_thread(gate.entered.wait, 10)
        for _ in range(cancels):
            task.cancel()
            await asyncio.sleep(0)
        await asyncio.sleep(0.05)
        assert not task.done(), "CancelledError reached the caller while the write was still running"
        gate.release.set()
        try:
            await task
        except asyncio.CancelledError:
            return settled_state()  # read at once: no await between the error and the read
        raise AssertionError("the cancellation was swallowed")

    return asyncio.run(run())


def test_cancelled_add_items_has_landed_when_cancelled_error_is_seen(sm: Any) -> None:
    session = AgentsSession("a", sm)
    asyncio.run(session.add_items([{"role": "user", "content": "first"}]))
    gate = Gate(sm, "session::append")
    state = cancel_mid_write(gate, lambda: session.add_items([{"role": "user", "content": "second"}]),
                             lambda: path_texts(sm, "a"))
    assert state == ["first", "second"]


def test_cancelled_pop_item_has_moved_the_leaf_when_cancelled_error_is_seen(sm: Any) -> None:
    session = AgentsSession("p", sm)
    asyncio.run(session.add_items([{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]))
    gate = Gate(sm, "session::set-active-leaf")
    state = cancel_mid_write(gate, session.pop_item, lambda: path_texts(sm, "p"), cancels=3)
    assert state == ["one"]


def test_cancelled_clear_session_has_cleared_when_cancelled_error_is_seen(sm: Any) -> None:
    session = AgentsSession("c", sm)
    asyncio.run(session.add_items([{"role": "user", "content": "one"}]))
    gate = Gate(sm, "session::delete")
    state = cancel_mid_write(gate, session.clear_session, lambda: path_texts(sm, "c"))
    assert state == []
    assert asyncio.run(session.get_items()) == []


def test_cancelled_langchain_aadd_messages_has_landed_when_cancelled_error_is_seen(sm: Any) -> None:
    history = SessionChatMessageHistory("l", sm)
    gate = Gate(sm, "session::append")
    state = cancel_mid_write(gate, lambda: history.aadd_messages([HumanMessage("hi"), AIMessage("hello")]),
                             lambda: [m.content for m in history.messages])
    assert state == ["hi", "hello"]


def test_cancelled_langchain_aclear_has_cleared_when_cancelled_error_is_seen(sm: Any) -> None:
    history = SessionChatMessageHistory("lc", sm)
    history.add_messages([HumanMessage("hi")])
    gate = Gate(sm, "session::delete")
    state = cancel_mid_write(gate, history.aclear, lambda: history.messages, cancels=2)
    assert state == []


def test_an_uncancelled_write_still_returns_its_result_and_errors_pass_through(sm: Any) -> None:
    # Prevents: the settling wrapper swallowing results or errors of writes nobody cancelled.
    session = AgentsSession("r", sm)
    asyncio.run(session.add_items([{"role": "user", "content": "x"}]))
    assert asyncio.run(session.pop_item()) == {"role": "user", "content": "x"}
    assert asyncio.run(session.pop_item()) is None
    sm.call("session::ensure", {"session_id": "foreign"})
    sm.call("session::append", {"session_id": "foreign", "message": {
        "role": "user", "content": [{"type": "text", "text": "not ours"}], "timestamp": 0}})
    with pytest.raises(session_manager.SessionError) as refused:
        asyncio.run(AgentsSession("foreign", sm).pop_item())
    assert refused.value.code == "session/invalid_request"
