"""Opening the postgres store from a DSN (``session_manager.open``).
(A worker's adapter value is read by the worker: ``_worker.store_factory``.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import PostgresStore

__all__ = ["open_dsn"]


def open_dsn(dsn: str, *, read_only: bool = False) -> PostgresStore:
    """``session_manager.open("postgresql://…")``: the defaults, schema ``public``
    (``read_only``: :attr:`PostgresSettings.read_only`)."""
    from .store import PostgresSettings, PostgresStore

    return PostgresStore(PostgresSettings(dsn=dsn, read_only=read_only))
