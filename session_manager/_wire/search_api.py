"""Request and response models of ``session::search`` (kept beside :mod:`.api`,
whose conventions they follow: caller ids non-empty, limits non-negative)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .api import Cursor, Id, Limit
from .models import Int64, JsonObject, Role, Wire

__all__ = ["SearchHit", "SearchQueryText", "SearchRequest", "SearchResponse"]

SearchQueryText = Annotated[
    str,
    Field(min_length=1, max_length=256,
          description="Words (case- and accent-insensitive); every one must match, the last as a prefix."),
]


class SearchRequest(Wire):
    query: SearchQueryText
    metadata: JsonObject | None = Field(
        default=None, description="Subset-equality on SessionMeta.metadata, applied inside the search."
    )
    session_id: Id | None = Field(default=None, description="Search only this session.")
    roles: list[Role] | None = Field(default=None, description="Only entries of these message roles.")
    limit: Limit | None = None
    cursor: Cursor | None = None


class SearchHit(Wire):
    session_id: str
    entry_id: str
    role: Role
    snippet: str = Field(description="At most 1,000 characters around the first match.")
    score: float = Field(description="Relevance (BM25); higher first, newer timestamp first on ties.")
    timestamp: Int64
    on_active_path: bool


class SearchResponse(Wire):
    hits: list[SearchHit]
    next_cursor: str | None = None
