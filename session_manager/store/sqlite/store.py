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

from .reads import Reads
from .settings import SqliteSettings
from .writes import Writes

__all__ = ["SqliteSettings", "SqliteStore"]


class SqliteStore(Writes, Reads):
    """Sessions, entries and attachments in one SQLite database file (WAL mode)."""
