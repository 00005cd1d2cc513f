"""Opening the sqlite store from a ``sqlite:///`` URI (``session_manager.open``).
(A worker's adapter value is read by the worker: ``_worker.store_factory``.)"""

from __future__ import annotations

from .settings import Durability, SqliteSettings, path_of
from .store import SqliteStore

__all__ = ["open_uri"]


def open_uri(uri: str, durability: Durability = "flush", *, read_only: bool = False) -> SqliteStore:
    """``session_manager.open("sqlite:///…")``: the file the URI names, the defaults otherwise
    (``read_only``: :attr:`SqliteSettings.read_only`)."""
    return SqliteStore(SqliteSettings(path=path_of(uri), durability=durability, read_only=read_only))
