"""LangChain chat history: ``SessionChatMessageHistory`` is a
``BaseChatMessageHistory`` over one session of an open
:class:`~session_manager.SessionManager`::

    from session_manager.adapters.langchain import SessionChatMessageHistory

    history = SessionChatMessageHistory("chat-42", sm)
    history.add_messages([HumanMessage("hi"), AIMessage("hello")])
    history.messages  # -> [HumanMessage("hi"), AIMessage("hello")]

How messages are stored (one message, one entry):

- ``HumanMessage`` -> a ``user`` message; ``AIMessage`` -> an ``assistant``
  message whose text blocks are followed by one function call block per
  tool call (``id``, ``name`` -> ``function_id``, ``args`` -> ``arguments``),
  stop reason ``function_call`` when it calls tools, else ``end``;
  ``ToolMessage`` -> a ``function_result`` message (``tool_call_id`` ->
  ``function_call_id``, ``status="error"`` -> ``is_error``, ``function_id``
  from its ``name`` or the call it answers, when this object added or read
  that call, else ``""``);
- every other type (``SystemMessage``, ``ChatMessage``, ``FunctionMessage``,
  ...) -> a custom entry ``langchain.message`` holding ``message_to_dict``.

What the native shape does not hold (ids, ``additional_kwargs``,
``response_metadata``, usage, non-text content parts, ...) rides in the
entry's ``origin.langchain``, so ``messages`` returns messages equal to those
added. ``clear()`` deletes the session for real (as ``session::delete``: the
cleared text is gone from the store) and creates it again, empty, with the
same id, title, description and metadata (see
:mod:`session_manager.adapters._transcript`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage, message_to_dict
from langchain_core.messages import messages_from_dict as _from_dicts

from ..messages import now_ms
from ._settle import settled
from ._transcript import Item, Transcript, Write

PREFIX = "langchain"
MESSAGE_TYPE = "langchain.message"  # custom entries holding a message type with no native shape
ORIGIN_KEY = "langchain"
_NATIVE: dict[type[BaseMessage], str] = {HumanMessage: "user", AIMessage: "assistant", ToolMessage: "function_result"}


class SessionChatMessageHistory(BaseChatMessageHistory):
    """LangChain chat history stored in session ``session_id`` of ``sm`` (an open
    :class:`~session_manager.SessionManager` or
    :class:`~session_manager.aio.AsyncSessionManager`); created on the first
    write. ``model`` and ``provider`` go on assistant messages whose
    ``response_metadata`` names no ``model_name``."""

    def __init__(self, session_id: str, sm: Any, *, model: str = "", provider: str = "") -> None:
        self.session_id = session_id
        self.model = model
        self.provider = provider
        self._transcript = Transcript(sm, session_id, PREFIX)
        self._call_names: dict[str, str] = {}

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The active path's messages, oldest first."""
        out: list[BaseMessage] = []
        for entry in self._transcript.all_items():
            message = self._message_of(entry)
            if message is not None:
                out.append(message)
        # The calls read name the results written next (RunnableWithMessageHistory
        # makes a new history object per invocation, and reads before it writes).
        self._remember_calls(out)
        return out

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append the messages in order, one entry each, on the active branch."""
        self._remember_calls(messages)
        self._transcript.append([self._encode(m) for m in messages])

    def clear(self) -> None:
        """Delete every stored message for real, keeping the (now empty) session:
        ``on-deleted`` then ``on-created``, same id, title and metadata."""
        self._transcript.clear()

    # A cancelled write still lands (a worker thread runs it): wait for it before re-raising.
    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """:meth:`add_messages` off the event loop; cancelled, it raises once the write has settled."""
        await settled(asyncio.to_thread(self.add_messages, messages))

    async def aclear(self) -> None:
        """:meth:`clear` off the event loop; cancelled, it raises once the clear has settled."""
        await settled(asyncio.to_thread(self.clear))

    def _remember_calls(self, messages: Sequence[BaseMessage]) -> None:
        for m in messages:
            for call in m.tool_calls if isinstance(m, AIMessage) else []:
                if call["id"]:
                    self._call_names[call["id"]] = call["name"]

    # -- messages <-> entries ---------------------------------------------------------

    def _encode(self, message: BaseMessage) -> Write:
        role = _NATIVE.get(type(message))
        if role is None:
            return None, {"custom_type": MESSAGE_TYPE, "data": message_to_dict(message)}, None
        whole = message_to_dict(message)
        native, rest = self._native(message, role, whole)
        decoded = _decode(native, rest)
        if decoded is None or message_to_dict(decoded) != whole:  # the compact form would not read back equal
            rest = {"message": whole}
        return native, None, {ORIGIN_KEY: rest}

    def _native(self, message: BaseMessage, role: str, whole: dict[str, Any]) -> tuple[Item, Item]:
        data = dict(whole["data"])
        texts, text_form = _texts(message.content)
        carried = ["content"] if text_form is not None else []
        blocks: list[Any] = [{"type": "text", "text": t} for t in texts]
        now = now_ms()
        if isinstance(message, AIMessage):
            calls = [{"type": "function_call", "id": c.get("id") or "", "function_id": c["name"],
                      "arguments": c["args"]} for c in message.tool_calls]
            carried.append("tool_calls")
            model = message.response_metadata.get("model_name")
            native: Item = {"role": "assistant", "content": blocks + calls,
                            "stop_reason": "function_call" if calls else "end",
                            "model": model if isinstance(model, str) else self.model,
                            "provider": self.provider, "timestamp": now}
        elif isinstance(message, ToolMessage):
            carried.append("tool_call_id")
            name = message.name or self._call_names.get(message.tool_call_id, "")
            native = {"role": "function_result", "function_call_id": message.tool_call_id, "function_id": name,
                      "content": blocks, "details": None, "is_error": message.status == "error", "timestamp": now}
        else:
            native = {"role": "user", "content": blocks, "timestamp": now}
        kept = {k: v for k, v in data.items() if k not in carried and not _is_default(type(message), k, v)}
        return native, {"type": whole["type"], "data": kept, "content": text_form}

    def _message_of(self, entry: Item) -> BaseMessage | None:
        custom = entry.get("custom")
        if custom is not None:
            if custom.get("custom_type") == MESSAGE_TYPE and isinstance(custom.get("data"), dict):
                return _from_dicts([custom["data"]])[0]
            return None
        message = entry.get("message") or {}
        rest = (entry.get("origin") or {}).get(ORIGIN_KEY)
        if isinstance(rest, dict):
            return _decode(message, rest)
        return _foreign(message)


def _texts(content: Any) -> tuple[list[str], str | None]:
    """The text of ``content`` and its form (``"str"``, ``"parts"``, or ``None`` when not all text)."""
    if isinstance(content, str):
        return ([content] if content else []), "str"
    texts = []
    all_text = isinstance(content, list)
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str) \
                and set(part) == {"type", "text"}:
            texts.append(part["text"])
        elif isinstance(part, str):
            all_text = False
            texts.append(part)
        else:
            all_text = False
    return texts, "parts" if all_text else None


def _is_default(cls: type[BaseMessage], key: str, value: Any) -> bool:
    field = cls.model_fields.get(key)
    if field is None or field.is_required():
        return False
    return bool(field.get_default(call_default_factory=True) == value)


def _decode(message: Item, rest: Item) -> BaseMessage | None:
    if "message" in rest:
        return _from_dicts([rest["message"]])[0]
    data = dict(rest.get("data") or {})
    blocks = [b for b in message.get("content") or [] if isinstance(b, dict)]
    texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
    form = rest.get("content")
    if form == "str":
        data["content"] = "".join(texts)
    elif form == "parts":
        data["content"] = [{"type": "text", "text": t} for t in texts]
    role = message.get("role")
    if role == "assistant":
        data["tool_calls"] = [{"name": b.get("function_id"), "args": b.get("arguments"), "id": b.get("id") or None,
                               "type": "tool_call"} for b in blocks if b.get("type") == "function_call"]
    elif role == "function_result":
        data["tool_call_id"] = message.get("function_call_id")
    try:
        return _from_dicts([{"type": rest.get("type"), "data": data}])[0]
    except (KeyError, ValueError, TypeError):
        return None


def _foreign(message: Item) -> BaseMessage | None:
    """The nearest LangChain message for a message another writer stored."""
    role = message.get("role")
    blocks = [b for b in message.get("content") or [] if isinstance(b, dict)]
    text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    if role == "user":
        return HumanMessage(text)
    if role == "assistant":
        calls: list[Any] = []
        for b in blocks:
            if b.get("type") == "function_call":
                args = b.get("arguments")
                calls.append({"name": b.get("function_id"), "args": args if isinstance(args, dict) else {},
                              "id": b.get("id"), "type": "tool_call"})
        return AIMessage(text, tool_calls=calls)
    if role == "function_result":
        return ToolMessage(text, tool_call_id=str(message.get("function_call_id", "")),
                           name=message.get("function_id") or None,
                           status="error" if message.get("is_error") else "success")
    return None
