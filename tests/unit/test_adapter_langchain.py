"""The LangChain adapter, driven through LangChain's own interfaces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core", reason="the langchain extra is not installed")

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

import session_manager
from session_manager._wire.events import ON_MESSAGE_ADDED
from session_manager.adapters.langchain import MESSAGE_TYPE, SessionChatMessageHistory
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds


def open_store(where: Path) -> session_manager.SessionManager:
    return session_manager.open(where, ids=SequentialIds(), clock=ManualClock(1_000_000))


def dicts(messages: list[BaseMessage]) -> list[Any]:
    return [message_to_dict(m) for m in messages]


CONVERSATION: list[BaseMessage] = [
    SystemMessage("You are terse."),
    HumanMessage("Weather in Paris?", id="h1"),
    AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Paris", "days": 1.0}, "id": "call_1"}],
              response_metadata={"model_name": "gpt-test", "finish_reason": "tool_calls"},
              usage_metadata={"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}),
    ToolMessage("sunny", tool_call_id="call_1"),
    ToolMessage("boom", tool_call_id="call_2", name="other", status="error", artifact={"raw": [1]}),
    AIMessage([{"type": "text", "text": "It is "}, {"type": "text", "text": "sunny."}], id="a2"),
    HumanMessage([{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]),
    ChatMessage("custom role", role="critic"),
]


def test_messages_round_trip_with_tool_calls_and_results_stored_natively(tmp_path: Path) -> None:
    # Prevents: tool calls / results lost or mangled (ids, args with floats, error status),
    # metadata dropped, or messages stored opaquely where a native shape exists.
    added: list[Any] = []
    with open_store(tmp_path / "d") as sm:
        sm.observe({"function_id": ON_MESSAGE_ADDED}, added.append)
        history = SessionChatMessageHistory("chat", sm, provider="test")
        assert isinstance(history, BaseChatMessageHistory)
        history.add_messages(CONVERSATION)
        assert dicts(history.messages) == dicts(CONVERSATION)
        assert history.messages == CONVERSATION
        entries = sm.messages("chat", include_custom=True).messages[1:]  # after the root
        kinds = [e.message.role if e.message is not None else e.custom.custom_type for e in entries]  # type: ignore[union-attr]
        assert kinds == [MESSAGE_TYPE, "user", "assistant", "function_result", "function_result", "assistant",
                         "user", MESSAGE_TYPE]
        call = entries[2].message
        assert call is not None and call.stop_reason == "function_call" and call.model == "gpt-test"  # type: ignore[union-attr]
        block = call.content[0]
        assert (block.id, block.function_id, block.arguments) == (  # type: ignore[union-attr]
            "call_1", "get_weather", {"city": "Paris", "days": 1.0})
        results = [e.message for e in sm.messages("chat", roles=["function_result"]).messages]
        assert [(r.function_call_id, r.function_id, r.is_error) for r in results] == [  # type: ignore[union-attr]
            ("call_1", "get_weather", False), ("call_2", "other", True)]
        assert len(added) == 1 + len(CONVERSATION)
    with open_store(tmp_path / "d") as again:  # after a restart
        assert dicts(SessionChatMessageHistory("chat", again).messages) == dicts(CONVERSATION)


def test_clear_empties_the_session_for_real_and_keeps_using_it(tmp_path: Path) -> None:
    # Prevents: clear() keeping the cleared messages (counted, on a dead branch), or messages
    # still listed after it (issue 25 #9; the bytes on disk: test_adapter_clear.py).
    with open_store(tmp_path / "d") as sm:
        history = SessionChatMessageHistory("chat", sm)
        assert history.messages == []
        history.clear()  # nothing stored yet
        assert sm.get("chat") is None
        history.add_messages([HumanMessage("a"), AIMessage("b")])
        history.clear()
        assert history.messages == []
        meta = sm.get("chat")
        assert meta is not None and meta.meta.message_count == 0
        history.add_user_message("c")
        assert history.messages == [HumanMessage("c")]
    with open_store(tmp_path / "d") as again:
        assert SessionChatMessageHistory("chat", again).messages == [HumanMessage("c")]
        assert again.get("chat").meta.message_count == 1  # type: ignore[union-attr]


# LangChain points new code at LangGraph persistence, but this runnable is the interface
# BaseChatMessageHistory exists for, and it still ships in langchain-core.
@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")
def test_runnable_with_message_history_keeps_the_conversation(tmp_path: Path) -> None:
    # Prevents: the adapter working only when called directly, not as LangChain's runnables use it.
    model = FakeMessagesListChatModel(responses=[AIMessage("Hello, Ada."), AIMessage("You are Ada.")])
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])
    with open_store(tmp_path / "d") as sm:
        chain = RunnableWithMessageHistory(
            prompt | model,  # type: ignore[arg-type]
            lambda session_id: SessionChatMessageHistory(session_id, sm),
            input_messages_key="question",
            history_messages_key="history",
        )
        config: Any = {"configurable": {"session_id": "ada"}}
        assert chain.invoke({"question": "I am Ada."}, config=config).content == "Hello, Ada."
        assert chain.invoke({"question": "Who am I?"}, config=config).content == "You are Ada."
        texts = [(m.message.role, m.message.content[0].text)  # type: ignore[union-attr]
                 for m in sm.messages("ada").messages if m.message is not None]
        assert texts == [("user", "I am Ada."), ("assistant", "Hello, Ada."), ("user", "Who am I?"),
                         ("assistant", "You are Ada.")]
        assert [m.content for m in SessionChatMessageHistory("ada", sm).messages] == [
            "I am Ada.", "Hello, Ada.", "Who am I?", "You are Ada."]


def test_two_history_objects_on_one_session_keep_every_batch_on_the_path(tmp_path: Path) -> None:
    # Prevents: two SessionChatMessageHistory objects for one session (one per request, as
    # RunnableWithMessageHistory's factory makes them) interleaving chained batches so that a
    # batch forks off the active path and vanishes from .messages.
    import threading

    with open_store(tmp_path / "d") as sm:
        barrier = threading.Barrier(3)

        def writer(tag: str) -> None:
            history = SessionChatMessageHistory("s", sm)
            barrier.wait()
            for i in range(15):
                history.add_messages([HumanMessage(f"{tag}{i}q"), AIMessage(f"{tag}{i}a")])

        threads = [threading.Thread(target=writer, args=(tag,)) for tag in "XYZ"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        messages = SessionChatMessageHistory("s", sm).messages
        assert len(messages) == 90
        pairs = [(q.content, a.content) for q, a in zip(messages[::2], messages[1::2], strict=True)]
        assert sorted(pairs) == sorted((f"{t}{i}q", f"{t}{i}a") for t in "XYZ" for i in range(15))
        assert [type(m) for m in messages[:2]] == [HumanMessage, AIMessage]
        assert len(sm.messages("s", include_custom=True, limit=500).messages) == 91  # + the root


def test_a_batch_the_store_refuses_part_of_leaves_the_history_as_it_was(tmp_path: Path) -> None:
    # Prevents: add_messages half-applying a batch: the messages before the refused one stayed
    # on the active path, so .messages showed a turn that was never saved.
    from session_manager.errors import INVALID_REQUEST, SessionError

    with open_store(tmp_path / "d") as sm:
        history = SessionChatMessageHistory("chat", sm)
        history.add_messages([HumanMessage("before")])
        added: list[Any] = []
        sm.observe({"function_id": ON_MESSAGE_ADDED}, added.append)
        with pytest.raises(SessionError) as refused:
            history.add_messages([HumanMessage("one"), AIMessage("two"), AIMessage(
                "", tool_calls=[{"name": "f", "args": {"x": float("nan")}, "id": "c1"}])])
        assert refused.value.code == INVALID_REQUEST
        assert history.messages == [HumanMessage("before")]
        assert [e["entry_id"] for e in added] == ["e_002", "e_003"]  # written, then left off the path
        history.add_messages([HumanMessage("after")])
        assert history.messages == [HumanMessage("before"), HumanMessage("after")]
    with open_store(tmp_path / "d") as again:
        assert SessionChatMessageHistory("chat", again).messages == [HumanMessage("before"), HumanMessage("after")]


def test_a_tool_result_names_the_call_a_new_history_object_read(tmp_path: Path) -> None:
    # Prevents: a ToolMessage stored with function_id "" when the history object writing it is
    # not the one that wrote its call (RunnableWithMessageHistory makes one per invocation):
    # the call was right there in the .messages it had just read.
    with open_store(tmp_path / "d") as sm:
        SessionChatMessageHistory("chat", sm).add_messages([
            HumanMessage("Weather?"),
            AIMessage("", tool_calls=[{"name": "get_weather", "args": {}, "id": "call_1"}])])
        history = SessionChatMessageHistory("chat", sm)
        assert history.messages[1].tool_calls[0]["name"] == "get_weather"  # type: ignore[attr-defined]
        history.add_messages([ToolMessage("sunny", tool_call_id="call_1"), AIMessage("Sunny.")])
        results = [e.message for e in sm.messages("chat", roles=["function_result"]).messages]
        assert [(r.function_call_id, r.function_id) for r in results] == [  # type: ignore[union-attr]
            ("call_1", "get_weather")]
        assert history.messages[2] == ToolMessage("sunny", tool_call_id="call_1")  # reads back as added
