"""The sqlite adapter's list-order key (schema version 5): an append to the session first
in the updated order leaves that key lagging, so its commit writes no page of the order's
index. These guard what the lag must never change: the order, cursor pages, the other
writers' keys."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import session_manager
from session_manager.clock import ManualClock
from tests.unit.test_sqlite_open import _as_version_6


def _user(text: str) -> Any:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def _keys(path: Path) -> dict[str, tuple[int, int]]:
    with sqlite3.connect(path) as conn:
        return {sid: (listed, updated) for sid, listed, updated in
                conn.execute("SELECT session_id, listed_at, updated_at FROM sessions")}


def _order(sm: Any, limit: int = 50) -> list[str]:
    """Every session in updated order, read a page of ``limit`` at a time through cursors."""
    out: list[str] = []
    cursor = None
    for _ in range(20):  # bounded: a page repeating a session would loop forever
        page = sm.list(limit=limit, cursor=cursor, order="updated_desc")
        out += [s.session_id for s in page.sessions]
        cursor = page.next_cursor
        if cursor is None:
            return out
    return out


def test_appends_to_the_first_session_leave_its_key_and_the_order_stays_exact(tmp_path: Path) -> None:
    # Prevents: the lagging key of the first session (appends to it skip the order's index) sorting
    # it below a session updated in between, or a cursor page after it listing it again.
    target = tmp_path / "s.db"
    clock = ManualClock(1_000)
    with session_manager.open(f"sqlite:///{target}", clock=clock) as sm:
        a = sm.create(title="a").session_id
        clock.set(2_000)
        b = sm.create(title="b").session_id
        clock.set(3_000)
        sm.append(a, message=_user("first"))  # a goes first: its key written (b's is exact)
        for at in (4_000, 9_000):
            clock.set(at)
            sm.append(a, message=_user(f"at {at}"))
        assert _keys(target)[a] == (3_000, 9_000)  # it lags: those commits left the index alone
        assert _keys(target)[b] == (2_000, 2_000)
        assert _order(sm, limit=1) == _order(sm) == [a, b]  # the cursor (9000, a) is past a's key 3000
        assert [s.session_id for s in sm.list(order="updated_desc", status="idle").sessions] == [a, b]

        clock.set(5_000)  # between a's key and its updated_at: b must stay below a
        sm.set_meta(b, title="b2")
        assert _keys(target)[a] == (9_000, 9_000)  # brought up to date before b's key was written
        assert _order(sm, limit=1) == _order(sm) == [a, b]

        clock.set(10_000)  # an append to another session: it goes first, a's key stays exact
        sm.append(b, message=_user("later"))
        clock.set(11_000)
        sm.append(b, message=_user("later still"))
        assert _keys(target) == {a: (9_000, 9_000), b: (10_000, 11_000)}
        assert _order(sm, limit=1) == [b, a]


def test_an_append_to_a_session_below_the_first_brings_the_first_key_up_to_date(tmp_path: Path) -> None:
    # Prevents: a session appended to below the first taking the first place with a value between
    # the first's lagging key and its true updated_at (only the first row's key may ever lag).
    target = tmp_path / "s.db"
    clock = ManualClock(1_000)
    with session_manager.open(f"sqlite:///{target}", clock=clock) as sm:
        b = sm.create(title="b").session_id
        clock.set(2_000)
        a = sm.create(title="a").session_id
        clock.set(8_000)
        sm.append(a, message=_user("x"))  # a's key lags at 2000
        assert _keys(target)[a] == (2_000, 8_000)
        clock.set(5_000)  # the clock went back: b's append is older than a's
        sm.append(b, message=_user("y"))
        assert _keys(target) == {a: (8_000, 8_000), b: (5_000, 5_000)}
        assert _order(sm, limit=1) == [a, b]


def test_a_version_4_file_gets_its_list_key_from_updated_at(tmp_path: Path) -> None:
    # Prevents: the upgrade to schema version 5 leaving the list key empty (every session sorted
    # last, or the list unindexed); it copies updated_at, and the order is read from its index.
    target = tmp_path / "v4.db"
    clock = ManualClock(1_000)
    with session_manager.open(f"sqlite:///{target}", clock=clock) as sm:
        ids = []
        for i in range(5):
            clock.set(1_000 * (i + 1))
            ids.append(sm.create(title=f"s{i}").session_id)
        before = _order(sm, limit=2)
    with sqlite3.connect(target) as conn:  # back to version 4, as its migration left the table
        _as_version_6(conn)
        conn.execute("DROP INDEX sessions_listed")
        conn.execute("ALTER TABLE sessions DROP COLUMN listed_at")
        conn.execute("CREATE INDEX sessions_updated ON sessions (updated_at, session_id)")
        conn.execute("PRAGMA user_version = 4")
    with session_manager.open(f"sqlite:///{target}", clock=clock) as sm:
        assert before == _order(sm, limit=2) == ids[::-1]
    assert all(listed == updated for listed, updated in _keys(target).values())
    with sqlite3.connect(target) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 9  # (versions 6 to 9 follow)
        plan = conn.execute("EXPLAIN QUERY PLAN SELECT meta FROM sessions WHERE meta IS NOT NULL"
                            " ORDER BY listed_at DESC, session_id DESC LIMIT 50").fetchall()
        assert any("sessions_listed" in str(row) for row in plan), plan
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'sessions_updated'").fetchone()[0] == 0


def test_concurrent_appends_to_several_sessions_keep_one_lagging_key_at_most(tmp_path: Path) -> None:
    # Prevents: writers racing on their own connections leaving two lagging keys (a session below
    # the first out of place), or an order that differs from the exact updated_at values.
    import threading

    target = tmp_path / "s.db"
    with session_manager.open(f"sqlite:///{target}") as sm:
        sids = [sm.create(title=f"s{i}").session_id for i in range(4)]

        def work(sid: str) -> None:
            for i in range(40):
                sm.append(sid, message=_user(f"{sid} {i}"))

        threads = [threading.Thread(target=work, args=(sid,)) for sid in sids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with sqlite3.connect(target) as conn:
            rows = conn.execute("SELECT session_id, listed_at, updated_at FROM sessions"
                                " ORDER BY listed_at DESC, session_id DESC").fetchall()
        assert all(listed == updated for _, listed, updated in rows[1:])
        assert rows[0][1] <= rows[0][2]
        exact = sorted(rows, key=lambda r: (r[2], r[0]), reverse=True)
        assert [r[0] for r in rows] == [r[0] for r in exact] == _order(sm, limit=1)
        assert all(m.message_count == 40 for m in (sm.get(sid).meta for sid in sids))  # type: ignore[union-attr]
