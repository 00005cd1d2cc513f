"""A postgres listener that was away past the outbox retention resyncs, and its
resync announces the deletions it missed (two real instances on one schema;
the observing one reaches the server through a TCP relay that can go away)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import session_manager
from session_manager._wire import events as ev
from tests import pg_support
from tests.pg_support import text
from tests.unit.test_postgres_instances import Proxy, open_sm, wait_for

pytestmark = pytest.mark.postgres

RETENTION_S = 0.5
WATCHED = (ev.ON_CREATED, ev.ON_DELETED, ev.ON_MESSAGE_ADDED)


class SilentProxy(Proxy):
    """A relay that can also fall silent: bytes go nowhere, no connection is
    closed (a partition that only keepalives would notice), until :meth:`stop`."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(host, port)
        self.silent = False

    def _pump(self, src: Any, dst: Any) -> None:  # type: ignore[override]
        try:
            while data := src.recv(65536):
                if not self.silent:
                    dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.close()

    def start(self) -> None:
        self.silent = False
        super().start()


@pytest.fixture
def proxy() -> Iterator[SilentProxy]:
    import psycopg

    parts = psycopg.conninfo.conninfo_to_dict(pg_support.DSN)
    relay = SilentProxy(str(parts.get("host") or "127.0.0.1"), int(parts.get("port") or 5432))
    relay.start()
    yield relay
    relay.stop()


def open_through(proxy: Proxy, schema: str, retention_s: float = RETENTION_S) -> session_manager.SessionManager:
    import psycopg

    from session_manager.store.postgres import PostgresSettings, PostgresStore

    dsn = psycopg.conninfo.make_conninfo(pg_support.DSN, host="127.0.0.1", port=str(proxy.port))
    return session_manager.open(store=PostgresStore(PostgresSettings(
        dsn=dsn, schema=schema, connect_timeout_ms=1000, pool_timeout_ms=1500, statement_timeout_ms=5000,
        outbox_retention_s=retention_s)))


def watch(sm: session_manager.SessionManager) -> list[tuple[str, dict[str, Any]]]:
    seen: list[tuple[str, dict[str, Any]]] = []
    for fid in WATCHED:
        sm.observe({"function_id": fid}, lambda e, fid=fid: seen.append((fid, e)))
    return seen


def of(seen: list[tuple[str, dict[str, Any]]], fid: str, since: int = 0) -> list[dict[str, Any]]:
    return [e for f, e in seen[since:] if f == fid]


def outage(proxy: Proxy, sm: session_manager.SessionManager, during: Any = None) -> None:
    """Cut the instance off, run ``during`` elsewhere, stay away past the retention, come back."""
    outbox = sm.service.store.outbox
    proxy.stop()
    assert wait_for(lambda: not outbox.listening, timeout=30)
    if during is not None:
        during()
    time.sleep(RETENTION_S * 3)  # past the retention: the rows it missed may be pruned
    proxy.start()
    assert wait_for(lambda: outbox.listening, timeout=60)


