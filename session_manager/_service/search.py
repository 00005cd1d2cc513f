"""``session::search``: full-text search over the entries of many sessions.

The store finds the entries matching every word inside the sessions in scope
(:meth:`~session_manager.store.SessionStore.search`); here the scope is
resolved (the ``metadata`` subset rule of ``session::list``, so another
tenant's entries are never candidates), candidates are ranked by BM25, paged
with a cursor over the total order (score, newer timestamp, session id,
entry id), and each hit of the page gets its snippet and active-path flag.
The store ranks (:meth:`~session_manager.store.SessionStore.search_page`):
it hands over the page, not every candidate.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

from .._wire import cursors
from .._wire.search_api import SearchRequest, SearchResponse
from .._wire.shape import build
from ..errors import INVALID_CURSOR, SessionError, invalid_request
from ..store.path import Entry
from ..store.search_index import Candidate, SortKey
from ..store.search_text import Query, parse_query, searchable_text, snippet
from .core import Result, ServiceCore
from .listing import metadata_matches
from .storage_errors import storage_errors

__all__ = ["search"]


def _decode_cursor(raw: str) -> SortKey:
    value = cursors.decode(raw)
    s, t, sid, eid = value.get("s"), value.get("t"), value.get("sid"), value.get("id")
    if (not _finite(s) or not isinstance(t, int) or isinstance(t, bool)
            or not isinstance(sid, str) or not isinstance(eid, str)):
        raise SessionError(INVALID_CURSOR, "cursor payload is malformed: expected s, t, sid and id")
    return (-float(s), -t, sid, eid)


def _finite(s: Any) -> TypeGuard[int | float]:
    """Whether a cursor's score is one a page can issue: a number a float holds, not NaN or
    infinite (Python's JSON reads both, and an integer past a float's range)."""
    if not isinstance(s, (int, float)) or isinstance(s, bool):
        return False
    try:
        return math.isfinite(s)
    except OverflowError:  # (an integer too large for a float)
        return False


def search(core: ServiceCore, req: SearchRequest) -> Result:
    query = parse_query(req.query)
    if query is None:
        raise invalid_request("query: must contain at least one word (letters or digits)")
    limit = core.page_size(req.limit)
    after = _decode_cursor(req.cursor) if req.cursor is not None else None
    roles = frozenset(req.roles) if req.roles is not None else None
    with storage_errors():
        scope = _scope(core, req)
        # One more than the page tells whether more remain.
        # (with the page's entries and active-path flags: one lookup where the store can)
        ranked, shown = (core.store.search_page_shown(query, scope, roles, limit + 1, after, limit)
                         if scope is None or scope else ([], []))
        page = ranked[:limit]
        # A hit whose entry is gone: its session was deleted after the page was ranked (another
        # read on most stores); a deleted session's entries are never shown (the cursor below
        # still names the page's last place, so nothing after it is skipped).
        hits = [_hit(query, k, c, *found) for (k, c), found in zip(page, shown, strict=True) if found[0] is not None]
    next_cursor = None
    if len(ranked) > limit and page:
        k = page[-1][0]
        next_cursor = cursors.encode({"s": -k[0], "t": -k[1], "sid": k[2], "id": k[3]})
    return build[SearchResponse](hits=hits, next_cursor=next_cursor), []


def _scope(core: ServiceCore, req: SearchRequest) -> list[str] | None:
    """The session ids searched (``None``: every session)."""
    want = req.metadata or None
    if req.session_id is not None:
        meta = core.store.get_meta(req.session_id)
        if meta is None or (want is not None and not metadata_matches(want, meta.get("metadata"))):
            return []
        return [req.session_id]
    if want is None:
        return None
    return [m["session_id"] for m in core.store.ordered_metas("created_asc", None, None, want)
            if metadata_matches(want, m.get("metadata"))]


def _hit(query: Query, key: SortKey, c: Candidate, entry: Entry | None, on_path: bool) -> dict[str, Any]:
    text = searchable_text(entry) if entry is not None else None
    return {"session_id": c.session_id, "entry_id": c.entry_id, "role": c.role,
            "snippet": snippet(text or "", query), "score": -key[0], "timestamp": c.timestamp,
            "on_active_path": on_path}
