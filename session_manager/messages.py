"""Constructors for messages and content blocks, with the defaults a caller
would otherwise have to spell out.

The wire models require every field the reference requires (an assistant
message needs ``model``, ``provider``, ``stop_reason`` and ``timestamp``);
these functions fill them sensibly::

    from session_manager.messages import assistant_message, function_call, user_message

    user_message("What is the weather in Paris?")
    assistant_message("Sunny.", model="gpt-5", provider="openai")
    assistant_message(function_call("get_weather", {"city": "Paris"}), model="gpt-5")

Defaults: ``timestamp`` is now (milliseconds since the epoch); a plain ``str``
in the content becomes a text block; an assistant message's ``stop_reason``
is ``"function_call"`` when its content calls a function, else ``"end"``;
``model`` and ``provider`` are ``""`` (not recorded) unless given; a function
call's ``id`` is a fresh ``call_<hex>``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from ._wire.models import (
    AssistantMessage,
    ContentBlock,
    CustomMessage,
    CustomPayload,
    ErrorKind,
    FunctionCallBlock,
    FunctionResultMessage,
    StopReason,
    TextBlock,
    Usage,
    UserMessage,
)

Content = str | ContentBlock


def now_ms() -> int:
    """The current time in milliseconds since the epoch (the messages' clock)."""
    return time.time_ns() // 1_000_000


def text(value: str) -> TextBlock:
    """A text block."""
    return TextBlock(type="text", text=value)


def blocks(content: Sequence[Content]) -> list[ContentBlock]:
    """Content blocks from blocks and plain strings (each string one text block)."""
    return [text(part) if isinstance(part, str) else part for part in content]


def user_message(*content: Content, timestamp: int | None = None) -> UserMessage:
    """A user turn: ``user_message("hi")``."""
    return UserMessage(role="user", content=blocks(content), timestamp=_at(timestamp))


def assistant_message(
    *content: Content,
    model: str = "",
    provider: str = "",
    stop_reason: StopReason | None = None,
    usage: Usage | None = None,
    agent: str | None = None,
    native_stop_reason: str | None = None,
    error_message: str | None = None,
    error_kind: ErrorKind | None = None,
    warnings: list[str] | None = None,
    timestamp: int | None = None,
) -> AssistantMessage:
    """An assistant turn: ``assistant_message("Sunny.", model="gpt-5", provider="openai")``.

    ``stop_reason`` defaults to ``"function_call"`` when the content holds a
    function call block, else ``"end"``."""
    parts = blocks(content)
    if stop_reason is None:
        stop_reason = "function_call" if any(isinstance(b, FunctionCallBlock) for b in parts) else "end"
    return AssistantMessage(
        role="assistant",
        content=parts,
        stop_reason=stop_reason,
        native_stop_reason=native_stop_reason,
        error_message=error_message,
        error_kind=error_kind,
        warnings=warnings,
        usage=usage,
        agent=agent,
        model=model,
        provider=provider,
        timestamp=_at(timestamp),
    )


def function_call(function_id: str, arguments: Any = None, *, id: str | None = None) -> FunctionCallBlock:
    """A function call block (goes in an assistant message); ``id`` defaults to a fresh ``call_<hex>``."""
    return FunctionCallBlock(
        type="function_call", id=id or f"call_{uuid.uuid4().hex}", function_id=function_id, arguments=arguments
    )


def function_result_message(
    call: FunctionCallBlock,
    *content: Content,
    details: Any = None,
    is_error: bool = False,
    timestamp: int | None = None,
) -> FunctionResultMessage:
    """The result of ``call`` (a function call block): its id and function are copied over."""
    return FunctionResultMessage(
        role="function_result",
        function_call_id=call.id,
        function_id=call.function_id,
        content=blocks(content),
        details=details,
        is_error=is_error,
        timestamp=_at(timestamp),
    )


def custom_message(
    custom_type: str,
    *content: Content,
    display: str | None = None,
    details: Any = None,
    timestamp: int | None = None,
) -> CustomMessage:
    """An application-defined message (role ``custom``) that stays in the transcript."""
    return CustomMessage(
        role="custom",
        custom_type=custom_type,
        content=blocks(content),
        display=display,
        details=details,
        timestamp=_at(timestamp),
    )


def custom(custom_type: str, data: Any = None) -> CustomPayload:
    """The payload of a custom (bookkeeping) entry: ``sm.append(sid, custom=custom("note", {...}))``."""
    return CustomPayload(custom_type=custom_type, data=data)


def _at(timestamp: int | None) -> int:
    return now_ms() if timestamp is None else timestamp


# The constructors, and the models they build (importable from here as they always were).
__all__ = [
    "AssistantMessage",
    "Content",
    "ContentBlock",
    "CustomMessage",
    "CustomPayload",
    "ErrorKind",
    "FunctionCallBlock",
    "FunctionResultMessage",
    "StopReason",
    "TextBlock",
    "Usage",
    "UserMessage",
    "assistant_message",
    "blocks",
    "custom",
    "custom_message",
    "function_call",
    "function_result_message",
    "now_ms",
    "text",
    "user_message",
]