def test_a_resync_announces_each_deletion_it_missed_once(schema: str, proxy: Proxy) -> None:
    # Prevents: a resync that replays only what exists, so this instance's observers keep
    # showing sessions deleted while it was away (or get a delete for one that still exists,
    # a second delete on the next resync, or lose the resync's other events).
    writer = open_sm(schema)
    away = open_through(proxy, schema)
    try:
        seen = watch(away)
        writer.call("session::ensure", {"session_id": "keep", "metadata": {"owner": "u_1"}})
        writer.call("session::ensure", {"session_id": "gone", "metadata": {"owner": "u_1"}})
        writer.call("session::ensure", {"session_id": "bare"})
        writer.call("session::append", {"session_id": "gone", "entry_id": "g1", "message": text("g")})
        away.call("session::ensure", {"session_id": "mine", "metadata": {"owner": "u_2"}})  # its own event
        assert wait_for(lambda: {e["session_id"] for e in of(seen, ev.ON_CREATED)} == {"keep", "gone", "bare",
                                                                                       "mine"})
        assert wait_for(lambda: [e["entry_id"] for e in of(seen, ev.ON_MESSAGE_ADDED)] == ["g1"])
        before = len(seen)

        def meanwhile() -> None:
            for sid in ("gone", "bare", "mine"):
                writer.call("session::delete", {"session_id": sid})
            writer.call("session::append", {"session_id": "keep", "entry_id": "k1", "message": text("k")})
            writer.call("session::ensure", {"session_id": "new"})

        outage(proxy, away, meanwhile)
        assert wait_for(lambda: len(of(seen, ev.ON_DELETED, before)) >= 3)
        assert wait_for(lambda: {e["session_id"] for e in of(seen, ev.ON_CREATED, before)} == {"keep", "new"})
        time.sleep(0.5)  # anything delivered twice or late would be in by now

        deleted = of(seen, ev.ON_DELETED, before)
        assert sorted(e["session_id"] for e in deleted) == ["bare", "gone", "mine"]  # once each, none else
        by_id = {e["session_id"]: e for e in deleted}
        # The metadata last seen rides along, so tenant-filtered observers match; the wire model holds.
        assert by_id["gone"]["session_metadata"] == {"owner": "u_1"}
        assert by_id["mine"]["session_metadata"] == {"owner": "u_2"}
        assert "session_metadata" not in by_id["bare"]
        for e in deleted:
            assert ev.DeletedEvent.model_validate(e).session_id == e["session_id"]
            assert set(e) <= {"session_id", "timestamp", "session_metadata"} and isinstance(e["timestamp"], int)
        # The deletes come before the state of what exists (an observer never removes a live session).
        fids = [f for f, _ in seen[before:]]
        assert max(i for i, f in enumerate(fids) if f == ev.ON_DELETED) < fids.index(ev.ON_CREATED)
        # The rest of the resync, whole and once: each live session and each of its entries.
        assert Counter(e["session_id"] for e in of(seen, ev.ON_CREATED, before)) == {"keep": 1, "new": 1}
        assert [e["entry_id"] for e in of(seen, ev.ON_MESSAGE_ADDED, before)] == ["k1"]
        # Read-back: this instance serves none of the deleted sessions.
        listed = away.call("session::list", {})["sessions"]
        assert sorted(s["session_id"] for s in listed) == ["keep", "new"]
        assert [away.call("session::get", {"session_id": sid}) for sid in ("gone", "bare", "mine")] == [None] * 3
        assert away.call("session::get", {"session_id": "keep"})["meta"]["message_count"] == 1
        # What it knew of them is gone too: a second resync announces no deletion again.
        known = away.service.store.outbox.known
        assert "gone" not in known and "mine" not in known and "keep" in known and "new" in known
        again = len(seen)
        outage(proxy, away)
        assert wait_for(lambda: {e["session_id"] for e in of(seen, ev.ON_CREATED, again)} == {"keep", "new"})
        time.sleep(0.5)
        assert of(seen, ev.ON_DELETED, again) == []
    finally:
        away.close()
        writer.close()


