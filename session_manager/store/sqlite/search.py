"""The sqlite adapter's search index: an FTS5 table over each searchable
entry's folded words, kept in the transaction of every commit.

Words are made in Python (:func:`..search_text.words`), so this index
splits and folds text exactly as the fs and memory indexes do; each
entry's words are stored sorted, space separated, in ``search_docs``
(one row per searchable entry, its rowid the entry's ``seq``), and
``search_fts`` indexes that column with the ``ascii`` tokenizer (every
non-ASCII character is a word character there, ``_`` too: a folded word
is one token, never split again). ``detail=none``: no positions (queries
are conjunctions of words and a prefix, no phrases). Triggers keep the FTS
rows and the per-session totals (``search_totals``: entries and words, the
statistics ranking needs) in step with ``search_docs``.

Erasure: deleting a session deletes its ``search_docs`` rows (the triggers
add FTS5 delete markers); FTS5 before 3.43 has no ``secure-delete`` option,
so the deleted words would stay in older index segments until a merge.
:func:`erase` runs ``optimize`` (every segment rewritten into one, the
deleted rows left out) in the deleting transaction; with ``secure_delete``
on, the freed pages are zeroed. Its cost grows with the index (one rewrite
per deleting transaction).
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Collection, Iterator
from typing import Any

from .._core.codec import loads
from ..search_index import Candidate, Matches, term_counts
from ..search_text import Query
from ..sql.fts5 import doc, quoted
from ..sql.keys import key, unkey

__all__ = ["MIGRATION", "TABLES", "backfill", "doc", "erase", "index_entry", "quoted", "search"]


TABLES = frozenset({"search_docs", "search_totals", "search_fts", "search_fts_data", "search_fts_idx",
                    "search_fts_config"})

MIGRATION = """
    CREATE TABLE search_docs (
        seq         INTEGER PRIMARY KEY,  -- the entry's entries.seq
        session_id  TEXT NOT NULL,
        entry_id    TEXT NOT NULL,
        role        TEXT NOT NULL,
        ts          NOT NULL,             -- an integer (as text past 64 bits: no affinity, kept exact)
        length      INTEGER NOT NULL,
        words       TEXT NOT NULL         -- the folded words, sorted, space separated
    );
    CREATE INDEX search_docs_session ON search_docs (session_id);
    CREATE TABLE search_totals (
        session_id  TEXT PRIMARY KEY,
        docs        INTEGER NOT NULL,
        words       INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE VIRTUAL TABLE search_fts USING fts5(
        words, content='search_docs', content_rowid='seq', detail=none, columnsize=0,
        tokenize="ascii tokenchars '_'");
    CREATE TRIGGER search_docs_in AFTER INSERT ON search_docs BEGIN
        INSERT INTO search_fts (rowid, words) VALUES (new.seq, new.words);
        INSERT INTO search_totals (session_id, docs, words) VALUES (new.session_id, 1, new.length)
            ON CONFLICT (session_id) DO UPDATE SET docs = docs + 1, words = words + excluded.words;
    END;
    CREATE TRIGGER search_docs_out AFTER DELETE ON search_docs BEGIN
        INSERT INTO search_fts (search_fts, rowid, words) VALUES ('delete', old.seq, old.words);
        UPDATE search_totals SET docs = docs - 1, words = words - old.length WHERE session_id = old.session_id;
        DELETE FROM search_totals WHERE session_id = old.session_id AND docs = 0;
    END
"""


def index_entry(conn: sqlite3.Connection, seq: int | None, sid: str, eid: str, entry: dict[str, Any]) -> None:
    """Index an entry just written (``sid``, ``eid``: stored keys; ``seq``: its
    rowid when just inserted, ``None`` for a new revision, whose old row goes)."""
    if seq is None:
        row = conn.execute("SELECT seq FROM entries WHERE session_id = ? AND entry_id = ?", (sid, eid)).fetchone()
        seq = int(row[0])
        conn.execute("DELETE FROM search_docs WHERE seq = ?", (seq,))
    found_doc = doc(entry)
    if found_doc is not None:
        conn.execute("INSERT INTO search_docs (seq, session_id, entry_id, role, ts, length, words)"
                     " VALUES (?, ?, ?, ?, ?, ?, ?)", (seq, sid, eid, *found_doc))


def erase(conn: sqlite3.Connection, sid: str) -> None:
    """Drop a deleted session's rows, and rewrite the FTS segments without them (see the module)."""
    if conn.execute("DELETE FROM search_docs WHERE session_id = ?", (sid,)).rowcount:
        conn.execute("INSERT INTO search_fts (search_fts) VALUES ('optimize')")


def backfill(conn: sqlite3.Connection) -> None:
    """Index every stored entry (the migration that adds the index, in its transaction)."""
    rows = conn.execute("SELECT seq, session_id, entry_id, body FROM entries ORDER BY seq")
    batch: list[tuple[Any, ...]] = []
    for seq, sid, eid, body in rows:
        found = doc(loads(body.encode("utf-8")))
        if found is not None:
            batch.append((seq, sid, eid, *found))
    conn.executemany("INSERT INTO search_docs (seq, session_id, entry_id, role, ts, length, words)"
                     " VALUES (?, ?, ?, ?, ?, ?, ?)", batch)
    conn.execute("INSERT INTO search_fts (search_fts) VALUES ('optimize')")


def _scoped(sessions: Collection[str] | None) -> tuple[str, tuple[Any, ...]]:
    if sessions is None:
        return "", ()
    return " AND d.session_id IN (SELECT value FROM json_each(?))", (json.dumps([key(s) for s in sessions]),)


def _totals(conn: sqlite3.Connection, sessions: Collection[str] | None) -> tuple[int, int]:
    if sessions is None:
        row = conn.execute("SELECT total(docs), total(words) FROM search_totals").fetchone()
    else:
        row = conn.execute("SELECT total(docs), total(words) FROM search_totals"
                           " WHERE session_id IN (SELECT value FROM json_each(?))",
                           (json.dumps([key(s) for s in sessions]),)).fetchone()
    return int(row[0]), int(row[1])


def _count(conn: sqlite3.Connection, match: str, sessions: Collection[str] | None) -> int:
    if sessions is None:
        return int(conn.execute("SELECT count(*) FROM search_fts WHERE search_fts MATCH ?", (match,)).fetchone()[0])
    where, params = _scoped(sessions)
    return int(conn.execute("SELECT count(*) FROM search_fts f JOIN search_docs d ON d.seq = f.rowid"
                            " WHERE search_fts MATCH ?" + where, (match, *params)).fetchone()[0])


def _rows(conn: sqlite3.Connection, match: str, sessions: Collection[str] | None) -> Iterator[tuple[Any, ...]]:
    where, params = _scoped(sessions)
    yield from conn.execute("SELECT d.session_id, d.entry_id, d.role, d.ts, d.length, d.words FROM search_fts f"
                            " JOIN search_docs d ON d.seq = f.rowid WHERE search_fts MATCH ?" + where,
                            (match, *params))


def search(conn: sqlite3.Connection, query: Query, sessions: Collection[str] | None,
           roles: Collection[str] | None) -> Matches:
    """:class:`Matches` inside ``sessions`` (``None``: every indexed session), read in
    the caller's transaction or snapshot."""
    out = Matches()
    out.docs, out.total_length = _totals(conn, sessions)
    terms = [quoted(w) for w in query.exact] + [quoted(query.prefix) + "*"]
    out.df = [_count(conn, t, sessions) for t in terms]
    if not all(out.df):
        return out
    for sid, eid, role, ts, length, text in _rows(conn, " AND ".join(terms), sessions):
        if roles is not None and role not in roles:
            continue
        tfs = term_counts(query, Counter(text.split()))
        if all(tfs):  # (the tokenizer agrees with words(); checked, never trusted)
            out.candidates.append(Candidate(unkey(sid), unkey(eid), role, int(ts), tfs, length))
    return out
