"""Building the postgres store from a configuration value (hosts call this)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._worker.config_client import BuildError
from ...errors import StoreError

if TYPE_CHECKING:
    from ..._worker.config_value import PostgresConfig
    from .store import PostgresStore


def build_postgres(config: PostgresConfig) -> PostgresStore:
    """The store an adapter value describes; :class:`BuildError` (password masked) if it cannot be built."""
    from .store import PostgresSettings, PostgresStore

    settings = PostgresSettings(
        dsn=config.dsn,
        pool_size=config.pool_size,
        connect_timeout_ms=config.connect_timeout_ms,
        statement_timeout_ms=config.statement_timeout_ms,
        pool_timeout_ms=config.pool_timeout_ms,
        schema=config.schema_,
        outbox_retention_s=config.outbox_retention_ms / 1000,
        timeout_ms=config.timeout_ms,
    )
    try:
        return PostgresStore(settings)
    except StoreError as e:
        raise BuildError(str(e)) from None


def open_dsn(dsn: str) -> PostgresStore:
    """``session_manager.open("postgresql://…")``: the defaults, schema ``public``."""
    from .store import PostgresSettings, PostgresStore

    return PostgresStore(PostgresSettings(dsn=dsn))
