"""Clearing a framework adapter's history removes it for real (issue 25 #9).

A user who clears a chat history expects its text gone from disk (privacy),
not hidden on a dead branch: ``clear()`` / ``clear_session()`` delete the
session as ``session::delete`` does and create it again, empty, with the
same id, title, description and metadata (``on-deleted`` then
``on-created``). ``pop_item`` is a branch move and keeps the popped item."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._wire.events import EVENT_FUNCTIONS
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds

MARKER = "zq-private-marker-7f3a"  # text a user cleared: its bytes must be nowhere under data_dir


def files_holding(data_dir: Path, needle: bytes) -> list[str]:
    return [str(p.relative_to(data_dir)) for p in sorted(data_dir.rglob("*")) if p.is_file()
            and needle in p.read_bytes()]


@pytest.fixture
def opened(tmp_path: Path) -> Iterator[tuple[session_manager.SessionManager, list[tuple[str, Any]]]]:
    events: list[tuple[str, Any]] = []
    with session_manager.open(tmp_path / "d", ids=SequentialIds(), clock=ManualClock(1_000_000)) as sm:
        sm.ensure("chat", title="T", description="D", metadata={"owner": "u_1"})  # what a clear keeps
        for fid in EVENT_FUNCTIONS:
            sm.observe({"function_id": fid}, lambda e, fid=fid: events.append((fid, e)))
        yield sm, events


def _check_cleared(sm: session_manager.SessionManager, events: list[tuple[str, Any]], data_dir: Path,
                   read_back: Callable[[], list[Any]]) -> None:
    assert files_holding(data_dir, MARKER.encode()) == []
    assert read_back() == []
    meta = sm.get("chat")
    assert meta is not None
    assert (meta.meta.title, meta.meta.description, meta.meta.metadata) == ("T", "D", {"owner": "u_1"})
    assert meta.meta.message_count == 0
    assert sm.call("session::messages", {"session_id": "chat", "include_custom": True})["messages"] == []
    assert [(fid.rsplit("::", 1)[1], e["session_id"], e["session_metadata"]) for fid, e in events] == [
        ("on-deleted", "chat", {"owner": "u_1"}), ("on-created", "chat", {"owner": "u_1"})]


def test_langchain_clear_deletes_the_cleared_text_from_disk_and_recreates_the_session(
        opened: tuple[session_manager.SessionManager, list[tuple[str, Any]]], tmp_path: Path) -> None:
    # Prevents: LangChain clear() keeping every cleared message on a dead branch (and in
    # message_count), where it stays on disk after the user cleared it.
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from langchain_core.messages import AIMessage, HumanMessage

    from session_manager.adapters.langchain import SessionChatMessageHistory

    sm, events = opened
    history = SessionChatMessageHistory("chat", sm)
    history.add_messages([HumanMessage(f"my secret {MARKER}"), AIMessage(f"noted {MARKER}")])
    assert files_holding(tmp_path / "d", MARKER.encode()) != []
    events.clear()
    history.clear()
    _check_cleared(sm, events, tmp_path / "d", lambda: history.messages)
    # the same object writes on the fresh session (rooted again), a new one reads it
    history.add_messages([HumanMessage("after")])
    assert SessionChatMessageHistory("chat", sm).messages == [HumanMessage("after")]
    assert sm.get("chat").meta.message_count == 1  # type: ignore[union-attr]


def test_openai_agents_clear_session_deletes_popped_and_cleared_items_from_disk(
        opened: tuple[session_manager.SessionManager, list[tuple[str, Any]]], tmp_path: Path) -> None:
    # Prevents: clear_session() keeping the cleared items (and the ones popped before) on dead
    # branches on disk; pop_item itself keeps its item (the tree is the product).
    pytest.importorskip("agents", reason="the openai-agents extra is not installed")
    from session_manager.adapters.openai_agents import AgentsSession

    sm, events = opened
    session = AgentsSession("chat", sm)
    other = AgentsSession("chat", sm)  # rooted before the clear: must root the fresh session again
    items = [{"role": "user", "content": f"one {MARKER}"}, {"role": "assistant", "content": f"two {MARKER}"}]
    asyncio.run(session.add_items(items))
    assert asyncio.run(other.get_items()) == items
    assert asyncio.run(session.pop_item()) == items[1]
    popped = sm.call("session::messages", {"session_id": "chat", "from_entry_id": "e_002"})["messages"]
    assert popped[-1]["message"]["content"][0]["text"] == f"two {MARKER}"  # pop keeps it on its branch
    events.clear()
    asyncio.run(session.clear_session())
    _check_cleared(sm, events, tmp_path / "d", lambda: asyncio.run(session.get_items()))
    asyncio.run(other.add_items([{"role": "user", "content": "after"}]))
    assert asyncio.run(session.get_items()) == [{"role": "user", "content": "after"}]
    assert asyncio.run(session.pop_item()) == {"role": "user", "content": "after"}  # rooted again: poppable
    assert asyncio.run(session.get_items()) == []


def test_clearing_an_unknown_session_does_nothing(
        opened: tuple[session_manager.SessionManager, list[tuple[str, Any]]]) -> None:
    # Prevents: a clear creating a session that was never stored, or firing events for it.
    pytest.importorskip("agents", reason="the openai-agents extra is not installed")
    from session_manager.adapters.openai_agents import AgentsSession

    sm, events = opened
    asyncio.run(AgentsSession("never-stored", sm).clear_session())
    assert sm.get("never-stored") is None and events == []
