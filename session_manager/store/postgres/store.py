"""The postgres adapter: any number of instances over one database.

Values are stored as their exact JSON text (the same encoder as the fs
store's lines), so they round-trip byte for byte; the only jsonb column is a
derived copy of the session metadata that serves list filters.

:class:`PostgresStore` is assembled from its parts: :mod:`.core` (settings,
pool, failure mapping), :mod:`.transactions` (one transaction per mutation,
its events committed with it), :mod:`.reads` (the queries), :mod:`.writes`
(commits, deletions, attachments), :mod:`.optimistic` (a call in one round
trip when what this instance knows of the session still holds).

Reads outside a mutation run in autocommit on a pooled connection. Every
database failure becomes a :class:`StoreError` (``session/storage``) with the
password masked; a broken connection is discarded by the pool, so the next
call reconnects by itself.
"""

from __future__ import annotations

from collections.abc import Collection

from .._search_index import Matches
from .._search_text import Query
from . import search
from .optimistic import Optimistic
from .settings import PostgresSettings

__all__ = ["PostgresSettings", "PostgresStore"]


class PostgresStore(Optimistic):
    """Sessions, entries and attachments in one PostgreSQL schema."""

    def search(self, query: Query, sessions: Collection[str] | None,
               roles: Collection[str] | None) -> Matches:
        """From the ``tsvector`` index (:mod:`.search`), brought up to date first."""
        if self._local.tx is not None:
            # (inside a mutation: what it wrote is not queued for others yet; read what is stored)
            return super().search(query, sessions, roles)
        with self._conn() as conn:
            return search.search(conn, query, sessions, roles)
