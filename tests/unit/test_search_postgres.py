"""``session::search`` on the postgres adapter: the index added to an existing
schema, rows too big for a ``tsvector``, erasure of the index rows."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

import session_manager
from session_manager.store.postgres import schema as pg_schema
from tests import pg_support

pytestmark = pytest.mark.postgres


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def _downgrade(name: str) -> None:
    """Back to schema version 2: the search index (migration 3) dropped."""
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        ident = sql.Identifier(name)
        _drop_totals(conn, ident)  # migration 5
        conn.execute(sql.SQL("DROP TRIGGER entries_search ON {}.entries").format(ident))
        conn.execute(sql.SQL("DROP FUNCTION {}.sm_append").format(ident))  # migration 4, after the index
        for what in ("FUNCTION {}.sm_search_queue", "TABLE {}.search_docs", "TABLE {}.search_pending"):
            conn.execute(sql.SQL("DROP " + what).format(ident))
        conn.execute(sql.SQL("UPDATE {}.schema_version SET version = 2").format(ident))
    pg_schema.CHECKED.clear()  # the next open plays a new process


def _drop_totals(conn: psycopg.Connection[Any], ident: sql.Identifier) -> None:
    conn.execute(sql.SQL("DROP FUNCTION {}.sm_search_page").format(ident))  # migration 6
    conn.execute(sql.SQL("DROP TRIGGER search_docs_totals ON {}.search_docs").format(ident))
    conn.execute(sql.SQL("DROP FUNCTION {}.sm_search_totals").format(ident))
    conn.execute(sql.SQL("DROP TABLE {}.search_totals").format(ident))


def _totals(name: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        ident = sql.Identifier(name)
        kept = conn.execute(sql.SQL("SELECT session_id, docs, words FROM {}.search_totals ORDER BY 1").format(ident))
        summed = conn.execute(sql.SQL("SELECT session_id, count(*), sum(length) FROM {}.search_docs"
                                      " GROUP BY 1 ORDER BY 1").format(ident))
        got = kept.fetchall()
        assert got == summed.fetchall()
        return got


def test_a_version_4_schema_gets_its_search_totals_from_its_index() -> None:
    # Prevents: a schema migrated before search_totals ranking with no totals (every idf and
    # length norm wrong) or failing to open; and totals drifting from search_docs on edits,
    # new entries and deletes.
    with pg_support.schema() as name:
        sm = session_manager.open(store=pg_support.open_store(name))
        sids = [sm.call("session::create", {})["session_id"] for _ in range(2)]
        for sid in sids:
            sm.call("session::append", {"session_id": sid, "message": user("brown fox jumps")})
        sm.call("session::append", {"session_id": sids[0], "message": user("lazy dog")})
        before = {q: sm.call("session::search", {"query": q}) for q in ("fox", "dog", "brown j")}
        sm.close()
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            ident = sql.Identifier(name)
            _drop_totals(conn, ident)
            conn.execute(sql.SQL("UPDATE {}.schema_version SET version = 4").format(ident))
        pg_schema.CHECKED.clear()
        sm = session_manager.open(store=pg_support.open_store(name))
        try:
            assert len(_totals(name)) == 2
            assert {q: sm.call("session::search", {"query": q}) for q in before} == before
            eid = sm.call("session::append", {"session_id": sids[1], "message": user("one more fox")})["entry_id"]
            sm.call("session::update-message", {"session_id": sids[1], "entry_id": eid,
                                                "content": [{"type": "text", "text": "a much longer fox text"}]})
            sm.call("session::search", {"query": "fox"})  # (indexes the queue)
            assert [r[1] for r in _totals(name)] == [2, 2]  # (equal to search_docs: checked inside)
            sm.call("session::delete", {"session_id": sids[0]})
            assert len(_totals(name)) == 1
        finally:
            sm.close()


def test_a_version_2_schema_gets_its_index_filled_from_its_entries() -> None:
    # Prevents: a schema migrated before the search index answering nothing for its stored
    # messages (no backfill), or failing to open.
    with pg_support.schema() as name:
        sm = session_manager.open(store=pg_support.open_store(name))
        sid = sm.call("session::create", {})["session_id"]
        first = sm.call("session::append", {"session_id": sid, "message": user("Élan vital")})["entry_id"]
        sm.call("session::append", {"session_id": sid, "message": user("brown fox")})
        before = {q: sm.call("session::search", {"query": q}) for q in ("elan", "fox", "vit", "brown f")}
        sm.close()
        _downgrade(name)
        sm = session_manager.open(store=pg_support.open_store(name))
        try:
            assert {q: sm.call("session::search", {"query": q}) for q in before} == before
            assert [h["entry_id"] for h in before["elan"]["hits"]] == [first]
        finally:
            sm.close()
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            count = conn.execute(sql.SQL("SELECT count(*) FROM {}.search_docs").format(sql.Identifier(name)))
            assert count.fetchone() == (2,)


def test_a_word_past_the_tsvector_limits_is_still_found() -> None:
    # Prevents: a message with a word longer than a lexeme may be (2 KB) failing to commit or
    # missing from the answers.
    long_word = "x" * 3000
    with pg_support.schema() as name:
        sm = session_manager.open(store=pg_support.open_store(name))
        try:
            sid = sm.call("session::create", {})["session_id"]
            eid = sm.call("session::append", {"session_id": sid, "message": user(f"tiny {long_word}")})["entry_id"]
            sm.call("session::append", {"session_id": sid, "message": user("tiny other")})
            assert [h["entry_id"] for h in sm.call("session::search", {"query": "x" * 200})["hits"]] == [eid]
            assert [h["entry_id"] for h in sm.call("session::search", {"query": "tiny xxx"})["hits"]] == [eid]
            assert len(sm.call("session::search", {"query": "tiny"})["hits"]) == 2
        finally:
            sm.close()


def test_a_deleted_session_leaves_no_index_row() -> None:
    # Prevents: a deleted session's folded words kept in the index tables (the marker test reads
    # the raw marker; the index holds it folded, split at the dash).
    word = "zqxmarker7731"
    with pg_support.schema() as name:
        sm = session_manager.open(store=pg_support.open_store(name))
        try:
            sid = sm.call("session::create", {})["session_id"]
            sm.call("session::append", {"session_id": sid, "message": user(f"secret {word.upper()}")})
            assert len(sm.call("session::search", {"query": word})["hits"]) == 1
            sm.call("session::delete", {"session_id": sid})
            with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
                for table in ("search_docs", "search_pending", "entries"):
                    query = sql.SQL("SELECT t::text FROM {}.{} t").format(sql.Identifier(name), sql.Identifier(table))
                    assert [r for (r,) in conn.execute(query) if word in r] == [], table
        finally:
            sm.close()


def test_a_catch_up_of_a_batch_or_more_leaves_the_index_analyzed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a freshly filled search_docs left without planner statistics (every rare word
    # then read by a sequential scan of the table until autovacuum came by), or the VACUUM
    # after a large catch-up failing (it cannot run inside a transaction).
    from session_manager.store.postgres import search as pg_search

    monkeypatch.setattr(pg_search, "BATCH", 2)
    with pg_support.schema() as name:
        sm = session_manager.open(store=pg_support.open_store(name))
        try:
            sid = sm.call("session::create", {})["session_id"]
            for text in ("brown fox", "lazy dog", "quick fox", "fox again", "the end"):
                sm.call("session::append", {"session_id": sid, "message": user(text)})
            assert len(sm.call("session::search", {"query": "fox"})["hits"]) == 3
            with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
                row = conn.execute("SELECT last_analyze IS NOT NULL, last_vacuum IS NOT NULL FROM pg_stat_user_tables"
                                   " WHERE schemaname = %s AND relname = 'search_docs'", (name,)).fetchone()
                assert row == (True, True)
            _totals(name)
        finally:
            sm.close()
