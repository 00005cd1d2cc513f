"""OpenAI Agents SDK memory: ``AgentsSession`` implements the SDK's ``Session``
protocol (``get_items``, ``add_items``, ``pop_item``, ``clear_session``) over
one session of an open :class:`~session_manager.SessionManager`::

    from agents import Agent, Runner
    from session_manager.adapters.openai_agents import AgentsSession

    with session_manager.open("./data/sessions") as sm:
        session = AgentsSession("chat-42", sm, model="gpt-5", provider="openai")
        result = await Runner.run(agent, "Hi", session=session)

How items are stored (one item, one entry):

- a user or assistant ``message`` item (string content, or ``input_text`` /
  ``output_text`` / ``refusal`` parts) -> a ``user`` / ``assistant`` message of
  text blocks;
- a ``function_call`` item -> an ``assistant`` message with one function call
  block (``id`` = ``call_id``, ``function_id`` = ``name``, the ``arguments``
  string parsed as JSON), stop reason ``function_call``;
- a ``function_call_output`` item -> a ``function_result`` message (its
  ``function_id`` is the name of the call with that ``call_id`` when the call
  was added through this adapter or in the same batch, else ``""``);
- every other item type (reasoning, system/developer messages, hosted-tool
  and computer calls, ...) -> a custom entry ``openai_agents.item`` whose data
  is the item.

What the native shape does not hold (the item's ``id``, ``status``,
``annotations``, a non-compact ``arguments`` string, ...) rides in the entry's
``origin.openai_agents``, so ``get_items`` returns items equal to those added.

``pop_item`` moves the active leaf to the parent of the last entry and
returns it as an item (stepping over entries that are no item, such as another
writer's custom entries). It does not delete: the popped item stays in the
session on its branch (the tree is the product: ``session::set-active-leaf``
brings it back), and new items go on a new branch. ``clear_session`` deletes
for real: the session goes as with ``session::delete`` (every item, on every
branch, popped ones included) and is created again, empty, with the same id,
title, description and metadata. See :mod:`session_manager.adapters._transcript`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from typing import TYPE_CHECKING, Any

from .._service.admission import Unrepresentable, json_size
from ..errors import SessionError
from ..messages import now_ms
from ._settle import settled
from ._transcript import Item, Transcript, Write

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings

PREFIX = "openai_agents"
ITEM_TYPE = "openai_agents.item"  # custom entries holding an item with no native shape
ORIGIN_KEY = "openai_agents"

# How deep a function call block's ``arguments`` sits in an append request:
# payload > message > content > block > arguments (the store counts from 1).
_ARGUMENTS_DEPTH = 5

_TEXT_KEY = {"input_text": "text", "output_text": "text", "refusal": "refusal"}


class AgentsSession:
    """An Agents SDK ``Session`` stored in one session of ``sm``.

    ``sm`` is an open :class:`~session_manager.SessionManager` (or an
    :class:`~session_manager.aio.AsyncSessionManager`); the session is created
    on the first ``add_items``. ``model`` and ``provider`` are written on the
    assistant messages (items do not say which model produced them)."""

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, sm: Any, *, model: str = "", provider: str = "",
                 session_settings: SessionSettings | dict[str, Any] | None = None) -> None:
        self.session_id = session_id
        self.model = model
        self.provider = provider
        if isinstance(session_settings, dict):
            # As the SDK's own sessions take them; the Runner reads the attribute as SessionSettings.
            from agents.memory.session_settings import coerce_session_settings

            session_settings = coerce_session_settings(session_settings)
        elif session_settings is None:
            # Every SDK session defaults to an empty SessionSettings, so callers read
            # ``session.session_settings.limit`` without a None check.
            from agents.memory.session_settings import SessionSettings

            session_settings = SessionSettings()
        self.session_settings = session_settings
        self._transcript = Transcript(sm, session_id, PREFIX)
        self._call_names: dict[str, str] = {}

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The items of the active path, oldest first; with ``limit`` (default:
        ``session_settings.limit``), the newest ``limit`` (read from the tail)."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        return await asyncio.to_thread(self._get_items, limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items in order, one entry each, on the active branch."""
        await settled(asyncio.to_thread(self._add_items, [dict(i) for i in items]))

    async def pop_item(self) -> TResponseInputItem | None:
        """Step the active leaf back past the newest item and return it (``None`` when empty).
        The item stays stored on its branch; :meth:`clear_session` removes it for real."""
        return await settled(asyncio.to_thread(self._pop_item))

    async def clear_session(self) -> None:
        """Delete every stored item for real (popped ones too), keeping the (now empty)
        session: ``on-deleted`` then ``on-created``, same id, title and metadata."""
        await settled(asyncio.to_thread(self._transcript.clear))

    # -- synchronous halves (run on a worker thread) ------------------------------

    def _get_items(self, limit: int | None) -> list[Any]:
        transcript = self._transcript
        if limit is None:
            return [i for entry in transcript.all_items() for i in self._items_of(entry)]
        if limit <= 0:
            return []
        wanted = limit
        while True:
            entries = transcript.last_entries(wanted)
            items = [i for entry in entries for i in self._items_of(entry)]
            # Entries that stand for no item (another writer's bookkeeping) do
            # not count: read further back until ``limit`` items or the root.
            if len(items) >= limit or len(entries) < wanted:
                return items[-limit:]
            wanted += limit - len(items)

    def _add_items(self, items: list[Item]) -> None:
        for item in items:
            if item.get("type") == "function_call" and isinstance(item.get("call_id"), str):
                self._call_names[item["call_id"]] = str(item.get("name", ""))
        self._transcript.append([self._encode(item) for item in items])

    def _pop_item(self) -> Any:
        # Entries that stand for no item (another writer's bookkeeping) are
        # stepped over with the item, so "None" still means "empty".
        with self._transcript.lock:
            while True:
                popped = self._transcript.pop_last()
                if popped is None:
                    return None
                items = self._items_of(popped)
                if len(items) > 1:
                    self._put_back(popped["entry_id"], items[:-1])
                if items:
                    return items[-1]

    def _put_back(self, entry_id: str, items: list[Item]) -> None:
        """Append ``items`` where the leaf now is: an entry that stood for several
        items (another writer's message with text and calls) was stepped over,
        and a pop removes one item. Should that fail, the leaf goes back to the
        entry, so the pop changed nothing."""
        try:
            self._transcript.append([self._encode(item) for item in items])
        except SessionError:
            with contextlib.suppress(SessionError):
                self._transcript.sm.call("session::set-active-leaf",
                                         {"session_id": self.session_id, "entry_id": entry_id})
            raise

    # -- items <-> entries ----------------------------------------------------------

    def _encode(self, item: Item) -> Write:
        native = self._native(item)
        if native is None:
            return None, {"custom_type": ITEM_TYPE, "data": item}, None
        message, rest = native
        if _decode(message, rest) != item:  # the compact form would not read back equal
            rest = {"item": item}
        return message, None, {ORIGIN_KEY: rest}

    def _native(self, item: Item) -> tuple[dict[str, Any], dict[str, Any]] | None:
        kind, role = item.get("type", "message"), item.get("role")
        now = now_ms()
        if kind == "message" and role in ("user", "assistant"):
            content = _content_blocks(item.get("content"))
            if content is None:
                return None
            blocks, parts = content
            rest = {"shape": "message", "rest": _without(item, "content"), "parts": parts}
            if role == "user":
                return {"role": "user", "content": blocks, "timestamp": now}, rest
            return self._assistant(blocks, "end", now), rest
        if kind == "function_call" and isinstance(item.get("call_id"), str) and isinstance(item.get("name"), str):
            raw = item.get("arguments")
            arguments: Any = raw
            kept = _without(item, "call_id", "name", "arguments")
            with contextlib.suppress(ValueError):
                arguments = _strict_json(raw) if isinstance(raw, str) else raw
            if not isinstance(raw, str) or _compact(arguments) != raw:
                kept["arguments"] = raw
            block = {"type": "function_call", "id": item["call_id"], "function_id": item["name"],
                     "arguments": arguments}
            return self._assistant([block], "function_call", now), {"shape": "function_call", "rest": kept}
        if kind == "function_call_output" and isinstance(item.get("call_id"), str):
            output = item.get("output")
            content = _content_blocks(output)
            if content is None:
                return None
            blocks, parts = content
            message = {"role": "function_result", "function_call_id": item["call_id"],
                       "function_id": self._call_names.get(item["call_id"], ""), "content": blocks,
                       "details": None, "is_error": False, "timestamp": now}
            return message, {"shape": "function_call_output", "rest": _without(item, "call_id", "output"),
                             "parts": parts}
        return None

    def _assistant(self, blocks: list[Any], stop_reason: str, now: int) -> dict[str, Any]:
        return {"role": "assistant", "content": blocks, "stop_reason": stop_reason, "model": self.model,
                "provider": self.provider, "timestamp": now}

    def _items_of(self, entry: Item) -> list[Item]:
        """The item(s) one stored entry stands for."""
        custom = entry.get("custom")
        if custom is not None:
            if custom.get("custom_type") == ITEM_TYPE and isinstance(custom.get("data"), dict):
                return [custom["data"]]
            return []  # another writer's bookkeeping: not part of the conversation
        message = entry.get("message") or {}
        rest = (entry.get("origin") or {}).get(ORIGIN_KEY)
        if isinstance(rest, dict):
            item = _decode(message, rest)
            if item.get("type") == "function_call":
                self._call_names[str(item.get("call_id"))] = str(item.get("name", ""))
            return [item]
        return _foreign_items(message)


