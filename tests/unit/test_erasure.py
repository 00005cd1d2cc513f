"""Erasure is real: after ``delete``, ``purge``, ``delete-tree`` and a retention
sweep, no byte of a deleted session's text remains in the store.

A unique marker goes into every place a session keeps text (title,
description, messages, a message's earlier revision, a draft, an attachment's
name and bytes); after the deletion the test searches:

- fs: every file under data_dir, at once (the store still open) and after close;
- memory: every string and bytes object reachable from the store;
- sqlite: every file beside the database (the database, its ``-wal`` and
  ``-shm``), at once (secure_delete zeroes freed cells, the delete's commit
  checkpoints and truncates the WAL);
- postgres: every row of every table of the store's schema, as text (bytea as
  hex). Heap pages, TOAST and WAL files are the server's and out of reach; see
  docs/purge.md for what VACUUM does with the dead tuples.

Each search is first shown to find the marker before the deletion.
"""

from __future__ import annotations

import base64
import gc
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import SessionManager
from session_manager._hosts import retention
from session_manager.clock import ManualClock
from session_manager.store.memory import MemoryStore
from tests import pg_support

DAY_MS = 86_400_000


def _text(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def _fs_holds(data_dir: Path) -> Callable[[bytes], list[str]]:
    def holds(marker: bytes) -> list[str]:
        found = []
        for root, _dirs, files in os.walk(data_dir):
            for name in files:
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    if marker in f.read():
                        found.append(os.path.relpath(path, data_dir))
        return found
    return holds


def _memory_holds(store: MemoryStore) -> Callable[[bytes], list[str]]:
    def holds(marker: bytes) -> list[str]:
        text = marker.decode()
        found, seen, todo = [], set(), [store.__dict__]
        while todo:
            obj = todo.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if (isinstance(obj, str) and text in obj) or (isinstance(obj, bytes | bytearray) and marker in obj):
                found.append(repr(obj)[:60])
            elif isinstance(obj, dict | list | tuple | set | frozenset) or (
                    not isinstance(obj, type) and type(obj).__module__.startswith("session_manager.store")):
                todo.extend(gc.get_referents(obj))  # the store's own objects and containers, no classes
        return found
    return holds


def _pg_holds(schema: str) -> Callable[[bytes], list[str]]:
    import psycopg
    from psycopg import sql

    def holds(marker: bytes) -> list[str]:
        found = []
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            tables = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))]
            # Not the outbox: a deleted session's events stay there until pruned (outbox_retention_ms),
            # for the instances that have not read them yet (docs/purge.md).
            for table in (t for t in tables if t != "outbox"):
                query = sql.SQL("SELECT t::text FROM {}.{} t").format(sql.Identifier(schema), sql.Identifier(table))
                for (row,) in conn.execute(query):
                    if marker.decode() in row or marker.hex() in row:
                        found.append(f"{table}: {row[:80]}")
        return found
    return holds


class Adapter:
    def __init__(self, sm: SessionManager, clock: ManualClock, holds: Callable[[bytes], list[str]]) -> None:
        self.sm, self.clock, self.holds = sm, clock, holds


