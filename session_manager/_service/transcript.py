"""Read-side shaping of a session's entries: transcript items, blocks, elision.

Entries are the stored JSON dicts. Nothing here writes; every function
returns new objects and never mutates an entry it was given (stored dicts
are shared with the store's cache).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._wire.api import MessageItem, TailItem
from .._wire.models import (
    MESSAGE_MODELS,
    AssistantMessage,
    CustomPayload,
    FunctionCallBlock,
    FunctionResultBlock,
    FunctionResultMessage,
    ImageBlock,
)
from .._wire.shape import build, edit
from ..store.base import Entry
from ..store.path import EntryPath

# --------------------------------------------------------------------------
# Item shaping
# --------------------------------------------------------------------------


def role_of(entry: Entry) -> str | None:
    if entry.get("kind") != "message":
        return None
    message = entry.get("message")
    return message.get("role") if isinstance(message, dict) else None


def _blank_linked_images(blocks: list[Any]) -> list[Any]:
    out: list[Any] = []
    for block in blocks:
        if isinstance(block, dict):
            kind = block.get("type")
            if kind == "image" and block.get("attachment_id"):
                block = edit[ImageBlock](block, data="")
            elif kind == "function_result" and isinstance(block.get("content"), list):
                block = edit[FunctionResultBlock](block, content=_blank_linked_images(block["content"]))
        out.append(block)
    return out


def without_image_data(message: dict[str, Any]) -> dict[str, Any]:
    """The message with every image that links a stored original blanked."""
    content = message.get("content")
    model = MESSAGE_MODELS.get(message.get("role"))  # type: ignore[arg-type]
    if not isinstance(content, list) or model is None:
        return message
    return edit[model](message, content=_blank_linked_images(content))


def attachment_ids_in(blocks: Any) -> list[str]:
    """Attachment ids a content list references (file blocks, linked images)."""
    found: list[str] = []
    if not isinstance(blocks, list):
        return found
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind in ("file", "image") and isinstance(block.get("attachment_id"), str):
            found.append(block["attachment_id"])
        elif kind == "function_result":
            found.extend(attachment_ids_in(block.get("content")))
    return found


def entry_attachment_ids(entry: Entry) -> list[str]:
    if entry.get("kind") != "message":
        return []
    message = entry.get("message")
    return attachment_ids_in(message.get("content")) if isinstance(message, dict) else []


def item(entry: Entry, *, image_data: bool = True, elided: bool = False) -> dict[str, Any]:
    """A transcript item ``{entry_id, message | custom, origin?}``; ``elided``
    makes it a messages-tail item marked as collapsed (only messages are)."""
    if entry.get("kind") != "message":
        custom = build[CustomPayload](custom_type=entry.get("custom_type"), data=entry.get("data"))
        return build[MessageItem](entry_id=entry["id"], custom=custom)
    message = entry["message"] if image_data else without_image_data(entry["message"])
    # Items carry provenance for messages only (wire contract); get-message shows a custom entry's origin.
    if elided:
        return build[TailItem](entry_id=entry["id"], message=message, origin=entry.get("origin"), elided=True)
    # build[MessageItem](entry_id=..., message=..., origin=...) written out (a page builds one per
    # entry): its fields in the model's order, None left out.
    out = {"entry_id": entry["id"]}
    if message is not None:
        out["message"] = message
    origin = entry.get("origin")
    if origin is not None:
        out["origin"] = origin
    return out


# --------------------------------------------------------------------------
# Blocks: the unit messages-tail pages by
# --------------------------------------------------------------------------

# The harness marks trigger wakes in `origin`; older transcripts only by id.
WAKE_ID_PREFIXES = (
    "e_fire_",
    "e_notify_",
    "e_expire_",
    "e_stalespawn_",
    "e_claimfail_",
    "e_condfail_",
    "e_trigfired_",
    "e_trigexpired_",
    "e_trigstale_",
)
WAKE_CUSTOM_TYPE = "trigger_fired"


def _is_wake(entry: Entry) -> bool:
    origin = entry.get("origin")
    if isinstance(origin, dict) and (origin.get("notification") is True or origin.get("trigger_fired") is True):
        return True
    return str(entry.get("id", "")).startswith(WAKE_ID_PREFIXES)


def _calls_functions(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "function_call" for b in content
    )


def is_run_member(entry: Entry) -> bool:
    """Whether the entry belongs to an activity run (calls, results, wakes)."""
    if entry.get("kind") != "message":
        return entry.get("custom_type") == WAKE_CUSTOM_TYPE or _is_wake(entry)
    message = entry.get("message") or {}
    role = message.get("role")
    if role != "user":  # (the usual entry: a user's message is a member by its origin or id alone)
        if role == "assistant":
            return _calls_functions(message)
        if role == "function_result":
            return True
        if role == "custom" and message.get("custom_type") == WAKE_CUSTOM_TYPE:
            return True
    # _is_wake(entry), written out (a tail classifies every entry of its page: one call fewer each)
    origin = entry.get("origin")
    if origin is not None and isinstance(origin, dict) and (
            origin.get("notification") is True or origin.get("trigger_fired") is True):
        return True
    entry_id = entry.get("id", "")
    return (entry_id if type(entry_id) is str else str(entry_id)).startswith(WAKE_ID_PREFIXES)


def kept_whole_in_run(run: list[Entry]) -> list[bool]:
    """Per entry of a collapsed run: keep it whole (True) or elide it.

    Kept: the last assistant message that calls functions, the results that
    answer its calls, and wake entries (small, drawn as the run's header).
    """
    last_call = None
    for i in range(len(run) - 1, -1, -1):
        e = run[i]
        message = e.get("message") or {}
        if e.get("kind") == "message" and message.get("role") == "assistant" and _calls_functions(message):
            last_call = i
            break
    call_ids: set[str] = set()
    if last_call is not None:
        for b in run[last_call]["message"].get("content", []):
            if isinstance(b, dict) and b.get("type") == "function_call":
                call_ids.add(str(b.get("id")))
    keep: list[bool] = []
    for i, e in enumerate(run):
        if i == last_call or e.get("kind") != "message":
            keep.append(True)
        else:
            message = e.get("message") or {}
            role = message.get("role")
            if role == "function_result":
                keep.append(message.get("function_call_id") in call_ids)
            elif role == "assistant":
                keep.append(False)
            else:
                keep.append(True)
    return keep


def elide_message(message: dict[str, Any]) -> dict[str, Any]:
    """The collapsed form: text and identities kept, heavy parts dropped."""
    role = message.get("role")
    if role == "assistant":
        content = []
        for b in message.get("content", []):
            if isinstance(b, dict) and b.get("type") == "thinking":
                continue
            if isinstance(b, dict) and b.get("type") == "function_call":
                b = edit[FunctionCallBlock](b, arguments={})
            content.append(b)
        return edit[AssistantMessage](message, content=content)
    if role == "function_result":
        return edit[FunctionResultMessage](message, content=[], details=None)
    return message


def find_positions(path: EntryPath, keep: Callable[[Entry], bool], start: int, count: int) -> tuple[list[int], bool]:
    """Up to ``count`` indexes >= ``start`` whose entries pass ``keep``, and
    whether another passing entry follows them."""
    found: list[int] = []
    i = start
    n = len(path)
    while i < n and len(found) < count:
        if keep(path[i]):
            found.append(i)
        i += 1
    while i < n:
        if keep(path[i]):
            return found, True
        i += 1
    return found, False
