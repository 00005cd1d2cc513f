"""The sqlite adapter in the iii worker: hosted with events from other
processes, the store protocol refused, hot reload fs <-> sqlite <-> postgres,
durability retuned on the running store, a bad file rejected keeping the last
good store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._wire import events as ev
from session_manager.store.sqlite import SqliteStore
from session_manager.testing import FakeEngine
from tests import pg_support
from tests.unit.test_configuration import boot, fs
from tests.unit.test_sqlite_events import wait_for


def lite(path: Path, **extra: Any) -> dict[str, Any]:
    return {"adapter": {"name": "sqlite", "config": {"path": str(path)}}, **extra}


def test_iii_host_on_sqlite_shares_events_and_refuses_the_store_protocol(tmp_path: Path) -> None:
    # Prevents: a sqlite worker serving session::store::* (fs mains only), or its engine's
    # observers missing what another process wrote to the same file.
    fake = FakeEngine()
    host = boot(fake, seed=lite(tmp_path / "w.db"))
    neighbour = session_manager.open(f"sqlite:///{tmp_path / 'w.db'}")
    try:
        fake.add_observer(ev.ON_CREATED)
        own = fake.invoke("session::create", {"title": "mine"})["session_id"]
        theirs = neighbour.call("session::create", {"title": "theirs"})["session_id"]
        wait_for(lambda: host.emitter.flush(5) and len(fake.event_calls()) >= 2, "both creations emitted")
        host.emitter.flush()
        assert sorted(p["session_id"] for _, p in fake.event_calls()) == sorted([own, theirs])
        from iii import InvocationError

        with pytest.raises(InvocationError) as err:
            fake.invoke("session::store::get-meta", {"session_id": own})
        assert err.value.message.startswith("session/storage: ") and "sqlite mode" in err.value.message
    finally:
        neighbour.close()
        host.close()


def test_hot_reload_fs_to_sqlite_and_back(tmp_path: Path) -> None:
    # Prevents: a swap to sqlite that keeps the old store or replays nothing, a durability change
    # that needs a rebuild, a bad file that replaces the running store, or no way back to fs.
    fake = FakeEngine()
    host = boot(fake, seed=fs(tmp_path / "a"))
    try:
        fake.invoke("session::create", {"title": "on fs"})
        with session_manager.open(f"sqlite:///{tmp_path / 'b.db'}") as prepared:
            lite_sid = prepared.call("session::create", {"title": "on sqlite"})["session_id"]
        for fid in ev.EVENT_FUNCTIONS:
            fake.add_observer(fid)
        fake.set_config(lite(tmp_path / "b.db"))
        host.emitter.flush()
        store = host.runtime.store
        assert isinstance(store, SqliteStore) and store.durability == "flush"
        calls = [(fid, p["session_id"]) for fid, p in fake.event_calls()]
        assert (ev.ON_CREATED, lite_sid) in calls and (ev.ON_DELETED, "s_001") in calls
        assert fake.invoke("session::get", {"session_id": lite_sid})["meta"]["title"] == "on sqlite"
        fake.set_config(lite(tmp_path / "b.db", durability="fsync"))  # retuned in place
        assert host.runtime.store is store and store.durability == "fsync"
        fake.invoke("session::append", {"session_id": lite_sid, "message": {
            "role": "user", "content": [{"type": "text", "text": "x"}], "timestamp": 5}})
        assert store.db.conn().execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL on the next write
        assert store.db.conn().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000  # and its WAL size
        (tmp_path / "dir.db").mkdir()
        fake.set_config(lite(tmp_path / "dir.db"))
        status = fake.invoke("session::config-status", {})
        assert status["last_outcome"] == "rejected" and "is a directory" in str(status)
        assert host.runtime.store is store
        fake.set_config(fs(tmp_path / "a"))
        assert not host.runtime.store.shared
        assert fake.invoke("session::get", {"session_id": "s_001"})["meta"]["title"] == "on fs"
        assert fake.invoke("session::get", {"session_id": lite_sid}) is None
    finally:
        host.close()


@pytest.mark.postgres
def test_hot_reload_sqlite_to_postgres_and_back(schema: str, tmp_path: Path) -> None:
    # Prevents: a swap between the two shared adapters that keeps the old one or replays nothing.
    fake = FakeEngine()
    host = boot(fake, seed=lite(tmp_path / "c.db"))
    try:
        lite_sid = fake.invoke("session::create", {"title": "on sqlite"})["session_id"]
        with session_manager.open(store=pg_support.open_store(schema)) as prepared:
            pg_sid = prepared.call("session::create", {"title": "on pg"})["session_id"]
        for fid in ev.EVENT_FUNCTIONS:
            fake.add_observer(fid)
        fake.set_config({"adapter": {"name": "postgres", "config": {"dsn": pg_support.DSN, "schema": schema}}})
        host.emitter.flush()
        calls = [(fid, p["session_id"]) for fid, p in fake.event_calls()]
        assert (ev.ON_CREATED, pg_sid) in calls and (ev.ON_DELETED, lite_sid) in calls
        assert fake.invoke("session::get", {"session_id": lite_sid}) is None
        fake.set_config(lite(tmp_path / "c.db"))
        assert isinstance(host.runtime.store, SqliteStore)
        assert fake.invoke("session::get", {"session_id": lite_sid})["meta"]["title"] == "on sqlite"
    finally:
        host.close()
