"""Framework adapters over an open :class:`~session_manager.SessionManager`.

Each lives in its own module and needs its framework installed (the
``openai-agents``, ``langchain`` and ``adk`` extras):

- :mod:`session_manager.adapters.openai_agents`: ``AgentsSession``, the OpenAI
  Agents SDK ``Session`` protocol;
- :mod:`session_manager.adapters.langchain`: ``SessionChatMessageHistory``,
  LangChain's ``BaseChatMessageHistory``;
- :mod:`session_manager.adapters.adk`: ``SessionManagerSessionService``, Google
  ADK's ``BaseSessionService`` (one session per ADK session, events as
  entries, shared state in state sessions);
- :mod:`session_manager.adapters.langgraph`: ``SessionManagerSaver``, a
  LangGraph checkpointer (extra ``langgraph``): each thread a session, each
  checkpoint a custom entry under its parent checkpoint.

The two chat adapters store what they are given as ordinary messages (visible to
``session::messages``, role filters and the console), one framework item per
entry, and never destroy history: removing items moves the active leaf back
along the branch (see :mod:`session_manager.adapters._transcript`).
"""

# Nothing at the package level: each adapter is its own module (imported by
# name, since each needs its framework installed).
__all__: list[str] = []
