"""How the postgres adapter reaches its database: :class:`PostgresSettings`
and the libpq connection string every connection (pool, migration,
listener) is opened with."""

from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg

from .. import pg_defaults as defaults

OUTBOX_RETENTION_S = 600.0


@dataclass(frozen=True)
class PostgresSettings:
    """How to reach the database (the adapter's ``config``)."""

    dsn: str
    pool_size: int = defaults.POOL_SIZE
    connect_timeout_ms: int = defaults.CONNECT_TIMEOUT_MS
    statement_timeout_ms: int = defaults.STATEMENT_TIMEOUT_MS
    pool_timeout_ms: int = defaults.POOL_TIMEOUT_MS
    schema: str = defaults.SCHEMA
    outbox_retention_s: float = OUTBOX_RETENTION_S

    def conninfo(self) -> str:
        # libpq counts connect_timeout in whole seconds (and treats 1 as 2).
        seconds = max(2, -(-self.connect_timeout_ms // 1000))
        return psycopg.conninfo.make_conninfo(
            self.dsn,
            connect_timeout=seconds,
            options=f"-c statement_timeout={self.statement_timeout_ms} -c search_path={_quote_path(self.schema)}",
            application_name=f"session-manager:{self.schema}"[:63],  # tests find their backends by it
        )


def _quote_path(schema_name: str) -> str:
    # A search_path value inside libpq's options: quoted, backslashes and any
    # whitespace escaped (the server splits options on every isspace()).
    quoted = '"' + schema_name.replace('"', '""') + '"'
    return re.sub(r"([\\ \t\n\r\v\f])", r"\\\1", quoted)
