"""Transcript reads: messages (paged by cursor), messages-range, get-message."""

from __future__ import annotations

from .._wire import api, cursors
from .._wire.models import MessageEntry
from .._wire.shape import build, edit
from ..errors import INVALID_CURSOR, SessionError, invalid_request, not_found
from ..store.base import Entry
from ..store.path import EntryPath
from .core import Result, ServiceCore
from .storage_errors import storage_errors
from .transcript import find_positions, item, role_of, without_image_data

__all__ = ["get_message", "messages", "messages_range"]


def messages(core: ServiceCore, req: api.MessagesRequest) -> Result:
    session_id = req.session_id
    with storage_errors():
        if req.from_entry_id is not None:
            core.meta_or_raise(session_id)
            core.entry_or_raise(session_id, req.from_entry_id)
            leaf: str | None = req.from_entry_id
        else:
            # One call for both: a store may answer them, and the path's first window, in one read.
            meta, leaf = core.store.meta_and_leaf_from_root(session_id)
            if meta is None:
                raise not_found(session_id)
        path = core.path(session_id, leaf)
        if not len(path):
            core.still_there(session_id)
            return build[api.MessagesResponse](messages=[]), []
    roles = set(req.roles) if req.roles is not None else None
    include_custom = bool(req.include_custom) and roles is None

    def keep(entry: Entry) -> bool:
        if entry.get("kind") == "message":
            return roles is None or role_of(entry) in roles
        return include_custom

    start = 0
    anchor, what = (
        (cursors.decode_entry_cursor(req.cursor), "cursor entry")
        if req.cursor is not None
        else (req.after_entry_id, "after_entry_id")
    )
    if anchor is not None:
        i = path.index_of(anchor)
        if i is None or not keep(path[i]):
            raise SessionError(INVALID_CURSOR, f"{what} {anchor} is not on the requested path")
        start = i + 1
    found, more = find_positions(path, keep, start, core.page_size(req.limit))
    image_data = req.include_image_data is not False
    next_cursor = cursors.entry_cursor(path[found[-1]]["id"]) if more else None
    items = [item(path[i], image_data=image_data) for i in found]
    return build[api.MessagesResponse](messages=items, next_cursor=next_cursor), []


def messages_range(core: ServiceCore, req: api.MessagesRangeRequest) -> Result:
    session_id = req.session_id
    with storage_errors():
        core.meta_or_raise(session_id)
        span = _range_span(req)
        path = core.path(session_id, core.store.get_leaf(session_id))
        if span is not None:
            lo, hi = (_on_path(core, path, session_id, eid) for eid in span)
            if lo > hi:
                raise invalid_request(
                    f"from_entry_id {span[0]} comes after to_entry_id {span[1]} on the active path")
            selection: list[int] | range = range(lo, hi + 1)
        else:
            assert req.entry_ids is not None
            selection = sorted({_on_path(core, path, session_id, eid) for eid in req.entry_ids})
    start = 0
    if req.cursor is not None:
        after = path.index_of(cursors.decode_entry_cursor(req.cursor))
        k = _bisect(selection, after) if after is not None else None
        if k is None:
            raise SessionError(INVALID_CURSOR, "cursor entry is not in the selection")
        start = k + 1
    limit = core.page_size(req.limit)
    chosen = selection[start : start + limit]
    image_data = req.include_image_data is not False
    more = start + limit < len(selection)  # limit >= 1, so chosen is not empty
    next_cursor = cursors.entry_cursor(path[chosen[-1]]["id"]) if more else None
    items = [item(path[i], image_data=image_data) for i in chosen]
    return build[api.MessagesRangeResponse](messages=items, next_cursor=next_cursor), []


def _on_path(core: ServiceCore, path: EntryPath, session_id: str, entry_id: str) -> int:
    """The entry's index on ``path``; an unknown entry is entry_not_found, an off-path one invalid_cursor."""
    i = path.index_of(entry_id)
    if i is None:
        core.entry_or_raise(session_id, entry_id)
        raise SessionError(INVALID_CURSOR, f"entry {entry_id} is not on the active path")
    return i


def get_message(core: ServiceCore, req: api.GetMessageRequest) -> Result:
    with storage_errors():
        entry = core.store.entry_held(req.session_id, req.entry_id)
    if entry is None:
        return None, []
    if "revision" not in entry:
        entry = _with_revision_0(entry)
    if req.include_image_data is False and entry.get("kind") == "message":
        entry = edit[MessageEntry](entry, message=without_image_data(entry["message"]))
    return build[api.GetMessageResponse](entry=entry), []


def _with_revision_0(entry: Entry) -> Entry:
    """An entry an older writer stored without ``revision``, with the 0 it means, placed where a
    writer of today puts it (after ``timestamp``): the reference worker answers it so, and a reader
    doing ``entry["revision"]`` must not fail on an old log."""
    out: Entry = {}
    for key, value in entry.items():
        out[key] = value
        if key == "timestamp":
            out["revision"] = 0
    out.setdefault("revision", 0)
    return out


def _bisect(seq: list[int] | range, value: int) -> int | None:
    """Index of ``value`` in the sorted ``seq``, or ``None``."""
    lo, hi = 0, len(seq)
    while lo < hi:
        mid = (lo + hi) // 2
        if seq[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < len(seq) and seq[lo] == value else None


def _range_span(req: api.MessagesRangeRequest) -> tuple[str, str] | None:
    """``(from, to)`` for a span request, ``None`` for an id list; anything else is invalid."""
    span = req.from_entry_id is not None or req.to_entry_id is not None
    if span == (req.entry_ids is not None) or (span and (req.from_entry_id is None or req.to_entry_id is None)):
        raise invalid_request(
            "from_entry_id, to_entry_id, entry_ids: exactly one selector is required: "
            "from_entry_id + to_entry_id, or entry_ids"
        )
    if req.from_entry_id is not None and req.to_entry_id is not None:
        return req.from_entry_id, req.to_entry_id
    return None
