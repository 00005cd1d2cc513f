"""``session::store::search`` (ours; a Rust main lacks it): a bridged
``session::search`` runs its store part on the main, against the main's own
index, in one call. The bridge sends the parsed query and the sessions in
scope (resolved on the bridge, from the main's metas: the tenant filter is
the bridge's); the main answers the :class:`~..search_index.Matches`.
Against a Rust main the call is ``function_not_found`` and the bridge answers
``session/storage`` naming what is unsupported.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field

from ..._wire.models import Wire
from ..search_index import Candidate, Matches
from ..search_text import Query

__all__ = ["SEARCH", "SearchRequest", "SearchResponse", "matches_from_json", "matches_json", "serve"]

SEARCH = "session::store::search"


class SearchRequest(Wire):
    exact: list[str] = Field(description="The query's words matched whole (folded).")
    prefix: str = Field(description="The last word, matched as a prefix (folded).")
    sessions: Optional[list[str]] = Field(default=None, description="Sessions in scope; null: every session.")
    roles: Optional[list[str]] = Field(default=None, description="Only entries of these roles; null: any.")


class SearchResponse(Wire):
    docs: int
    total_length: int
    df: list[int]
    candidates: list[list[Any]] = Field(
        description="[session_id, entry_id, role, timestamp, [term counts], length] per matching entry.")


def matches_json(m: Matches) -> dict[str, Any]:
    return {"docs": m.docs, "total_length": m.total_length, "df": list(m.df),
            "candidates": [[c.session_id, c.entry_id, c.role, c.timestamp, list(c.tfs), c.length]
                           for c in m.candidates]}


def matches_from_json(answer: Any, terms: int) -> Matches:
    """The main's answer as :class:`Matches`; ``ValueError`` when it is not one."""
    if not isinstance(answer, dict):
        raise ValueError(f"expected an object, got {answer!r:.200}")
    docs, total, df, rows = (answer.get(k) for k in ("docs", "total_length", "df", "candidates"))
    if (not isinstance(docs, int) or not isinstance(total, int) or not isinstance(df, list)
            or len(df) != terms or not all(isinstance(n, int) for n in df) or not isinstance(rows, list)):
        raise ValueError(f"expected {{docs, total_length, df, candidates}}, got {answer!r:.200}")
    out = Matches(docs=docs, total_length=total, df=df)
    for r in rows:
        if not (isinstance(r, list) and len(r) == 6 and all(isinstance(x, str) for x in r[:3])
                and isinstance(r[3], int) and isinstance(r[4], list) and len(r[4]) == terms
                and all(isinstance(n, int) for n in r[4]) and isinstance(r[5], int)):
            raise ValueError(f"malformed candidate {r!r:.200}")
        out.candidates.append(Candidate(r[0], r[1], r[2], r[3], tuple(r[4]), r[5]))
    return out


def serve(store: Any, req: SearchRequest) -> dict[str, Any]:
    """The main's side: its store's matches."""
    query = Query(exact=tuple(req.exact), prefix=req.prefix)
    roles = frozenset(req.roles) if req.roles is not None else None
    return matches_json(store.search(query, req.sessions, roles))
