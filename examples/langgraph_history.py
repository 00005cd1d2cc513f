"""LangChain / LangGraph message history in a session-manager store.

    python examples/langgraph_history.py [DATA_DIR]      # needs the langgraph extra

LangGraph (LangChain 1.x's recommended persistence): ``SessionManagerSaver`` is
a checkpointer; each thread is a session, each checkpoint an entry, and time
travel forks are branches. A plain LangChain history
(``SessionChatMessageHistory``) is shown too, for code that keeps a message list.
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

import session_manager
from session_manager.adapters.langchain import SessionChatMessageHistory
from session_manager.adapters.langgraph import SessionManagerSaver


def echo_bot(state: MessagesState) -> dict[str, Any]:
    """A stand-in for a model node: answers with the length of the conversation."""
    return {"messages": [AIMessage(f"message #{len(state['messages']) + 1}")]}


def main(data_dir: str) -> dict[str, Any]:
    builder = StateGraph(MessagesState)
    builder.add_node("bot", echo_bot)
    builder.add_edge(START, "bot")
    with session_manager.open(data_dir) as sm:
        graph = builder.compile(checkpointer=SessionManagerSaver(sm))
        config: Any = {"configurable": {"thread_id": "chat-42"}}
        graph.invoke({"messages": [HumanMessage("hi")]}, config)
        state = graph.invoke({"messages": [HumanMessage("again")]}, config)  # the thread's memory
        history = list(graph.get_state_history(config))  # newest first: replay or fork from any
        texts = [m.content for m in state["messages"]]

        chat = SessionChatMessageHistory("plain-chat", sm)
        chat.add_messages([HumanMessage("Weather in Paris?"), AIMessage("Sunny.")])
        plain = [m.content for m in SessionChatMessageHistory("plain-chat", sm).messages]
    print("graph:", texts, f"({len(history)} checkpoints)")
    print("history:", plain)
    return {"graph": texts, "checkpoints": len(history), "history": plain}


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="sm-langgraph-"))
