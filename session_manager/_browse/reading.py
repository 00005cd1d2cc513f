"""Read a data_dir through the session functions: every session (filtered,
sorted), a session's active transcript, and its whole branch tree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._hosts.embedded import SessionManager
from ..errors import not_found

PAGE = 500


def all_sessions(sm: SessionManager, *, status: str | None = None, metadata: dict[str, Any] | None = None,
                 order: str | None = None) -> list[dict[str, Any]]:
    """Every session's meta matching the filters, in ``order`` (session::list paged to the end)."""
    request: dict[str, Any] = {"limit": PAGE}
    if status:
        request["status"] = status
    if metadata:
        request["metadata"] = metadata
    if order:
        request["order"] = order
    out: list[dict[str, Any]] = []
    while True:
        page = sm.call("session::list", request)
        out.extend(page["sessions"])
        if not page.get("next_cursor"):
            return out
        request["cursor"] = page["next_cursor"]


def session_meta(sm: SessionManager, session_id: str) -> dict[str, Any]:
    found = sm.call("session::get", {"session_id": session_id})
    if found is None:
        raise not_found(session_id)
    meta: dict[str, Any] = found["meta"]
    return meta


def active_transcript(sm: SessionManager, session_id: str) -> list[dict[str, Any]]:
    """The active path's items, custom entries included (session::messages paged to the end)."""
    request: dict[str, Any] = {"session_id": session_id, "limit": PAGE, "include_custom": True,
                               "include_image_data": False}
    out: list[dict[str, Any]] = []
    while True:
        page = sm.call("session::messages", request)
        out.extend(page["messages"])
        if not page.get("next_cursor"):
            return out
        request["cursor"] = page["next_cursor"]


def active_message_count(sm: SessionManager, session_id: str) -> int:
    """The messages on the session's active path (custom entries left out): what ``show`` lists."""
    store = sm.service.store
    return sum(1 for e in store.path(session_id, store.get_leaf(session_id)) if e.get("kind") == "message")


@dataclass(frozen=True)
class Tree:
    """Every entry of a session on any branch, as parent -> children."""

    entries: dict[str, dict[str, Any]]
    children: dict[str | None, list[str]]  # None: the roots
    leaf: str | None
    active: frozenset[str]  # the ids on the root -> leaf path


def branch_tree(sm: SessionManager, session_id: str) -> Tree:
    session_meta(sm, session_id)  # unknown ids are session/not_found, as on the bus
    store = sm.service.store
    entries = {e["id"]: e for e in store.entries(session_id)}
    leaf = store.get_leaf(session_id)
    children: dict[str | None, list[str]] = {}
    # Stable by timestamp: siblings of one millisecond keep the store's (append) order, not their ids'.
    for entry in sorted(entries.values(), key=lambda e: e["timestamp"]):
        parent = entry.get("parent_id")
        children.setdefault(parent if parent in entries else None, []).append(entry["id"])
    active = frozenset(e["id"] for e in store.path(session_id, leaf))
    return Tree(entries, children, leaf, active)