@pytest.fixture(params=["fs", "memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def adapter(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Adapter]:
    monkeypatch.setattr(retention, "POLL_S", 3600.0)  # the test ticks the sweep itself
    clock = ManualClock(1_000_000)
    if request.param == "fs":
        sm = session_manager.open(tmp_path / "d", clock=clock)
        yield Adapter(sm, clock, _fs_holds(tmp_path / "d"))
        sm.close()
    elif request.param == "sqlite":
        (tmp_path / "db").mkdir()
        sm = session_manager.open(f"sqlite:///{tmp_path / 'db' / 'sessions.db'}", clock=clock)
        yield Adapter(sm, clock, _fs_holds(tmp_path / "db"))
        sm.close()
    elif request.param == "memory":
        store = MemoryStore()
        sm = session_manager.open(store=store, clock=clock)
        yield Adapter(sm, clock, _memory_holds(store))
        sm.close()
    else:
        with pg_support.schema() as name:
            sm = session_manager.open(store=pg_support.open_store(name), clock=clock)
            try:
                yield Adapter(sm, clock, _pg_holds(name))
            finally:
                sm.close()


def _marked_session(sm: SessionManager, marker: str, metadata: dict[str, Any]) -> str:
    """A session holding ``marker`` everywhere a session keeps text (not in its metadata:
    on postgres the on-deleted event keeps that in the outbox, see docs/purge.md)."""
    sid: str = sm.call("session::create", {"title": f"t {marker}", "description": marker,
                                           "metadata": metadata})["session_id"]
    first = sm.call("session::append", {"session_id": sid, "message": _text(f"draft {marker} one")})
    sm.call("session::update-message", {"session_id": sid, "entry_id": first["entry_id"],
                                        "content": [{"type": "text", "text": f"edited {marker}"}]})
    for i in range(3):
        sm.call("session::append", {"session_id": sid, "message": _text(f"{marker} {i}")})
    data = base64.b64encode(f"bytes {marker}".encode()).decode()
    put = sm.call("session::put-attachment", {"session_id": sid, "name": f"{marker}.txt", "mime": "text/plain",
                                              "data": data})
    sm.call("session::set-draft", {"session_id": sid, "draft": f"unsent {marker}",
                                   "attachment_ids": [put["attachment"]["attachment_id"]]})
    return sid


def _erase_delete(a: Adapter, sid: str, root: str) -> None:
    assert a.sm.call("session::delete", {"session_id": sid}) == {"deleted": True}


def _erase_purge(a: Adapter, sid: str, root: str) -> None:
    out = a.sm.call("session::purge", {"metadata": {"owner": "gone"}})
    assert sorted(out["session_ids"]) == sorted([sid, root])


def _erase_tree(a: Adapter, sid: str, root: str) -> None:
    assert a.sm.call("session::delete-tree", {"session_id": root}) == {"deleted": [sid, root]}


def _erase_retention(a: Adapter, sid: str, root: str) -> None:
    a.clock.advance(3 * DAY_MS)
    a.sm.call("session::append", {"session_id": _keeper(a.sm), "message": _text("still here")})
    a.sm.set_retention(2)
    assert a.sm.retention.tick() == 2


def _keeper(sm: SessionManager) -> str:
    return str(sm.call("session::purge", {"metadata": {"owner": "kept"}, "dry_run": True})["session_ids"][0])


@pytest.mark.parametrize("erase", [_erase_delete, _erase_purge, _erase_tree, _erase_retention],
                         ids=["delete", "purge", "delete-tree", "retention"])
def test_no_byte_of_a_deleted_session_remains(adapter: Adapter, erase: Callable[[Adapter, str, str], None]) -> None:
    # Prevents: "deleted" text that stays readable in the store's files (a sidecar index keeping
    # the title, an attachment file, an event outbox keeping message text), i.e. a deletion that
    # is not an erasure; and one that waits for close to happen.
    marker = f"ERASE-{uuid.uuid4().hex}"
    sm = adapter.sm
    kept = sm.call("session::create", {"title": "kept", "metadata": {"owner": "kept"}})["session_id"]
    sm.call("session::append", {"session_id": kept, "message": _text("keep this")})
    root = sm.call("session::create", {"metadata": {"owner": "gone"}})["session_id"]
    sid = _marked_session(sm, marker, {"owner": "gone", "parent_session_id": root})
    sm.call("session::list", {})  # an fs store writes its sessions index on a list
    assert adapter.holds(marker.encode())  # the search finds it while it exists
    erase(adapter, sid, root)
    assert adapter.holds(marker.encode()) == []
    assert sm.call("session::get", {"session_id": sid}) is None
    assert sm.call("session::messages", {"session_id": kept})["messages"][0]["message"]["content"][0]["text"] \
        == "keep this"


def test_sqlite_a_reader_on_an_old_snapshot_delays_the_wal_erasure_until_it_ends(tmp_path: Path) -> None:
    # Prevents: a claim of erasure while the WAL still holds the deleted pages for good: a reader
    # holding an older snapshot keeps the delete's checkpoint from truncating the WAL (documented
    # delay), and the next checkpoint once it has ended removes them.
    import sqlite3

    db = tmp_path / "sessions.db"
    marker = f"ERASE-{uuid.uuid4().hex}"
    sm = session_manager.open(f"sqlite:///{db}")
    try:
        sid = _marked_session(sm, marker, {"owner": "gone"})
        reader = sqlite3.connect(db, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM sessions").fetchone()  # a read snapshot held open
        assert sm.call("session::delete", {"session_id": sid}) == {"deleted": True}
        holds = _fs_holds(tmp_path)
        assert holds(marker.encode()), "with a reader on an old snapshot the WAL cannot be truncated yet"
        store: Any = sm.service.store
        assert store.db.erase_pending
        reader.execute("COMMIT")
        reader.close()
        store.db.checkpoint_erased(store.db.conn(), wait=True)  # what the follower's next beat runs
        assert holds(marker.encode()) == [] and not store.db.erase_pending
    finally:
        sm.close()


def test_fs_the_scrubbed_sessions_index_stays_valid_and_lists_right_after_reopen(tmp_path: Path) -> None:
    # Prevents: an erasure of the sessions index that damages it (every later open reading every
    # log), or a scrubbed row trusted as a session's meta.
    from session_manager.store.fs import _sessions_index

    marker = f"ERASE-{uuid.uuid4().hex}"
    d = tmp_path / "d"
    with session_manager.open(d) as sm:
        keep = [sm.create(title=f"keep {i}").session_id for i in range(3)]
        gone = sm.create(title=marker).session_id
        sm.list()
        index = d / ".index" / _sessions_index.FILE
        assert marker.encode() in index.read_bytes()
        sm.delete(gone)
        assert marker.encode() not in index.read_bytes()
        recorded = _sessions_index.read(index)
        assert recorded is not None  # the checksum holds
    with session_manager.open(d) as sm:
        assert sorted(m.session_id for m in sm.list().sessions) == sorted(keep)
        assert sm.ensure(gone, title="again").created  # the same id again: a new session, not the row
        assert sm.get(gone).meta.title == "again"
    with session_manager.open(d) as sm:
        assert sorted(m.session_id for m in sm.list().sessions) == sorted([*keep, gone])
