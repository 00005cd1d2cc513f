"""How the postgres adapter reaches its database: :class:`PostgresSettings`
and the libpq connection string every connection (pool, migration,
listener) is opened with."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import psycopg

from . import defaults

OUTBOX_RETENTION_S = defaults.OUTBOX_RETENTION_MS / 1000

# libpq waits on its socket without a deadline, and statement_timeout is
# the server's (its answer cannot cross a partition): without keepalives a
# silent network partition hangs the call, or leaves a pooled or listening
# connection dead, until the OS gives up (hours). An idle connection is
# probed after 10 s, every 5 s, and dropped after 3 unanswered probes;
# data left unacknowledged for 30 s drops it too. A DSN's own values win.
KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",  # ms
}
# The same limits on the server's side of the socket (session settings any
# role may set), so a vanished instance's backend ends and its
# transaction's advisory locks free up instead of blocking that session
# on every other instance.
_SERVER_SIDE = {
    "keepalives_idle": "tcp_keepalives_idle",
    "keepalives_interval": "tcp_keepalives_interval",
    "keepalives_count": "tcp_keepalives_count",
    "tcp_user_timeout": "tcp_user_timeout",
}


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
    timeout_ms: int = defaults.TIMEOUT_MS  # every call answers within it (see .deadline)
    # Read-only: every session runs default_transaction_read_only (the server refuses any
    # write), the schema is checked, never migrated, the listener prunes nothing and a
    # search reads the index plus its queue without indexing it (see .search).
    read_only: bool = False

    def conninfo(self) -> str:
        """The connection string (built once per settings value in a process: libpq's
        parsing of it took most of a cold open's own time, before the pool could connect)."""
        return _conninfo(self)

    def _build_conninfo(self) -> str:
        # libpq counts connect_timeout in whole seconds (and treats 1 as 2).
        seconds = max(2, -(-self.connect_timeout_ms // 1000))
        given = psycopg.conninfo.conninfo_to_dict(self.dsn)
        keepalives = {k: str(given.get(k, default)) for k, default in KEEPALIVES.items()}
        options = [f"statement_timeout={self.statement_timeout_ms}", f"search_path={_quote_path(self.schema)}",
                   # A transaction its caller abandoned at the deadline (behind a silent
                   # network, the server never hears of it) ends by itself, its locks freed.
                   f"idle_in_transaction_session_timeout={self.timeout_ms + 1000}",
                   # Each statement sees what committed before it (whatever the DSN or the database
                   # default): an append that waited on an observer's registration at the gate must
                   # see its row (sm_append_at), and one waiting on a session's lock its new state.
                   f"default_transaction_isolation={_quote_option('read committed')}"]
        if self.read_only:
            options.append("default_transaction_read_only=on")
        for client, server in _SERVER_SIDE.items():
            if server == "tcp_user_timeout" or _on(keepalives["keepalives"]):
                options.append(f"{server}={_quote_option(keepalives[client])}")
        # The DSN's own options first: kept (lock_timeout, timezone, ...), and where both set
        # one (search_path, statement_timeout) the adapter's, later on the line, wins.
        own = str(given.get("options") or "").strip()
        return psycopg.conninfo.make_conninfo(
            self.dsn,
            connect_timeout=seconds,
            options=" ".join([own] * bool(own) + [f"-c {o}" for o in options]),
            application_name=f"session-manager:{self.schema}"[:63],  # tests find their backends by it
            **{k: v for k, v in keepalives.items() if k not in given},
        )


@functools.lru_cache(maxsize=64)
def _conninfo(settings: PostgresSettings) -> str:
    return settings._build_conninfo()


def _on(flag: str) -> bool:
    # libpq reads keepalives as an integer, 0 meaning off (a non-integer it refuses itself).
    try:
        return int(flag) != 0
    except ValueError:
        return True


def _quote_path(schema_name: str) -> str:
    # A search_path value inside libpq's options: quoted, backslashes and any
    # whitespace escaped (the server splits options on every isspace()).
    return _quote_option('"' + schema_name.replace('"', '""') + '"')


def _quote_option(value: str) -> str:
    return re.sub(r"([\\ \t\n\r\v\f])", r"\\\1", value)