def test_a_resync_spares_sessions_created_while_it_runs(schema: str, proxy: Proxy) -> None:
    # Prevents: a session this instance creates while its listener resyncs (after the resync
    # listed the store, before it compared) being announced as deleted.
    writer = open_sm(schema)
    away = open_through(proxy, schema)
    try:
        seen = watch(away)
        for i in range(150):
            writer.call("session::ensure", {"session_id": f"s{i:03d}"})
        assert wait_for(lambda: len(of(seen, ev.ON_CREATED)) == 150)
        before = len(seen)
        outbox = away.service.store.outbox
        proxy.stop()
        assert wait_for(lambda: not outbox.listening, timeout=30)
        writer.call("session::delete", {"session_id": "s000"})
        time.sleep(RETENTION_S * 3)
        made: list[str] = []
        wrong: list[BaseException] = []  # an assert in a thread only warns: the test reads this instead
        stop = threading.Event()

        def create() -> None:  # from before the server is back until after the resync
            while not stop.is_set():
                try:
                    made.append(away.call("session::create", {})["session_id"])
                except session_manager.SessionError as e:
                    if e.code != "session/storage":
                        wrong.append(e)
                        return
                    time.sleep(0.01)
                except BaseException as e:
                    wrong.append(e)
                    return

        creator = threading.Thread(target=create)
        creator.start()
        try:
            proxy.start()
            assert wait_for(lambda: outbox.listening, timeout=60)
            assert wait_for(lambda: len(made) >= 20)
        finally:
            stop.set()
            creator.join(timeout=60)
        assert wrong == [] and not creator.is_alive()
        time.sleep(0.5)
        assert [e["session_id"] for e in of(seen, ev.ON_DELETED, before)] == ["s000"]
        assert all(sid in outbox.known for sid in made)
        # Counted in the store, not by one list page: one-round-trip creates make hundreds meanwhile.
        assert len(away.service.store.list_metas()) == 149 + len(made)
    finally:
        away.close()
        writer.close()


def test_a_deletion_is_announced_even_if_its_creation_was_not_observed(schema: str, proxy: Proxy) -> None:
    # Prevents: the record of known sessions following only observed event functions, so an
    # instance observing nothing but session::on-deleted misses the deletion of a session
    # another instance created after it started listening.
    writer = open_sm(schema)
    away = open_through(proxy, schema)
    try:
        deleted: list[dict[str, Any]] = []
        away.observe({"function_id": ev.ON_DELETED}, deleted.append)
        writer.call("session::ensure", {"session_id": "later"})
        writer.call("session::set-meta", {"session_id": "later", "metadata": {"owner": "u_3"}})
        outbox = away.service.store.outbox
        # Both rows read (neither observed here): the record has the session and its new metadata.
        assert wait_for(lambda: {"session_id": "later", "metadata": {"owner": "u_3"}} in outbox.known.snapshot())
        outage(proxy, away, lambda: writer.call("session::delete", {"session_id": "later"}))
        assert wait_for(lambda: len(deleted) >= 1)
        time.sleep(0.5)
        assert [(e["session_id"], e.get("session_metadata")) for e in deleted] == [("later", {"owner": "u_3"})]
        assert away.call("session::get", {"session_id": "later"}) is None and "later" not in outbox.known
    finally:
        away.close()
        writer.close()


def test_a_silent_partition_is_counted_from_the_last_exchange(schema: str, proxy: SilentProxy) -> None:
    # Prevents: the time away counted from when the failure was noticed, so a partition that
    # stayed silent past the retention (rows pruned meanwhile by another instance) ends in a
    # replay of rows that are gone instead of a resync, and the deletion is never announced.
    retention_s = 2.0
    writer = open_sm(schema, outbox_retention_s=retention_s)  # its listener prunes what `away` misses
    away = open_through(proxy, schema, retention_s=retention_s)
    try:
        deleted: list[str] = []
        away.observe({"function_id": ev.ON_DELETED}, lambda e: deleted.append(e["session_id"]))
        writer.call("session::ensure", {"session_id": "quiet"})
        outbox = away.service.store.outbox
        assert wait_for(lambda: "quiet" in outbox.known)
        proxy.silent = True
        writer.call("session::delete", {"session_id": "quiet"})
        time.sleep(retention_s * 3)  # the writer's listener prunes the row `away` never read
        assert outbox.listening  # nothing noticed: the partition was silent
        proxy.stop()  # now it fails, and the server is back at once
        proxy.start()
        assert wait_for(lambda: deleted == ["quiet"], timeout=60)
        time.sleep(0.5)
        assert deleted == ["quiet"] and away.call("session::get", {"session_id": "quiet"}) is None
    finally:
        away.close()
        writer.close()
