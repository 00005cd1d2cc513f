"""``session::search`` on the postgres adapter: the index added to an existing
schema, rows too big for a ``tsvector``, erasure of the index rows."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

import session_manager
from session_manager.store.postgres import schema as pg_schema
from session_manager.store.postgres import search as pg_search
from tests import pg_support

pytestmark = pytest.mark.postgres


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def _drop_search(conn: psycopg.Connection[Any], ident: sql.Identifier) -> None:
    """Every object of the search index (migrations 3, 5, 6 and 11) dropped."""
    for what in ("TRIGGER entries_search ON {}.entries", "TRIGGER entries_search_forget ON {}.entries",
                 "TRIGGER IF EXISTS entries_search_born ON {}.entries", "FUNCTION IF EXISTS {}.sm_search_born",
                 "FUNCTION {}.sm_search_queue", "FUNCTION {}.sm_search_forget", "FUNCTION {}.sm_search_page",
                 "TABLE {}.search_docs", "TABLE {}.search_totals", "TABLE {}.search_pending",
                 "TABLE IF EXISTS {}.search_total"):
        conn.execute(sql.SQL("DROP " + what).format(*[ident] * what.count("{}")))


def _downgrade(name: str) -> None:
    """Back to schema version 2: the search index (migration 3) dropped."""
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        ident = sql.Identifier(name)
        _drop_search(conn, ident)
        conn.execute(sql.SQL("DROP FUNCTION {}.sm_append").format(ident))  # migration 4, after the index
        conn.execute(sql.SQL("UPDATE {}.schema_version SET version = 2").format(ident))
    pg_schema.CHECKED.clear()  # the next open plays a new process


def _back_to_version_4(name: str) -> None:
    """The search index as migration 3 made it (no totals), every entry queued."""
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        ident = sql.Identifier(name)
        _drop_search(conn, ident)
        with conn.transaction():
            conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(ident))
            conn.execute(pg_search.MIGRATION.encode("utf-8"))
        conn.execute(sql.SQL("UPDATE {}.schema_version SET version = 4").format(ident))
    pg_schema.CHECKED.clear()


def _totals(name: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        ident = sql.Identifier(name)
        kept = conn.execute(sql.SQL("SELECT session_id, docs, words FROM {}.search_totals ORDER BY 1").format(ident))
        summed = conn.execute(sql.SQL("SELECT t.session_id, count(*), sum(d.length) FROM {0}.search_docs d"
                                      " JOIN {0}.search_totals t ON t.id = d.sess GROUP BY 1 ORDER BY 1").format(ident))
        got = kept.fetchall()
        assert got == summed.fetchall()
        total = conn.execute(sql.SQL("SELECT docs, words FROM {}.search_total").format(ident)).fetchone()
        assert total == (sum(r[1] for r in got), sum(r[2] for r in got))
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
        _back_to_version_4(name)
        sm = session_manager.open(store=pg_support.open_store(name))
        try:
            assert {q: sm.call("session::search", {"query": q}) for q in before} == before
            assert len(_totals(name)) == 2  # (migration 6 queues every entry: indexed by the first search)
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
