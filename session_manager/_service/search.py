"""``session::search``: full-text search over the entries of many sessions.

The store finds the entries matching every word inside the sessions in scope
(:meth:`~session_manager.store.SessionStore.search`); here the scope is
resolved (the ``metadata`` subset rule of ``session::list``, so another
tenant's entries are never candidates), candidates are ranked by BM25, paged
with a cursor over the total order (score, newer timestamp, session id,
entry id), and each hit of the page gets its snippet and active-path flag.
A cursor carries the statistics its first page was ranked with (the scope's
entry count, word count and each term's entry count) and the pages after it
are ranked with them, so an append or delete between two pages moves no
score: a hit that exists throughout is shown once, never skipped.
The store ranks (:meth:`~session_manager.store.SessionStore.search_page`):
it hands over the page, not every candidate.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, TypeGuard

from .._wire import cursors
from .._wire.search_api import SearchRequest, SearchResponse
from .._wire.shape import build
from ..errors import INVALID_CURSOR, SessionError, invalid_request
from ..store.path import Entry
from ..store.search_index import Candidate, SortKey, Stats
from ..store.search_text import Query, parse_query, searchable_text, snippet
from .core import Result, ServiceCore
from .listing import json_canonical, metadata_matches
from .storage_errors import storage_errors

__all__ = ["search"]


_COUNT_MAX = 2**53  # (a count past any store's; an exact float, an int64 of every database)


def _binding(query: Query, req: SearchRequest) -> str:
    """What a cursor names of the request it continues (its ``q``): the query's terms as
    searched (folded: ``Alpha`` and ``alpha`` page alike) and the filters deciding the scope and
    candidates, so a cursor presented with another query or filters is refused, not answered with
    a page of another result set. A digest, not the values: the cursor stays small and opaque."""
    roles = sorted(set(req.roles)) if req.roles is not None else None
    metadata = json_canonical(req.metadata) if req.metadata else None
    text = json.dumps([list(query.exact), query.prefix, metadata, req.session_id, roles],
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _decode_cursor(raw: str, terms: int, binding: str) -> tuple[SortKey, Stats | None]:
    """A cursor's place and statistics (``None``: a cursor of a release before they were
    carried, ``s, t, sid, id`` only, whose pages are ranked with the scope's statistics of
    the moment, as that release did). ``terms``: how many terms the query has (one count each);
    ``binding``: the request's :func:`_binding`, which a cursor naming one (``q``) must carry
    (one without: issued before cursors named their request, accepted as before)."""
    value = cursors.decode(raw)
    if "q" in value and value["q"] != binding:
        raise SessionError(INVALID_CURSOR, "cursor was issued for another query or filters (query, metadata,"
                                           " session_id, roles): send them as they were on its first page")
    s, t, sid, eid = value.get("s"), value.get("t"), value.get("sid"), value.get("id")
    if (not _finite(s) or not isinstance(t, int) or isinstance(t, bool)
            or not isinstance(sid, str) or not isinstance(eid, str)):
        raise SessionError(INVALID_CURSOR, "cursor payload is malformed: expected s, t, sid and id")
    after = (-float(s), -t, sid, eid)
    if not any(k in value for k in ("n", "l", "df")):
        return after, None
    n, words, df = value.get("n"), value.get("l"), value.get("df")
    if (not _count(n) or not _count(words) or not isinstance(df, list) or len(df) != terms
            or not all(_count(d) for d in df)):
        # (a term count above n still scores: the idf's log stays of a positive number)
        raise SessionError(INVALID_CURSOR, "cursor payload is malformed: expected n, l and df (one count per"
                                           " query term), as issued for this query")
    return after, Stats(n, words, tuple(df))


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _COUNT_MAX


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
    binding: str | None = None  # (with no cursor, made only for a next cursor)
    after: SortKey | None = None
    stats: Stats | None = None
    if req.cursor is not None:
        binding = _binding(query, req)
        after, stats = _decode_cursor(req.cursor, len(query.terms), binding)
    roles = frozenset(req.roles) if req.roles is not None else None
    with storage_errors():
        scope = _scope(core, req)
        # One more than the page tells whether more remain.
        # (with the page's entries and active-path flags: one lookup where the store can)
        ranked, shown = (core.store.search_page_shown(query, scope, roles, limit + 1, after, limit, stats)
                         if scope is None or scope else ([], []))
        page = ranked[:limit]
        # A hit whose entry is gone: its session was deleted after the page was ranked (another
        # read on most stores); a deleted session's entries are never shown (the cursor below
        # still names the page's last place, so nothing after it is skipped).
        hits = [_hit(query, k, c, *found) for (k, c), found in zip(page, shown, strict=True) if found[0] is not None]
    next_cursor = None
    if len(ranked) > limit and page:
        k = page[-1][0]
        place: dict[str, Any] = {"s": -k[0], "t": -k[1], "sid": k[2], "id": k[3]}
        frozen = getattr(ranked, "stats", None) or stats  # (the statistics this page was ranked with)
        if frozen is not None:
            place.update(n=frozen.docs, l=frozen.total_length, df=list(frozen.df))
        place["q"] = binding if binding is not None else _binding(query, req)
        next_cursor = cursors.encode(place)
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
