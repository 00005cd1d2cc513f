"""Schema names the postgres adapter must take literally (or refuse before touching the database).

The name reaches SQL through ``sql.Identifier``, libpq's ``options`` (the
``search_path``), the migration lock and the NOTIFY channel; each of those
must agree on one schema, or instances share tables but not events.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import session_manager
from session_manager._wire import events as ev
from session_manager._worker.config_client import BuildError
from session_manager._worker.config_value import parse_config
from session_manager._worker.runtime import build_store
from session_manager.errors import StoreError
from tests import pg_support
from tests.unit.test_postgres_instances import wait_for

pytestmark = pytest.mark.postgres


def schemas_like(prefix: str) -> list[str]:
    import psycopg

    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (prefix,)).fetchall()
    return [r[0] for r in rows]


@contextlib.contextmanager
def odd_schema(suffix: str) -> Iterator[str]:
    """A unique schema name ending in ``suffix``; every schema starting with its prefix is dropped after."""
    pg_support.require()
    prefix = pg_support.new_schema_name()
    try:
        yield prefix + suffix
    finally:
        for name in schemas_like(prefix):
            pg_support.drop_schema(name)


def round_trip(name: str) -> None:
    """Two instances over ``name``: one schema holds the data, events cross, a reopen reads it back."""
    with session_manager.open(store=pg_support.open_store(name)) as writer, \
            session_manager.open(store=pg_support.open_store(name)) as reader:
        seen: list[str] = []
        reader.observe({"function_id": ev.ON_CREATED}, lambda e: seen.append(e["session_id"]))
        sid = writer.call("session::create", {"title": name})["session_id"]
        assert wait_for(lambda: bool(seen)) and seen == [sid]
        assert reader.call("session::get", {"session_id": sid})["meta"]["title"] == name
    with session_manager.open(store=pg_support.open_store(name)) as again:
        assert again.call("session::get", {"session_id": sid})["meta"]["title"] == name
    assert name in schemas_like(name)


@pytest.mark.parametrize("suffix", ["%s", "%%", "%(x)s"], ids=["percent-s", "percent-percent", "percent-named"])
def test_a_schema_name_with_a_percent_sign_is_taken_literally(suffix: str) -> None:
    # Prevents: a '%' in the schema name read as a query placeholder (boot refused, or the
    # migration writing to the schema named with one '%' fewer).
    with odd_schema(suffix) as name:
        round_trip(name)
        assert schemas_like(name) == [name]


@pytest.mark.parametrize("suffix", ["\tx", "\nx", " x", "\\x", '";drop schema public cascade;--', "'x", "É,x"],
                         ids=["tab", "newline", "space", "backslash", "injection", "quote", "comma-upper"])
def test_a_schema_name_with_whitespace_or_quotes_reaches_the_search_path_whole(suffix: str) -> None:
    # Prevents: whitespace other than a space splitting libpq's options (every connection refused),
    # or a quote, backslash or comma in the name escaping its identifier.
    with odd_schema(suffix) as name:
        round_trip(name)


def test_a_schema_name_over_63_bytes_is_refused_before_anything_is_created() -> None:
    # Prevents: PostgreSQL truncating a long name to 63 bytes, so two configured schemas share
    # one set of tables while their NOTIFY channels and migration locks (of the full names)
    # differ: instances that see each other's data but never each other's events.
    with odd_schema("_" + "é" * 30) as long_name, odd_schema("_" + "é" * 31) as longer:
        assert len(long_name.encode("utf-8")) > 63 and len(long_name) <= 63  # the config's max_length counts chars
        for name in (long_name, longer):
            with pytest.raises(StoreError) as err:
                pg_support.open_store(name)
            assert "schema" in str(err.value) and "63" in str(err.value)
        value: dict[str, Any] = {"adapter": {"name": "postgres",
                                             "config": {"dsn": pg_support.DSN, "schema": long_name}}}
        with pytest.raises(BuildError) as built:
            build_store(parse_config(value))
        assert "schema" in str(built.value)
        assert schemas_like(long_name.encode("utf-8")[:40].decode("utf-8", "ignore")) == []
        assert schemas_like(longer.encode("utf-8")[:40].decode("utf-8", "ignore")) == []


def test_a_schema_name_of_exactly_63_bytes_works() -> None:
    # Prevents: the length rule refusing the longest name PostgreSQL keeps whole.
    pg_support.require()
    name = pg_support.new_schema_name() + "_" + uuid.uuid4().hex
    name += "x" * (63 - len(name.encode("utf-8")))
    try:
        round_trip(name)
    finally:
        pg_support.drop_schema(name)


def test_a_schema_migrated_by_a_newer_release_is_refused_not_written() -> None:
    # Prevents: an older instance (a rollback, a lagging host) silently serving a schema a newer
    # release migrated past what it knows, writing rows the newer layout does not expect.
    import psycopg
    from psycopg import sql

    from session_manager.store.postgres.schema import MIGRATIONS

    with odd_schema("") as name:
        pg_support.open_store(name).close()
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("UPDATE {}.schema_version SET version = {}").format(
                sql.Identifier(name), sql.Literal(len(MIGRATIONS) + 1)))
        from session_manager.store.postgres.schema import CHECKED

        CHECKED.clear()  # as a new process (one that checked the schema before skips the check)
        with pytest.raises(StoreError) as err:
            pg_support.open_store(name)
        assert "schema" in str(err.value) and str(len(MIGRATIONS) + 1) in str(err.value)
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            row = conn.execute(sql.SQL("SELECT version FROM {}.schema_version").format(sql.Identifier(name))).fetchone()
        assert row == (len(MIGRATIONS) + 1,)


@pytest.mark.parametrize("suffix", ["%s", " x", '";x', "'x", "É,x"],
                         ids=["percent-s", "space", "quote-semicolon", "apostrophe", "comma-upper"])
def test_the_plain_appends_lock_keys_are_every_writers_for_any_schema_name(suffix: str) -> None:
    # Prevents: plain.LOCK, which computes the session's and the gate's advisory-lock keys from
    # the schema name the store was given (a parameter), locking other keys than the writers
    # that compute them from current_schema() (sm_append_at, sm_apply's callers, an observer's
    # gate): a plain append and a procedure append of one session not serialized, or an
    # observer registering while a plain append is under way.
    import psycopg

    from session_manager.store.postgres import plain
    from session_manager.store.postgres.core import Statement

    with odd_schema(suffix) as name:
        pg_support.open_store(name).close()  # (migrated)
        lock = Statement(plain.LOCK)
        with psycopg.connect(pg_support.DSN, autocommit=True) as holder, \
                psycopg.connect(pg_support.DSN, autocommit=True) as other:
            for conn in (holder, other):
                conn.execute(psycopg.sql.SQL("SET search_path TO {}").format(psycopg.sql.Identifier(name)))
            holder.execute("BEGIN")
            values, formats = lock.values({"schema": pg_support.settings(name).schema, "sid": "s1"})  # (the store's)
            res = holder.pgconn.exec_params(lock.sql, values, param_formats=formats)
            assert res.status == psycopg.pq.ExecStatus.TUPLES_OK, res.get_error_message()
            held = other.execute(
                "SELECT pg_try_advisory_xact_lock(hashtextextended(current_schema() || ':' || 's1', 0)),"
                " pg_try_advisory_xact_lock(hashtext(current_schema()), 1),"
                " pg_try_advisory_xact_lock_shared(hashtext(current_schema()), 1),"
                " pg_try_advisory_xact_lock(hashtextextended(current_schema() || ':' || 's2', 0))").fetchone()
            assert held == (False, False, True, True)  # (the session's and the gate's, shared: as sm_append_at)
            holder.execute("ROLLBACK")
