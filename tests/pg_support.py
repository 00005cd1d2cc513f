"""PostgreSQL for the tests: the server, a private schema per test, the skip rule.

The DSN comes from ``SESSION_MANAGER_TEST_POSTGRES`` (default
``postgresql://127.0.0.1:5432/test``). Each test gets a uniquely named
schema, dropped afterwards. With no server (or no psycopg) a test skips,
naming the reason; with ``SESSION_MANAGER_REQUIRE_POSTGRES=1`` (set by
``.ci/run``) that skip is a failure instead, so CI cannot pass by skipping.

The server is shared: with the other xdist workers, and with other checkouts' runs. A test that
ends (``pg_terminate_backend``) or waits for backends picks them by its schema's stores'
``application_name`` (``session-manager:<schema>``, cut at 63 characters) or by a pid it holds,
never by query text or wait event alone: those match other tests' backends too.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

DSN = os.environ.get("SESSION_MANAGER_TEST_POSTGRES", "postgresql://127.0.0.1:5432/test")
REQUIRED = os.environ.get("SESSION_MANAGER_REQUIRE_POSTGRES") == "1"


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why PostgreSQL tests cannot run here, or ``None`` when they can."""
    try:
        import psycopg
        import psycopg_pool  # noqa: F401
    except ImportError as e:
        return f"the postgres extra is not installed ({e}); pip install -e '.[test,postgres]'"
    try:
        with psycopg.connect(DSN, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as e:
        return f"no PostgreSQL server answers at SESSION_MANAGER_TEST_POSTGRES ({type(e).__name__})"
    return None


def require() -> None:
    """Skip (or, on CI, fail) when no server answers."""
    reason = unavailable()
    if reason is None:
        return
    if REQUIRED:
        pytest.fail(f"SESSION_MANAGER_REQUIRE_POSTGRES=1 but {reason}")
    pytest.skip(reason)


def new_schema_name(prefix: str = "smtest") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def drop_schema(name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@contextlib.contextmanager
def schema(prefix: str = "smtest") -> Iterator[str]:
    """A fresh schema name (created by the first store that migrates it), dropped afterwards;
    ``prefix`` names the test file's own schemas (a leftover says whose it is)."""
    require()
    name = new_schema_name(prefix)
    try:
        yield name
    finally:
        drop_schema(name)


def settings(schema_name: str, **overrides: Any) -> Any:
    from session_manager.store.postgres import PostgresSettings

    return PostgresSettings(dsn=DSN, schema=schema_name, **overrides)


def open_store(schema_name: str, **overrides: Any) -> Any:
    from session_manager.store.postgres import PostgresStore

    return PostgresStore(settings(schema_name, **overrides))


def text(s: str) -> dict[str, Any]:
    """A user message with one text block (the postgres tests' payload)."""
    return {"role": "user", "content": [{"type": "text", "text": s}], "timestamp": 1}
