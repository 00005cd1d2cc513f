"""Opening the postgres store from a DSN (``session_manager.open``).
(A worker's adapter value is read by the worker: ``_worker.store_factory``.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import PostgresStore

__all__ = ["open_dsn"]


def open_dsn(dsn: str) -> PostgresStore:
    """``session_manager.open("postgresql://…")``: the defaults, schema ``public``."""
    from .store import PostgresSettings, PostgresStore

    return PostgresStore(PostgresSettings(dsn=dsn))
