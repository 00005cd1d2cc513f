"""The postgres adapter's connection settings: TCP keepalives and a user
timeout on both sides of every socket (a DSN's own values win), and the
outbox retention as an adapter option that pruning honours and a reload
changes."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from session_manager.store import Commit
from session_manager.store.postgres.settings import KEEPALIVES, PostgresSettings
from session_manager.testing import FakeEngine
from session_manager.testing.contract import meta
from tests import pg_support
from tests.unit.test_configuration import boot
from tests.unit.test_postgres_instances import wait_for
from tests.unit.test_postgres_store import pg_value

pytestmark = pytest.mark.postgres


def _sockopts(conn: Any) -> dict[str, int]:
    """What the kernel holds for the connection's socket (a duplicate of its descriptor)."""
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    try:
        return {
            "keepalives": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "keepalives_idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "keepalives_interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            "keepalives_count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            "tcp_user_timeout": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        }
    finally:
        sock.close()


def _server_side(conn: Any) -> dict[str, str]:
    names = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count", "tcp_user_timeout")
    return {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in names}


def _observed(store: Any) -> tuple[dict[str, str], dict[str, int], dict[str, str]]:
    """A pooled connection's libpq parameters, socket options and server settings."""
    with store.db.conn() as conn:
        if conn.info.host.startswith("/"):
            pytest.skip("SESSION_MANAGER_TEST_POSTGRES is a Unix socket: TCP options do not apply")
        return conn.info.get_parameters(), _sockopts(conn), _server_side(conn)


@pytest.fixture
def store_factory(schema: str) -> Iterator[Any]:
    opened: list[Any] = []

    def make(dsn: str = pg_support.DSN) -> Any:
        from session_manager.store.postgres import PostgresStore

        store = PostgresStore(PostgresSettings(dsn=dsn, schema=schema))
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def test_every_connection_carries_keepalives_and_a_user_timeout(store_factory: Any) -> None:
    # Prevents: a silent network partition hanging a call (or a pooled or listening
    # connection staying dead) until the OS gives up hours later, and a vanished
    # instance's backend keeping its advisory locks as long.
    store = store_factory()
    params, sockopts, server = _observed(store)
    assert {k: params.get(k) for k in KEEPALIVES} == KEEPALIVES
    assert sockopts == {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
                        "keepalives_count": 3, "tcp_user_timeout": 30000}
    assert server == {"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5",
                      "tcp_keepalives_count": "3", "tcp_user_timeout": "30000"}
    # The migration's and the listener's connections are opened from the same string.
    import psycopg

    given = psycopg.conninfo.conninfo_to_dict(store.db.conninfo)
    assert {k: given.get(k) for k in KEEPALIVES} == KEEPALIVES


def test_a_dsn_s_own_keepalive_values_win(store_factory: Any) -> None:
    # Prevents: the adapter's defaults overriding what an operator set in the DSN.
    import psycopg

    dsn = psycopg.conninfo.make_conninfo(pg_support.DSN, keepalives_idle="7", tcp_user_timeout="4321")
    params, sockopts, server = _observed(store_factory(dsn))
    assert (params["keepalives_idle"], params["tcp_user_timeout"], params["keepalives_interval"]) == (
        "7", "4321", "5")
    assert (sockopts["keepalives_idle"], sockopts["tcp_user_timeout"], sockopts["keepalives_count"]) == (7, 4321, 3)
    assert (server["tcp_keepalives_idle"], server["tcp_user_timeout"], server["tcp_keepalives_count"]) == (
        "7", "4321", "3")


def test_keepalives_off_in_the_dsn_stay_off() -> None:
    # Prevents: keepalives forced on (either side) against a DSN's keepalives=0.
    import psycopg

    given = psycopg.conninfo.conninfo_to_dict(
        PostgresSettings(dsn="postgresql://db/sm?keepalives=0").conninfo())
    assert given["keepalives"] == "0"
    options = str(given["options"])
    assert "tcp_keepalives" not in options and "-c tcp_user_timeout=30000" in options
    assert "-c statement_timeout=30000" in options


def _outbox(schema_name: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    import psycopg
    from psycopg import sql

    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema_name)))
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def test_the_outbox_retention_is_an_adapter_option_that_pruning_honours(schema: str) -> None:
    # Prevents: a retention fixed at 10 minutes whatever the configuration says, or one a
    # reload does not change.
    pg_support.open_store(schema).close()  # the tables, before any listener prunes
    for age in ("2 hours", "30 minutes"):
        _outbox(schema, "INSERT INTO outbox (instance, function_id, payload, created_at)"
                " VALUES ('elsewhere', %s, '{}', now() - %s::interval)", (age, age))

    def ages() -> list[str]:
        return sorted(r[0] for r in _outbox(schema, "SELECT function_id FROM outbox WHERE instance = 'elsewhere'"))

    fake = FakeEngine()
    host = boot(fake, seed=pg_value(schema, outbox_retention_ms=3_600_000))
    try:
        first = host.runtime.store
        assert first.settings.outbox_retention_s == 3600
        # The worker listens though nothing observes yet (its observers come through the engine).
        assert first.outbox.listening
        # One hour: the two-hour-old row goes, the half-hour-old one stays (the default would prune it).
        assert wait_for(lambda: ages() == ["30 minutes"])
        fake.set_config(pg_value(schema, outbox_retention_ms=1000))
        assert fake.invoke("session::config-status", {})["last_outcome"] == "applied"
        assert host.runtime.store is not first
        assert host.runtime.store.settings.outbox_retention_s == 1.0
        assert wait_for(lambda: ages() == [])
    finally:
        host.close()


def test_a_dsn_s_own_server_options_are_kept_beside_the_adapter_s(store_factory: Any, schema: str) -> None:
    # Prevents: the adapter's `options` (search_path, statement_timeout, keepalives) replacing a DSN's
    # own `options`, silently dropping an operator's lock_timeout or timezone; and a DSN's search_path
    # sending the store to another schema than its configured one.
    import psycopg

    dsn = psycopg.conninfo.make_conninfo(pg_support.DSN, options="-c lock_timeout=1234 -c search_path=public")
    store = store_factory(dsn)
    with store.db.conn() as conn:
        assert conn.execute("SHOW lock_timeout").fetchone()[0] == "1234ms"
        assert conn.execute("SHOW search_path").fetchone()[0] == f'"{schema}"'
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "30s"
    given = psycopg.conninfo.conninfo_to_dict(store.db.conninfo)  # the listener's and migration's too
    assert str(given["options"]).startswith("-c lock_timeout=1234 -c search_path=public -c ")
    # What it writes lands in its schema: a store on the plain DSN and the same schema reads it back.
    store.commit("s_1", Commit(meta=meta("s_1")))
    plain = store_factory()
    assert plain.get_meta("s_1") == meta("s_1")
