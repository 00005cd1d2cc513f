"""The postgres storage adapter (optional extra ``postgres``: psycopg 3 + psycopg_pool).

Modules: ``store`` (assembles :class:`PostgresStore` from ``core``,
``transactions``, ``reads`` and ``writes``), ``settings`` (how to connect),
``links`` (jump pointers of new entries), ``path`` (the lazily read active
path), ``outbox`` (events across instances), ``schema`` (versioned
migrations), ``keys`` and ``values`` (how ids and values are stored),
``secrets`` (password redaction), ``build`` (from a configuration value),
``deadline`` (the watchdog behind ``timeout_ms``), ``in_doubt`` (settling a
commit whose answer was lost), ``optimistic`` and ``plan`` (a mutation in one
round trip through ``sm_apply``).
"""

from .store import PostgresSettings, PostgresStore

__all__ = ["PostgresSettings", "PostgresStore"]
