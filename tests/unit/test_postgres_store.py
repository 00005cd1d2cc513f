"""The postgres adapter in one process: exact values, list filters, migrations,
failures and secrets, embedded and iii hosting, hot reload fs <-> postgres."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import session_manager
from session_manager._wire import events as ev
from session_manager._worker.config_client import BuildError
from session_manager._worker.config_value import parse_config
from session_manager._worker.runtime import build_store
from session_manager.errors import StoreError
from session_manager.store import Commit
from session_manager.testing import FakeEngine
from tests import pg_support
from tests.pg_support import text
from tests.unit.test_configuration import boot, fs
from tests.unit.test_postgres_instances import wait_for

pytestmark = pytest.mark.postgres

SECRET = "s3cret-Pw-" + uuid.uuid4().hex[:6]


@pytest.fixture
def sm(schema: str) -> Iterator[session_manager.SessionManager]:
    manager = session_manager.open(store=pg_support.open_store(schema))
    yield manager
    manager.close()


def pg_value(schema_name: str, dsn: str = pg_support.DSN, **extra: Any) -> dict[str, Any]:
    return {"adapter": {"name": "postgres", "config": {"dsn": dsn, "schema": schema_name, **extra}}}


# -- exact values -------------------------------------------------------------------


def test_values_round_trip_exactly(sm: session_manager.SessionManager, schema: str) -> None:
    # Prevents: jsonb normalising what we store (key order, NUL, big integers, nesting).
    metadata = {"z": 1, "a": {"y": [1, {"c": "x\u0000y"}], "b": None}, "nul": "\u0000", "big": 2**70}
    sid = sm.call("session::create", {"title": "t\u0000", "metadata": metadata})["session_id"]
    message = {"role": "user", "content": [{"type": "text", "text": "a\u0000b"}], "timestamp": 1}
    eid = sm.call("session::append", {"session_id": sid, "message": message})["entry_id"]
    sm.close()
    reopened = session_manager.open(store=pg_support.open_store(schema))
    try:
        meta = reopened.call("session::get", {"session_id": sid})["meta"]
        assert meta["metadata"] == metadata and list(meta["metadata"]) == ["z", "a", "nul", "big"]
        assert list(meta["metadata"]["a"]) == ["y", "b"] and meta["title"] == "t\u0000"
        entry = reopened.call("session::get-message", {"session_id": sid, "entry_id": eid})["entry"]
        assert orjson.dumps(entry["message"]) == orjson.dumps(message)
        listed = reopened.call("session::list", {"metadata": {"nul": "\u0000"}})["sessions"]
        assert [m["session_id"] for m in listed] == [sid]
        assert reopened.call("session::list", {"metadata": {"big": 2**70}})["sessions"][0]["metadata"] == metadata
    finally:
        reopened.close()


def test_list_filter_is_equality_not_containment(sm: session_manager.SessionManager) -> None:
    # Prevents: jsonb @> (containment) leaking through as the filter rule.
    full = sm.call("session::create", {"metadata": {"tags": [1, 2], "o": {"a": 1, "b": 2},
                                                    "k\u0000": 1, "k\ufffd": 2}})["session_id"]
    exact = sm.call("session::create", {"metadata": {"tags": [1], "o": {"a": 1}}})["session_id"]
    for want, found in (
        ({"tags": [1]}, [exact]),
        ({"o": {"a": 1}}, [exact]),
        ({"tags": [1, 2]}, [full]),
        ({"tags": [2, 1]}, []),
        ({"o": {"b": 2, "a": 1}}, [full]),
        ({"k\u0000": 1}, [full]),  # a NUL key and its look-alike stay two keys in the filter column
        ({"k\u0000": 2}, []),
    ):
        listed = sm.call("session::list", {"metadata": want})["sessions"]
        assert [m["session_id"] for m in listed] == found, want


def test_list_pages_in_order_with_status_filter(sm: session_manager.SessionManager) -> None:
    # Prevents: keyset paging over the index skipping or repeating rows past one batch.
    made = [sm.call("session::create", {"title": str(i)})["session_id"] for i in range(450)]
    for sid in made[::3]:
        sm.call("session::set-status", {"session_id": sid, "status": "done"})
    seen: list[str] = []
    cursor = None
    while True:
        page = sm.call("session::list", {"status": "done", "limit": 70, "order": "created_asc",
                                         **({"cursor": cursor} if cursor else {})})
        seen += [m["session_id"] for m in page["sessions"]]
        cursor = page.get("next_cursor")
        if cursor is None:
            break
    expected = sorted(made[::3], key=lambda s: (sm.call("session::get", {"session_id": s})["meta"]["created_at"], s))
    assert seen == expected


def test_a_batch_larger_than_one_notify_reaches_other_instances_whole(schema: str) -> None:
    # Prevents: events of a big append-many lost past the first NOTIFY's worth of ids.
    with session_manager.open(store=pg_support.open_store(schema)) as writer, \
            session_manager.open(store=pg_support.open_store(schema)) as reader:
        seen: list[str] = []
        reader.observe({"function_id": ev.ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
        sid = writer.call("session::create", {})["session_id"]
        out = writer.call("session::append-many", {"session_id": sid, "messages": [text(str(i)) for i in range(700)]})
        assert wait_for(lambda: len(seen) >= 700)
        assert seen == out["entry_ids"]
        assert reader.call("session::get", {"session_id": sid})["meta"]["message_count"] == 700


# -- schema and migrations --------------------------------------------------------------


def test_instances_booting_at_once_migrate_once(schema: str) -> None:
    # Prevents: two instances racing the migrations (duplicate tables, a half-made schema).
    import psycopg

    stores: list[Any] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def boot_one() -> None:
        barrier.wait()
        try:
            stores.append(pg_support.open_store(schema))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=boot_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == [] and len(stores) == 4
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            rows = conn.execute(f'SELECT version FROM "{schema}".schema_version').fetchall()
        from session_manager.store.postgres.schema import MIGRATIONS

        assert rows == [(len(MIGRATIONS),)]
        stores[0].commit("s", Commit(
            meta={"session_id": "s", "title": "", "description": "", "status": "idle",
                  "created_at": 1, "updated_at": 1, "message_count": 0}))
        assert stores[3].get_meta("s") is not None
    finally:
        for s in stores:
            s.close()


# -- failures and secrets -------------------------------------------------------------


def test_an_unreachable_server_fails_cleanly_without_the_password() -> None:
    # Prevents: a boot that hangs or leaks the DSN's password into the error.
    pg_support.require()
    dsn = f"postgresql://app:{SECRET}@127.0.0.1:1/test"
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    with pytest.raises(StoreError) as err:
        PostgresStore(PostgresSettings(dsn=dsn, connect_timeout_ms=1000))
    assert SECRET not in str(err.value) and "127.0.0.1" in str(err.value)
    with pytest.raises(BuildError) as built:
        build_store(parse_config(pg_value("x", dsn)))
    assert SECRET not in str(built.value)
    assert SECRET not in parse_config(pg_value("x", dsn)).adapter_label()
    for broken in (f"postgresql://app:{SECRET}@127.0.0.1:1/test?bogus=1", f"host=127.0.0.1 password={SECRET} oops"):
        with pytest.raises(StoreError) as err:
            PostgresStore(PostgresSettings(dsn=broken))
        assert SECRET not in str(err.value) and "dsn" in str(err.value)
        assert SECRET not in parse_config(pg_value("x", broken)).adapter_label()


def test_pool_exhaustion_is_a_bounded_wait(schema: str) -> None:
    # Prevents: a call hanging forever when every connection is taken.
    store = pg_support.open_store(schema, pool_size=1, pool_timeout_ms=300)
    manager = session_manager.open(store=store)
    try:
        sid = manager.call("session::create", {})["session_id"]
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with store.mutation(["elsewhere"]):
                held.set()
                release.wait(30)

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(10)
        with pytest.raises(session_manager.SessionError) as err:
            manager.call("session::append", {"session_id": sid, "message": text("x")})
        assert err.value.code == "session/storage"
        release.set()
        holder.join()
        manager.call("session::append", {"session_id": sid, "message": text("x")})
        assert manager.call("session::get", {"session_id": sid})["meta"]["message_count"] == 1
    finally:
        manager.close()


def test_open_with_a_postgres_uri() -> None:
    # Prevents: session_manager.open("postgresql://...") opening a data_dir named like a URI.
    import psycopg

    pg_support.require()
    db = "smtest_db_" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    try:
        target = pg_support.DSN.rsplit("/", 1)[0] + "/" + db  # the test server's URI, another database
        with session_manager.open(target) as first, session_manager.open(target) as second:
            seen: list[str] = []
            second.observe({"function_id": ev.ON_CREATED}, lambda e: seen.append(e["session_id"]))
            sid = first.call("session::create", {"title": "uri"})["session_id"]
            assert second.call("session::get", {"session_id": sid})["meta"]["title"] == "uri"
            assert wait_for(lambda: bool(seen)) and seen == [sid]
    finally:
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


# -- the iii host -------------------------------------------------------------------------


def test_iii_host_on_postgres_shares_events_and_refuses_the_store_protocol(schema: str) -> None:
    # Prevents: a postgres instance serving session::store::* (fs mains only), or its engine's
    # observers missing what another instance wrote.
    fake = FakeEngine()
    host = boot(fake, seed=pg_value(schema))
    neighbour = session_manager.open(store=pg_support.open_store(schema))
    try:
        added = fake.add_observer(ev.ON_CREATED)
        own = fake.invoke("session::create", {"title": "mine"})["session_id"]
        theirs = neighbour.call("session::create", {"title": "theirs"})["session_id"]
        assert wait_for(lambda: host.emitter.flush(5) and len(fake.event_calls()) >= 2)
        host.emitter.flush()
        assert sorted(p["session_id"] for _, p in fake.event_calls()) == sorted([own, theirs])
        assert len(added.delivered) == 2
        from iii import InvocationError

        with pytest.raises(InvocationError) as err:
            fake.invoke("session::store::get-meta", {"session_id": own})
        assert err.value.message.startswith("session/storage: ") and "postgres mode" in err.value.message
    finally:
        neighbour.close()
        host.close()


def test_hot_reload_fs_to_postgres_and_back(schema: str, tmp_path: Path) -> None:
    # Prevents: an adapter swap to postgres that keeps the old store, resyncs nothing, leaks the
    # password into config-status, or cannot swap back.
    fake = FakeEngine()
    host = boot(fake, seed=fs(tmp_path / "a"))
    try:
        fake.invoke("session::create", {"title": "on fs"})
        with session_manager.open(store=pg_support.open_store(schema)) as prepared:
            pg_sid = prepared.call("session::create", {"title": "on pg"})["session_id"]
        for fid in ev.EVENT_FUNCTIONS:
            fake.add_observer(fid)
        fake.set_config(pg_value(schema))
        host.emitter.flush()
        assert host.runtime.store.shared
        calls = [(fid, p["session_id"]) for fid, p in fake.event_calls()]
        assert (ev.ON_CREATED, pg_sid) in calls and (ev.ON_DELETED, "s_001") in calls
        assert fake.invoke("session::get", {"session_id": pg_sid})["meta"]["title"] == "on pg"
        assert fake.invoke("session::config-status", {})["last_outcome"] == "applied"
        # A DSN whose password reaches nothing: rejected, last good kept, password nowhere.
        bad = f"postgresql://app:{SECRET}@127.0.0.1:1/test"
        fake.set_config(pg_value(schema, bad, connect_timeout_ms=1000))
        status = fake.invoke("session::config-status", {})
        assert status["last_outcome"] == "rejected" and SECRET not in str(status)
        assert fake.invoke("session::get", {"session_id": pg_sid})["meta"]["title"] == "on pg"
        fake.set_config(fs(tmp_path / "a"))
        assert not host.runtime.store.shared
        assert fake.invoke("session::get", {"session_id": "s_001"})["meta"]["title"] == "on fs"
        assert fake.invoke("session::get", {"session_id": pg_sid}) is None
    finally:
        host.close()
