"""The sqlite adapter: any number of processes and threads over one file.

Values are stored as their exact JSON text (the fs store's encoder, as in
the postgres adapter), so big integers round-trip exactly and NaN never
gets in. :class:`SqliteStore` is assembled from its parts: :mod:`.core`
(connections, failure mapping, opening checks), :mod:`.transactions` (one
``BEGIN IMMEDIATE`` transaction per mutation, its events committed with
it), :mod:`.reads`, :mod:`.writes`, and :mod:`.outbox` (events across
processes).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection

from .._search_index import Matches
from .._search_text import Query
from . import search
from .reads import Reads
from .settings import SqliteSettings
from .writes import Writes

__all__ = ["SqliteSettings", "SqliteStore"]


class SqliteStore(Writes, Reads):
    """Sessions, entries and attachments in one SQLite database file (WAL mode)."""

    def search(self, query: Query, sessions: Collection[str] | None,
               roles: Collection[str] | None) -> Matches:
        """From the FTS5 index (:mod:`.search`), in one snapshot."""
        if self._local.in_tx:
            return search.search(self._conn(), query, sessions, roles)
        conn = self._conn()
        try:
            conn.execute("BEGIN")  # deferred: a read snapshot, no lock
            try:
                return search.search(conn, query, sessions, roles)
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as e:
            raise self._fail(e) from None
