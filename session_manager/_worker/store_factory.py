"""The SQL adapters built from a worker's adapter value: the configuration is
read here, on the host's side, and the adapters get plain settings (their
dataclasses), so the store package never imports the worker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import StoreError
from ..store.sqlite.settings import Durability, SqliteSettings
from .config_client import BuildError
from .config_value import PostgresConfig, SqliteConfig

if TYPE_CHECKING:
    from ..store.postgres import PostgresStore
    from ..store.sqlite import SqliteStore

__all__ = ["build_postgres", "build_sqlite"]


def build_postgres(config: PostgresConfig) -> PostgresStore:
    """The store an adapter value describes; :class:`BuildError` (password masked) if it cannot be built."""
    try:
        from ..store.postgres.store import PostgresSettings, PostgresStore  # the optional extra
    except ImportError as e:
        raise BuildError(f"adapter postgres needs the extra 'session-manager[postgres]' ({e})") from None

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


def build_sqlite(config: SqliteConfig, path: str, durability: Durability) -> SqliteStore:
    """The store a worker's adapter value describes (``path`` resolved by the
    caller); :class:`BuildError` naming the cause if it cannot be opened."""
    from ..store.sqlite import SqliteStore

    settings = SqliteSettings(path=path, durability=durability, poll_ms=config.poll_ms,
                              busy_timeout_ms=config.busy_timeout_ms,
                              outbox_retention_s=config.outbox_retention_ms / 1000)
    try:
        return SqliteStore(settings)
    except StoreError as e:
        raise BuildError(str(e)) from None
