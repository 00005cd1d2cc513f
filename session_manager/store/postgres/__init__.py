"""The postgres storage adapter (optional extra ``postgres``: psycopg 3 + psycopg_pool).

Modules: ``schema`` (versioned migrations), ``store`` (the adapter and its
transaction seam), ``path`` (the lazily read active path), ``outbox``
(events across instances), ``secrets`` (password redaction).
"""

from .store import PostgresSettings, PostgresStore

__all__ = ["PostgresSettings", "PostgresStore"]
