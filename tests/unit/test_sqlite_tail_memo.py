"""messages-tail pages kept per session version over the sqlite store (issue 23's tail): the
version is the session row's ``rev`` (schema version 8), read in the statement that reads the
meta and leaf, so a kept page is answered only while the session is exactly as it was: every
write is seen at once, another connection's or process's as well as this one's, and the answer
equals a page built afresh."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import session_manager
from session_manager.clock import ManualClock
from tests.pg_support import text
from tests.unit.tail_memo_support import a_kept_page_is_answered_as_a_copy_of_its_own, every_write_is_in_the_next_tail


def test_every_write_by_either_connection_is_in_the_next_tail_as_built_afresh(tmp_path: Path) -> None:
    # Prevents: a kept page answered after a write it does not show: another connection's append,
    # update-message (a revision leaves the leaf and, within one millisecond, the meta text as they
    # were), set-active-leaf, set-meta, a delete and a recreate under the same id; or this one's own.
    uri = f"sqlite:///{tmp_path / 'a.db'}"
    clock = ManualClock(5_000)  # never moves: consecutive writes leave updated_at as it was
    a, b = session_manager.open(uri, clock=clock), session_manager.open(uri, clock=clock)
    fresh = session_manager.open(uri)
    try:
        every_write_is_in_the_next_tail(a, b, fresh)
    finally:
        a.close()
        b.close()
        fresh.close()


WRITER = """
import sys, session_manager
with session_manager.open(sys.argv[1]) as sm:
    sm.append(sys.argv[2], message={"role": "user", "content": [{"type": "text", "text": sys.argv[3]}], "timestamp": 1})
"""


def test_another_process_append_is_in_the_next_tail(tmp_path: Path) -> None:
    # Prevents: a page kept by this process answered after another process's commit (a version
    # kept in this process only would miss it).
    uri = f"sqlite:///{tmp_path / 'p.db'}"
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id
        sm.append(sid, message=text("here"))
        req = {"session_id": sid, "limit": 10}
        first = sm.call("session::messages-tail", req)
        assert sm.call("session::messages-tail", req) == first  # kept
        subprocess.run([sys.executable, "-c", WRITER, uri, sid, "there"], check=True, timeout=60)
        after = sm.call("session::messages-tail", req)
        assert [m["message"]["content"][0]["text"] for m in after["messages"]] == ["here", "there"]


def test_a_kept_page_is_answered_as_a_copy_of_its_own(tmp_path: Path) -> None:
    # Prevents: two callers handed one object, so one's change shows in the other's answer.
    with session_manager.open(f"sqlite:///{tmp_path / 'c.db'}") as sm:
        a_kept_page_is_answered_as_a_copy_of_its_own(sm)


def test_the_version_changes_with_every_write_and_only_then(tmp_path: Path) -> None:
    # Prevents: a version that two states of one session share (a write it misses: a revision,
    # a store commit with no meta), or that changes with no write (no page answered again).
    from session_manager.store import Commit

    with session_manager.open(f"sqlite:///{tmp_path / 'v.db'}", clock=ManualClock(1)) as sm:
        store = sm.service.store
        sid = sm.call("session::ensure", {"session_id": "v"})["session_id"]
        eid = sm.call("session::append", {"session_id": sid, "message": text("a")})["entry_id"]
        seen = []
        writes: list[Callable[[], Any]] = [
            lambda: sm.call("session::update-message", {"session_id": sid, "entry_id": eid,
                                                       "content": [{"type": "text", "text": "b"}]}),
            lambda: sm.call("session::update-message", {"session_id": sid, "entry_id": eid,
                                                       "content": [{"type": "text", "text": "c"}]}),
            lambda: sm.call("session::append", {"session_id": sid, "message": text("d")}),
            lambda: sm.call("session::set-active-leaf", {"session_id": sid, "entry_id": eid}),
            lambda: store.commit(sid, Commit(entries=({**store.get_entry(sid, eid), "revision": 9},))),
            lambda: (sm.call("session::delete", {"session_id": sid}), sm.call("session::ensure", {"session_id": sid})),
        ]
        for write in [lambda: None, *writes]:
            write()
            meta, leaf, version = store.meta_and_leaf_since(sid, None)
            assert meta is not None and version is not None
            assert store.meta_and_leaf_since(sid, version) == (meta, leaf, version)
            seen.append(version)
        assert len(set(seen)) == len(seen)
        sm.call("session::delete", {"session_id": sid})
        assert store.meta_and_leaf_since(sid, seen[-1]) == (None, None, None)


def test_a_version_7_file_gets_versions(tmp_path: Path) -> None:
    # Prevents: sessions of a file made before version 8 left without a version (their pages
    # never kept) or its trigger left as it was (new sessions without one).
    from tests.unit.test_sqlite_open import _as_version_7

    target = tmp_path / "v7.db"
    uri = f"sqlite:///{target}"
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id
        sm.append(sid, message=text("old"))
        before = sm.call("session::messages-tail", {"session_id": sid})
    with sqlite3.connect(target) as conn:
        _as_version_7(conn)
    with session_manager.open(uri) as sm:
        store = sm.service.store
        assert store.meta_and_leaf_since(sid, None)[2] is not None
        assert sm.call("session::messages-tail", {"session_id": sid}) == before
        other = sm.create().session_id
        assert store.meta_and_leaf_since(other, None)[2] is not None
    with sqlite3.connect(target) as conn:
        assert conn.execute("SELECT count(*) FROM sessions WHERE rev IS NULL").fetchone()[0] == 0


def test_a_write_that_leaves_rev_as_it_was_is_seen_by_its_leaf_or_meta(tmp_path: Path) -> None:
    # Prevents: a kept page answered after a write by a process of the previous release that had
    # the file open before it was migrated (it writes no rev): its leaf and meta are in the version.
    target = tmp_path / "old.db"
    with session_manager.open(f"sqlite:///{target}") as sm:
        sid = sm.create().session_id
        first = sm.append(sid, message=text("one")).entry_id
        sm.append(sid, message=text("two"))
        req = {"session_id": sid, "limit": 10}
        assert len(sm.call("session::messages-tail", req)["messages"]) == 2
        with sqlite3.connect(target) as conn:  # as that release's set-active-leaf: rev untouched
            conn.execute("UPDATE sessions SET leaf = ? WHERE session_id = ?", (first, sid))
        assert [m["entry_id"] for m in sm.call("session::messages-tail", req)["messages"]] == [first]
        with sqlite3.connect(target) as conn:
            meta = conn.execute("SELECT meta FROM sessions WHERE session_id = ?", (sid,)).fetchone()[0]
            renamed = meta.replace('"title":""', '"title":"x"')
            conn.execute("UPDATE sessions SET meta = ? WHERE session_id = ?", (renamed, sid))
        version = sm.service.store.meta_and_leaf_since(sid, None)[2]
        assert sm.service.store.meta_and_leaf_since(sid, None)[2] == version
        assert version is not None and '"title":"x"' in str(version)
