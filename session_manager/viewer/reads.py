"""What the viewer reads, all through reading functions and store reads: it never writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from .._browse import reading
from .._browse.filters import metadata_filter
from .._hosts.embedded import SessionManager
from .._hosts.surface import BY_ID
from ..errors import NOT_FOUND, SessionError, invalid_request
from .render import AttachmentUrl, ListView, SessionView

# The list page's search box appears where this function exists: the one hook.
SEARCH_FUNCTION = "session::search"
PAGE_SIZE = 50


def read_call(sm: SessionManager, function_id: str, payload: dict[str, Any]) -> Any:
    """Run a reading function; the viewer has no business with any other."""
    if BY_ID[function_id].mutates:
        raise invalid_request(f"{function_id} writes; the viewer only reads")
    return sm.call(function_id, payload)


def has_search() -> bool:
    return SEARCH_FUNCTION in BY_ID


def list_request(query: Mapping[str, str], metas: Sequence[str]) -> dict[str, Any]:
    """A session::list request from the page's (or API's) query parameters."""
    request: dict[str, Any] = {}
    if query.get("status"):
        request["status"] = query["status"]
    pairs = [p for raw in metas for p in raw.split() if p]
    if pairs:
        request["metadata"] = metadata_filter(pairs)
    for key in ("cursor", "order"):
        if query.get(key):
            request[key] = query[key]
    if query.get("limit"):
        try:
            request["limit"] = int(query["limit"])
        except ValueError:
            raise invalid_request(f"limit: expected an integer, got {query['limit']!r}") from None
    return request


def search_view(sm: SessionManager, query: Mapping[str, str], metas: Sequence[str]) -> ListView:
    """The list page answering its search box: hits of ``q`` inside the metadata filter."""
    request: dict[str, Any] = {"query": query["q"], "limit": PAGE_SIZE}
    filtered = list_request(query, metas)
    for key in ("metadata", "cursor"):
        if key in filtered:
            request[key] = filtered[key]
    page = read_call(sm, SEARCH_FUNCTION, request)
    base = [("q", query["q"]), *(("meta", m) for m in metas if m)]
    next_query = urlencode([*base, ("cursor", page["next_cursor"])]) if page.get("next_cursor") else None
    return ListView([], meta=list(metas), next_query=next_query,
                    first_query=urlencode(base) if request.get("cursor") else None, search=True,
                    query=query["q"], hits=page["hits"])


def list_view(sm: SessionManager, query: Mapping[str, str], metas: Sequence[str]) -> ListView:
    if query.get("q") and has_search():
        return search_view(sm, query, metas)
    request = list_request(query, metas)
    request.setdefault("limit", PAGE_SIZE)
    page = read_call(sm, "session::list", request)
    keep = {k: v for k, v in query.items() if k in ("status", "order", "limit") and v}
    base = [*keep.items(), *(("meta", m) for m in metas if m)]
    next_query = urlencode([*base, ("cursor", page["next_cursor"])]) if page.get("next_cursor") else None
    return ListView(page["sessions"], status=query.get("status") or None, meta=list(metas), next_query=next_query,
                    first_query=urlencode(base) if request.get("cursor") else None, search=has_search())


def api_session(sm: SessionManager, session_id: str) -> dict[str, Any]:
    """``{meta, active_leaf, entries}``: every entry of every branch, oldest first."""
    meta = reading.session_meta(sm, session_id)
    store = sm.service.store
    # Stable by timestamp: entries of one millisecond keep the store's (append) order, not their ids'.
    entries = sorted(store.entries(session_id), key=lambda x: x["timestamp"])
    return {"meta": meta, "active_leaf": store.get_leaf(session_id), "entries": entries}


def forks_of(sm: SessionManager, session_id: str) -> list[dict[str, Any]]:
    return [m for m in reading.all_sessions(sm, order="created_asc") if m.get("forked_from") == session_id]


def session_view(sm: SessionManager, session_id: str, attachment_url: AttachmentUrl, *,
                 link_sessions: bool = True) -> SessionView:
    """A session's page content; ``session/not_found`` for an unknown id."""
    meta = reading.session_meta(sm, session_id)
    tree = reading.branch_tree(sm, session_id)
    return SessionView(meta, tree, forks_of(sm, session_id), attachment_url, link_sessions)


def attachment(sm: SessionManager, session_id: str, attachment_id: str) -> tuple[dict[str, Any], bytes]:
    store = sm.service.store
    meta = store.get_attachment_meta(session_id, attachment_id)
    data = store.read_attachment(session_id, attachment_id) if meta is not None else None
    if meta is None or data is None:
        raise SessionError(NOT_FOUND, f"session {session_id} has no attachment {attachment_id}")
    return meta, data


__all__ = ["PAGE_SIZE", "SEARCH_FUNCTION", "api_session", "attachment", "has_search", "list_request", "list_view",
           "read_call", "search_view", "session_view"]