def _without(item: Item, *keys: str) -> Item:
    return {k: v for k, v in item.items() if k not in keys}


def _not_json(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")


def _finite(token: str) -> float:
    value = float(token)
    if math.isinf(value):  # 1e400: JSON, but no float holds it
        raise ValueError(f"{token} overflows a float")
    return value


def _strict_json(raw: str) -> Any:
    """``raw`` parsed as JSON proper: Python's NaN / Infinity extensions (and
    numbers too large for a float) raise, so such arguments stay a string; so
    does a value the store could not hold as a block's ``arguments`` (an
    escaped lone surrogate, nesting past the store's depth) while the string
    itself is storable."""
    try:
        value = json.loads(raw, parse_constant=_not_json, parse_float=_finite)
    except RecursionError:  # nested past what Python's parser recurses
        raise ValueError("arguments nest too deeply to parse") from None
    try:
        json_size(value, _ARGUMENTS_DEPTH)
    except Unrepresentable as bad:
        raise ValueError(bad.why) from None
    return value


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _content_blocks(content: Any) -> tuple[list[Any], list[Any] | None] | None:
    """Text blocks for string content (parts ``None``) or text-like parts
    (``parts`` = each part without its text); ``None`` when not all text."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}], None
    if not isinstance(content, list):
        return None
    blocks, parts = [], []
    for part in content:
        key = _TEXT_KEY.get(str(part.get("type"))) if isinstance(part, dict) else None
        if key is None or not isinstance(part.get(key), str):
            return None
        blocks.append({"type": "text", "text": part[key]})
        parts.append(_without(part, key))
    return blocks, parts


def _decode(message: dict[str, Any], rest: dict[str, Any]) -> Item:
    """The item an adapter-written message stands for (see :meth:`AgentsSession._encode`)."""
    if "item" in rest:
        return dict(rest["item"])
    item = dict(rest.get("rest") or {})
    blocks = message.get("content") or []
    texts = [b.get("text", "") for b in blocks if isinstance(b, dict)]
    parts = rest.get("parts")
    content: Any = texts[0] if parts is None and len(texts) == 1 else [
        {**p, _TEXT_KEY.get(str(p.get("type")), "text"): t} for p, t in zip(parts or [], texts, strict=False)
    ]
    shape = rest.get("shape")
    if shape == "message":
        item["content"] = content
    elif shape == "function_call":
        block = blocks[0] if blocks else {}
        item["call_id"] = block.get("id")
        item["name"] = block.get("function_id")
        if "arguments" not in item:
            item["arguments"] = _compact(block.get("arguments"))
    elif shape == "function_call_output":
        item["call_id"] = message.get("function_call_id")
        item["output"] = content
    return item


def _foreign_items(message: dict[str, Any]) -> list[Item]:
    """Items for a message another writer stored: the nearest input items."""
    role = message.get("role")
    blocks = [b for b in message.get("content") or [] if isinstance(b, dict)]
    text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    if role == "user":
        return [{"role": "user", "content": text}]
    if role == "assistant":
        out: list[Item] = [{"role": "assistant", "content": text}] if text else []
        for b in blocks:
            if b.get("type") == "function_call":
                out.append({"type": "function_call", "call_id": b.get("id"), "name": b.get("function_id"),
                            "arguments": _compact(b.get("arguments"))})
        return out
    if role == "function_result":
        return [{"type": "function_call_output", "call_id": message.get("function_call_id"), "output": text}]
    return []
