"""Opening the sqlite store from a ``sqlite:///`` URI (``session_manager.open``)
or a worker's adapter value."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import StoreError
from .settings import Durability, SqliteSettings, path_of
from .store import SqliteStore

if TYPE_CHECKING:
    from ..._worker.config_value import SqliteConfig

__all__ = ["build_sqlite", "open_uri"]


def open_uri(uri: str, durability: Durability = "flush") -> SqliteStore:
    """``session_manager.open("sqlite:///…")``: the file the URI names, the defaults otherwise."""
    return SqliteStore(SqliteSettings(path=path_of(uri), durability=durability))


def build_sqlite(config: SqliteConfig, path: str, durability: Durability) -> SqliteStore:
    """The store a worker's adapter value describes (``path`` resolved by the
    caller); :class:`BuildError` naming the cause if it cannot be opened."""
    from ..._worker.config_client import BuildError

    settings = SqliteSettings(path=path, durability=durability, poll_ms=config.poll_ms,
                              busy_timeout_ms=config.busy_timeout_ms,
                              outbox_retention_s=config.outbox_retention_ms / 1000)
    try:
        return SqliteStore(settings)
    except StoreError as e:
        raise BuildError(str(e)) from None
