"""The version an own commit leaves over postgres (``PostgresStore.version_left``, migration 14).

The session's version is its row's ``xmin`` with its leaf and meta text. An optimistic commit
now learns the ``xmin`` it left from its own answer (plain statements; ``sm_apply``'s overload of
migration 14) and, when it checked the row's ``xmin`` too, that it followed exactly the version it
checked: the LangGraph saver's index then follows its own puts without a read, and another
instance's write among them (even one leaving the leaf and meta text as they were: a leaf set
back within the same millisecond) leaves no version named, so the index is derived again."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import session_manager
from tests import pg_support

pytestmark = pytest.mark.postgres

FROZEN_MS = 1_700_000_000_000


@contextlib.contextmanager
def schema() -> Iterator[str]:
    pg_support.require()
    name = f"smtest_pgver_{uuid.uuid4().hex[:10]}"
    try:
        yield name
    finally:
        pg_support.drop_schema(name)


def row_of(name: str, sid: str) -> tuple[str, str, str]:
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        row = conn.execute(f'SELECT xmin::text, leaf, meta FROM "{name}".sessions WHERE session_id = %s',
                           (sid,)).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def entries_of(name: str, sid: str) -> set[str]:
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        rows = conn.execute(f'SELECT entry_id FROM "{name}".entries WHERE session_id = %s', (sid,)).fetchall()
    return {r[0] for r in rows}


def owned(sm: Any, sid: str, at: Any, n: int) -> str:
    return sm._append_owned(sid, "x", {"n": n}, None, at=at)  # type: ignore[no-any-return]


def test_an_own_checked_append_names_exactly_the_version_a_read_then_gives() -> None:
    # Prevents: the saver's index over postgres taking its own puts' leaf as current without the
    # version they left (the ABA of review 13's own-put route), or a foretold version a read does
    # not give (every read after a put would derive the index again: a read of every entry).
    with schema() as name, session_manager.open(store=pg_support.open_store(name)) as sm:
        store = sm.service.store
        sm.call("session::ensure", {"session_id": "s"})
        sm.call("session::append", {"session_id": "s", "custom": {"custom_type": "x", "data": 0}})
        token = store.session_token("s")
        for n in range(1, 6):
            written = owned(sm, "s", token[:2], n)
            left = store.version_left("s", token[2], written)
            assert left is not None
            assert store.version_left("s", token[2], token[1]) is None  # (another leaf: not this commit's)
            assert store.version_left("s", ("0", token[2][1], token[2][2]), written) is None  # (another xmin)
            token = (token[0], written, left)
            read = store.session_token("s")
            assert read == token
            assert left == row_of(name, "s")  # (the row as stored: xmin, leaf key, meta text)
            assert store.session_token("s", left) == token  # (known: answered as unchanged)


def test_an_aba_leaving_leaf_and_meta_text_alike_is_caught_by_the_row_version() -> None:
    # Prevents: an own checked append landing on a session another instance wrote and set back
    # within the same millisecond (its meta text and leaf exactly as known: only the row's xmin
    # differs) and naming the version it left as following the one it checked: the other
    # instance's entry would stay hidden from the saver's index (sm_apply before migration 14
    # checked the meta text and leaf only).
    with schema() as name, session_manager.open(store=pg_support.open_store(name)) as sm, \
            session_manager.open(store=pg_support.open_store(name)) as other:
        for manager in (sm, other):
            manager.service.core.clock.now_ms = lambda: FROZEN_MS  # type: ignore[method-assign]
        store = sm.service.store
        sm.call("session::ensure", {"session_id": "s"})
        sm.call("session::append", {"session_id": "s", "custom": {"custom_type": "x", "data": 0}})
        token = store.session_token("s")
        first = owned(sm, "s", token[:2], 1)
        held = store.version_left("s", token[2], first)
        assert held is not None and held == row_of(name, "s")
        theirs = other.call("session::append", {"session_id": "s", "custom": {"custom_type": "x", "data": "t"}})
        other.call("session::set-active-leaf", {"session_id": "s", "entry_id": first})
        after_aba = row_of(name, "s")
        assert after_aba[1:] == held[1:] and after_aba[0] != held[0]  # (alike but for the xmin)
        second = owned(sm, "s", (token[0], first), 2)  # (checked at the leaf: it lands)
        assert store.version_left("s", held, second) is None  # (it did not follow ``held``)
        assert {first, second, theirs["entry_id"]} <= entries_of(name, "s")
        assert store.session_token("s")[1] == second


def test_the_previous_releases_sm_apply_is_kept_and_the_new_one_writes_nothing_at_another_xmin() -> None:
    # Prevents: migration 14 replacing the sm_apply a previous-release process calls (22
    # arguments, answering 0) while it runs (a rolling upgrade), or the new overload writing at a
    # row version other than the one named; and the migration not running again over itself.
    from session_manager.store.base import Commit
    from session_manager.store.postgres import schema as pg_schema
    from session_manager.store.postgres.plan import apply_params

    with schema() as name:
        with session_manager.open(store=pg_support.open_store(name)) as sm:
            sm.call("session::ensure", {"session_id": "s"})
            sm.call("session::append", {"session_id": "s", "custom": {"custom_type": "x", "data": 0}})
        xmin, leaf, meta = row_of(name, "s")
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{name}"')
            assert conn.execute("SELECT version FROM schema_version").fetchone() == (len(pg_schema.MIGRATIONS),)
            assert pg_schema.MIGRATIONS[13] == pg_schema.APPLY_AT_ROW_FUNCTION  # (migration 14)
            commit = Commit(meta=None, entries=[], leaf=None)
            params = apply_params("s", commit, [], None, instance="i", schema=name)
            params.update(check=1, expect_meta=meta, expect_leaf=leaf)
            assert conn.execute(pg_schema.APPLY, params).fetchone() == (0,)  # (the previous release's)
            xmin = row_of(name, "s")[0]
            with pytest.raises(psycopg.Error) as caught:
                conn.execute(pg_schema.APPLY_AT_ROW, {**params, "row": str(int(xmin) + 1)})
            assert caught.value.sqlstate == "SM409"
            assert row_of(name, "s")[0] == xmin  # (nothing written)
            answered = conn.execute(pg_schema.APPLY_AT_ROW, {**params, "row": xmin}).fetchone()
            assert answered is not None and answered[0] == row_of(name, "s")[0] != xmin
            conn.execute("UPDATE schema_version SET version = 13")
        pg_schema.CHECKED.clear()
        with session_manager.open(store=pg_support.open_store(name)) as sm:  # (applied again over itself)
            store = sm.service.store
            token = store.session_token("s")
            written = owned(sm, "s", token[:2], 1)
            assert store.session_token("s")[1] == written
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            assert conn.execute(f'SELECT version FROM "{name}".schema_version').fetchone() \
                == (len(pg_schema.MIGRATIONS),)


def test_a_saver_over_postgres_derives_its_index_once_across_its_own_puts_and_reads() -> None:
    # Prevents: the fix costing a read of every entry after every own put (the index left
    # unknown after each): LangGraph's read at each run's start would derive the thread again.
    pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")
    from session_manager.adapters.langgraph import SessionManagerSaver
    from tests.unit.test_adapter_attacks_review13_langgraph import checkpoint, x_of
    from tests.unit.test_adapter_langgraph import config

    with schema() as name, session_manager.open(store=pg_support.open_store(name)) as sm:
        store = sm.service.store
        derived: list[str] = []
        real = store.entries_held
        store.entries_held = lambda *a: derived.append(a[0]) or real(*a)  # type: ignore[method-assign]
        saver = SessionManagerSaver(sm)
        saved, n = config("t"), 0
        for _ in range(6):
            found = saver.get_tuple(config("t"))
            assert (found is None) if n == 0 else (x_of(found) == [n - 1])
            for _ in range(3):
                new = {"x": str(n + 1), "pad": "1"} if n == 0 else {"x": str(n + 1)}
                saved = saver.put(saved, checkpoint(f"c{n:03d}", [n], str(n + 1)), {"step": n}, new)
                saver.put_writes(saved, [("x", [n, "w"])], f"task-{n}")
                n += 1
        assert derived == []  # (the first read found no thread: nothing to derive; then its own puts)
        assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(config("t"))][:2] == ["c017", "c016"]
        assert derived == []


def test_a_saver_sees_a_checkpoint_put_and_set_back_within_its_own_puts_millisecond() -> None:
    # Prevents: review 13's own-put route (this saver puts; another instance puts and sets the
    # leaf back; this saver puts again) hiding the other checkpoint over postgres when every
    # write falls in one millisecond (the meta text and leaf come back exactly: only the row's
    # xmin tells the writes apart).
    pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")
    from session_manager.adapters.langgraph import SessionManagerSaver
    from tests.unit.test_adapter_attacks_review13_langgraph import active_leaf, checkpoint, put_chain, x_of
    from tests.unit.test_adapter_langgraph import config

    with schema() as name, session_manager.open(store=pg_support.open_store(name)) as sm, \
            session_manager.open(store=pg_support.open_store(name)) as other:
        for manager in (sm, other):
            manager.service.core.clock.now_ms = lambda: FROZEN_MS  # type: ignore[method-assign]
        mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(other)
        saved = put_chain(mine, "u", 2)
        assert theirs.get_tuple(saved[1]) is not None
        leaf = active_leaf(other, "u")
        before = row_of(name, "u")
        theirs.put(saved[1], checkpoint("c002", ["t", 2], "3"), {"step": 2}, {"x": "3"})
        other.call("session::set-active-leaf", {"session_id": "u", "entry_id": leaf})
        assert row_of(name, "u")[1:] == before[1:]  # (leaf and meta text as they were)
        mine.put(saved[1], checkpoint("c003", ["", 3], "4"), {"step": 3}, {"x": "4"})
        listed = [t.config["configurable"]["checkpoint_id"] for t in mine.list(config("u"))]
        found = mine.get_tuple(config("u", "c002"))
    assert listed == ["c003", "c002", "c001", "c000"]
    assert x_of(found) == ["t", 2]
