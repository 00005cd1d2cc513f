"""The sqlite adapter's search index: an FTS5 table over each searchable
entry's folded words, brought up to date before each query (never in a commit).

Catching up (version 4): ``search_state.last_seq`` is the high-water mark,
every entry with a greater ``seq`` is not indexed yet; a new revision
(an UPDATE of ``entries.body``, same ``seq``) queues its ``seq`` in
``search_dirty`` by trigger. An append writes nothing here, so its commit
writes no index page. :func:`catch_up` runs at the start of a search, in
write transactions of at most :data:`BATCH` entries each, re-reading the mark
inside: two processes catching up at once are serialized by the write lock,
and the second finds nothing left. :func:`erase` lowers the mark to the
greatest ``seq`` left (``entries.seq`` is a plain rowid: once the newest rows
are deleted their numbers are given again, and must not hide under the mark).

A read-only store (which must not write the index) answers from the index
plus what it has not caught up yet, in one read snapshot
(:func:`search_pending`): the entries past the mark and the revised ones
(``search_dirty``) are read and matched in Python, the index's stale rows
of the revised ones left out (of the candidates, the totals and the
per-term counts), so its answer is the one a writable store gives after
its catch-up. Its cost grows with what is not indexed yet (every entry of a
file no writable store has searched since they were written).

Words are made in Python (:func:`..search_text.words`), so this index
splits and folds text exactly as the fs and memory indexes do. Since
version 6 (:data:`COMPACT`) each searchable entry is one ``search_docs`` row
(its rowid the entry's ``seq``) holding only what a query cannot read
elsewhere: its session as a small integer (``search_totals.id``), role,
timestamp, word count and words (sorted, space separated). Its ids are not
copied: a page's rows read them from ``entries`` (by ``seq``) and
``search_totals`` (by id), for the rows read only; a session's rows are
found for erasure by its entries' ``seq`` (so no index on the session).
``search_fts`` indexes the words column (external content: the words are
stored once) with the ``ascii`` tokenizer (every non-ASCII character is a
word character there, ``_`` too: a folded word is one token, never split
again). ``detail=none``: no positions (queries are conjunctions of words and
a prefix, no phrases). Triggers keep the FTS rows and the per-session totals
(``search_totals``: entries and words, the statistics ranking needs) in step
with ``search_docs``. Version 3 kept each row's session and entry ids as
text, with an index on the session: twice the bytes of an FTS5 table
holding the texts (issue 26's target is 1.5x); version 6 rebuilds the index
in the new form (:func:`rebuild`).

Erasure: deleting a session deletes its ``search_docs`` rows (the triggers
add FTS5 delete markers) before its entries (:func:`erase`); FTS5 before 3.43
has no ``secure-delete`` option, so the deleted words would stay in older
index segments until a merge. :func:`erase` runs ``optimize`` (every segment
rewritten into one, the deleted rows left out) in the deleting transaction;
with ``secure_delete`` on, the freed pages are zeroed. Its cost grows with the
index (one rewrite per deleting transaction). :func:`lower` then lowers the
mark to the entries left.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Collection, Iterator
from typing import Any

from .._core.codec import loads
from ..search_index import Candidate, Matches, Ranked, SortKey, Stats, term_counts
from ..search_text import Query
from ..sql.fts5 import doc, quoted, ranked_page
from ..sql.keys import key, unkey

__all__ = ["BATCH", "CATCH_UP", "COMPACT", "MIGRATION", "TABLES", "behind", "catch_up", "doc", "erase", "grown",
           "lower", "mark", "merge", "page", "quoted", "rebuild", "search", "search_pending"]


TABLES = frozenset({"search_docs", "search_totals", "search_fts", "search_fts_data", "search_fts_idx",
                    "search_fts_config", "search_state", "search_dirty"})

BATCH = 2000  # entries indexed per write transaction of a catch-up (the lock held briefly)

# Version 3 (superseded by COMPACT: kept as it was, for the files it upgrades).
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


CATCH_UP = """
    CREATE TABLE search_state (
        id        INTEGER PRIMARY KEY CHECK (id = 1),
        last_seq  INTEGER NOT NULL        -- every entry with seq <= last_seq is indexed
    );
    CREATE TABLE search_dirty (seq INTEGER PRIMARY KEY);  -- entries revised since they were indexed
    CREATE TRIGGER search_revised AFTER UPDATE OF body ON entries BEGIN
        INSERT OR IGNORE INTO search_dirty (seq) VALUES (new.seq);
    END;
    INSERT INTO search_state (id, last_seq) SELECT 1, coalesce(max(seq), 0) FROM entries
"""

COMPACT = """
    DROP TABLE search_fts;
    DROP TABLE search_docs;
    DROP TABLE search_totals;
    CREATE TABLE search_totals (
        id          INTEGER PRIMARY KEY,  -- search_docs.sess
        session_id  TEXT NOT NULL UNIQUE,
        docs        INTEGER NOT NULL,
        words       INTEGER NOT NULL
    );
    CREATE TABLE search_docs (
        seq         INTEGER PRIMARY KEY,  -- the entry's entries.seq (its ids are read there)
        sess        INTEGER NOT NULL,     -- its session's search_totals.id
        role        TEXT NOT NULL,
        ts          NOT NULL,             -- an integer (as text past 64 bits: no affinity, kept exact)
        length      INTEGER NOT NULL,
        words       TEXT NOT NULL         -- the folded words, sorted, space separated
    );
    CREATE VIRTUAL TABLE search_fts USING fts5(
        words, content='search_docs', content_rowid='seq', detail=none, columnsize=0,
        tokenize="ascii tokenchars '_'");
    CREATE TRIGGER search_docs_in AFTER INSERT ON search_docs BEGIN
        INSERT INTO search_fts (rowid, words) VALUES (new.seq, new.words);
        UPDATE search_totals SET docs = docs + 1, words = words + new.length WHERE id = new.sess;
    END;
    CREATE TRIGGER search_docs_out AFTER DELETE ON search_docs BEGIN
        INSERT INTO search_fts (search_fts, rowid, words) VALUES ('delete', old.seq, old.words);
        UPDATE search_totals SET docs = docs - 1, words = words - old.length WHERE id = old.sess;
        DELETE FROM search_totals WHERE id = old.sess AND docs = 0;
    END
"""


# Entries past a mark, in order, with their session's id (entries name it by its integer key).
_NEWER = ("SELECT e.seq, s.session_id, e.body FROM entries e JOIN sessions s ON s.sk = e.sk"
          " WHERE e.seq > ? ORDER BY e.seq LIMIT ?")


def _docs(rows: Iterator[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``(seq, session_id, role, ts, length, words)`` of ``(seq, session_id, body)`` rows
    (searchable entries only)."""
    out: list[tuple[Any, ...]] = []
    for seq, sid, body in rows:
        found = doc(loads(body.encode("utf-8")))
        if found is not None:
            out.append((seq, sid, *found))
    return out


def _insert(conn: sqlite3.Connection, docs: list[tuple[Any, ...]]) -> None:
    """Index :func:`_docs` rows: each session's ``search_totals`` row made first (its id
    is what a document keeps; the insert trigger adds the document to its totals)."""
    if not docs:
        return
    sids = sorted({d[1] for d in docs})
    conn.executemany("INSERT INTO search_totals (session_id, docs, words) VALUES (?, 0, 0)"
                     " ON CONFLICT (session_id) DO NOTHING", [(s,) for s in sids])
    ids = dict(conn.execute("SELECT session_id, id FROM search_totals"
                            " WHERE session_id IN (SELECT value FROM json_each(?))", (json.dumps(sids),)))
    conn.executemany("INSERT INTO search_docs (seq, sess, role, ts, length, words) VALUES (?, ?, ?, ?, ?, ?)",
                     [(seq, ids[sid], *rest) for seq, sid, *rest in docs])


def behind(conn: sqlite3.Connection) -> bool:
    """Whether any entry is written or revised since it was indexed (a read: no lock)."""
    row = conn.execute("SELECT coalesce((SELECT max(seq) FROM entries), 0) > (SELECT last_seq FROM search_state)"
                       " OR EXISTS (SELECT 1 FROM search_dirty)").fetchone()
    return bool(row[0])


def catch_up(conn: sqlite3.Connection, limit: int = BATCH) -> bool:
    """Index up to ``limit`` revised, then new entries, in the caller's write
    transaction; returns whether more are left. The mark is read here, under the lock."""
    mark = int(conn.execute("SELECT last_seq FROM search_state").fetchone()[0])
    dirty = [r[0] for r in conn.execute("SELECT seq FROM search_dirty ORDER BY seq LIMIT ?", (limit,))]
    if dirty:
        # A revision past the mark is indexed with the new entries (its body read then).
        conn.execute("DELETE FROM search_dirty WHERE seq <= ?", (dirty[-1],))
        old = [s for s in dirty if s <= mark]
        conn.executemany("DELETE FROM search_docs WHERE seq = ?", [(s,) for s in old])
        _insert(conn, _docs(conn.execute(
            "SELECT e.seq, s.session_id, e.body FROM entries e JOIN sessions s ON s.sk = e.sk"
            " WHERE e.seq IN (SELECT value FROM json_each(?))",
            (json.dumps(old),))))
        if len(dirty) == limit:
            return True
    rows = conn.execute(_NEWER, (mark, limit)).fetchall()
    if rows:
        _insert(conn, _docs(iter(rows)))
        conn.execute("UPDATE search_state SET last_seq = ?", (rows[-1][0],))
    return len(rows) == limit


def mark(conn: sqlite3.Connection) -> int:
    """The high-water mark: every entry up to it is indexed."""
    return int(conn.execute("SELECT last_seq FROM search_state").fetchone()[0])


def grown(conn: sqlite3.Connection, since: int) -> bool:
    """Whether the index took more than :data:`BATCH` entries, and more than a tenth of
    what it holds, since the mark was ``since``: time to merge its segments into one.
    (A catch-up's batches each leave FTS5 a segment, and every query probes each; a
    100,000-entry index caught up at once answers a query in half the time merged.)"""
    now = mark(conn)
    return now - since > max(BATCH, now // 10)


def merge(conn: sqlite3.Connection) -> None:
    """Every FTS segment rewritten into one, in the caller's write transaction."""
    conn.execute("INSERT INTO search_fts (search_fts) VALUES ('optimize')")


def erase(conn: sqlite3.Connection, sid: str) -> None:
    """Drop a session's rows, and rewrite the FTS segments without them (see the module);
    called before its entries are deleted (its rows are found by their ``seq``)."""
    if conn.execute("DELETE FROM search_docs WHERE seq IN"
                    " (SELECT seq FROM entries WHERE sk = (SELECT sk FROM sessions WHERE session_id = ?))",
                    (sid,)).rowcount:
        conn.execute("INSERT INTO search_fts (search_fts) VALUES ('optimize')")


def lower(conn: sqlite3.Connection) -> None:
    """Lower the mark to the greatest ``seq`` left, once a session's entries are deleted
    (their numbers may be given again, and must not hide under the mark)."""
    conn.execute("UPDATE search_state SET last_seq = min(last_seq, coalesce((SELECT max(seq) FROM entries), 0))")


def rebuild(conn: sqlite3.Connection) -> None:
    """Index every stored entry into the emptied index, and mark it all indexed (the
    migration that makes the index anew, in its transaction)."""
    last = 0
    while True:
        rows = conn.execute(_NEWER, (last, BATCH)).fetchall()
        if not rows:
            break
        _insert(conn, _docs(iter(rows)))
        last = rows[-1][0]
    conn.execute("DELETE FROM search_dirty")
    conn.execute("UPDATE search_state SET last_seq = ?", (last,))
    conn.execute("INSERT INTO search_fts (search_fts) VALUES ('optimize')")


_IN_SCOPE = "d.sess IN (SELECT id FROM search_totals WHERE session_id IN (SELECT value FROM json_each({})))"


def _scoped(sessions: Collection[str] | None) -> tuple[str, tuple[Any, ...]]:
    if sessions is None:
        return "", ()
    return " AND " + _IN_SCOPE.format("?"), (json.dumps([key(s) for s in sessions]),)


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
    yield from conn.execute("SELECT t.session_id, e.entry_id, d.role, d.ts, d.length, d.words, d.seq FROM search_fts f"
                            " JOIN search_docs d ON d.seq = f.rowid CROSS JOIN search_totals t ON t.id = d.sess"
                            " CROSS JOIN entries e ON e.seq = d.seq WHERE search_fts MATCH ?" + where,
                            (match, *params))


def search(conn: sqlite3.Connection, query: Query, sessions: Collection[str] | None,
           roles: Collection[str] | None, stale: frozenset[int] = frozenset()) -> Matches:
    """:class:`Matches` inside ``sessions`` (``None``: every indexed session), read in
    the caller's transaction or snapshot (:func:`catch_up` first; else
    :func:`search_pending`, which passes the ``stale`` rows to leave out)."""
    out = Matches()
    out.docs, out.total_length = _totals(conn, sessions)
    terms = [quoted(w) for w in query.exact] + [quoted(query.prefix) + "*"]
    out.df = [_count(conn, t, sessions) for t in terms]
    if not all(out.df):
        return out
    for sid, eid, role, ts, length, text, seq in _rows(conn, " AND ".join(terms), sessions):
        if (roles is not None and role not in roles) or seq in stale:
            continue
        tfs = term_counts(query, Counter(text.split()))
        if all(tfs):  # (the tokenizer agrees with words(); checked, never trusted)
            out.candidates.append(Candidate(unkey(sid), unkey(eid), role, int(ts), tfs, length))
    return out


def page(conn: sqlite3.Connection, query: Query, sessions: Collection[str] | None, roles: Collection[str] | None,
         limit: int, after: SortKey | None, stats: Stats | None = None) -> Ranked:
    """The ranked page of :meth:`~session_manager.store.SessionStore.search_page`, ranked by
    SQLite inside the index (:func:`..sql.fts5.ranked_page`), in the caller's transaction or
    snapshot (:func:`catch_up` first); ``stats``: a cursor's, scored with."""
    if limit <= 0:
        return Ranked.of([], stats)
    scope, params = "", dict[str, Any]()
    totals = "SELECT total(docs) AS docs, total(words) AS words FROM search_totals"
    if sessions is not None:
        scope = " AND " + _IN_SCOPE.format(":scope")
        totals += " WHERE session_id IN (SELECT value FROM json_each(:scope))"
        params["scope"] = json.dumps([key(s) for s in sessions])
    only = ""
    if roles is not None:
        only = " AND d.role IN (SELECT value FROM json_each(:roles))"
        params["roles"] = json.dumps(sorted(roles))

    def candidate(row: tuple[Any, ...], tfs: tuple[int, ...]) -> Candidate:
        sid, eid, _seq, _sess, role, ts, length = row
        return Candidate(unkey(sid), unkey(eid), role, int(ts), tfs, length)

    if sessions is None:
        count = "SELECT count(*) FROM search_fts WHERE search_fts MATCH {match}"
    else:
        count = ("SELECT count(*) FROM search_fts f JOIN search_docs d ON d.seq = f.rowid"
                 " WHERE search_fts MATCH {match}" + scope)
    return ranked_page(
        conn, vocab="search_vocab", fts="search_fts", cols="d.seq AS seq, d.sess AS sess, d.role, d.ts",
        length="d.length", spaced="(' ' || replace(d.words, ' ', '  ') || ' ')",
        source="FROM search_fts f JOIN search_docs d ON d.seq = f.rowid WHERE search_fts MATCH {match}" + scope + only,
        resolve=("(SELECT session_id FROM search_totals WHERE id = r.sess),"
                 " (SELECT entry_id FROM entries WHERE seq = r.seq)"),
        count=count, totals=totals, params=params, query=query, limit=limit, after=after,
        candidate=candidate, stats=stats)


def search_pending(conn: sqlite3.Connection, query: Query, sessions: Collection[str] | None,
                   roles: Collection[str] | None) -> Matches:
    """:func:`search` without catching up (a read-only store: nothing written), in the
    caller's read snapshot: the index, less its rows of revised entries, plus every
    entry it has not indexed yet (past the mark, or revised), matched here."""
    mark = int(conn.execute("SELECT last_seq FROM search_state").fetchone()[0])
    dirty = [int(r[0]) for r in conn.execute("SELECT seq FROM search_dirty WHERE seq <= ?", (mark,))]
    scoped, params = _scoped(sessions)  # (an index row's session is its search_totals id)
    where = "" if sessions is None else " AND s.session_id IN (SELECT value FROM json_each(?))"
    # The index's rows of revised entries: out of the totals and counts (their new words come below).
    old = conn.execute("SELECT d.seq, d.length, d.words FROM search_docs d"
                       " WHERE d.seq IN (SELECT value FROM json_each(?))" + scoped,
                       (json.dumps(dirty), *params)).fetchall()
    out = search(conn, query, sessions, roles, frozenset(r[0] for r in old))
    if not out.df:
        out.df = [0] * len(query.terms)
    for _, length, text in old:
        out.docs -= 1
        out.total_length -= length
        for i, n in enumerate(term_counts(query, Counter(text.split()))):
            out.df[i] -= n > 0
    pending = conn.execute("SELECT e.seq, s.session_id, e.entry_id, e.body FROM entries e"
                           " JOIN sessions s ON s.sk = e.sk WHERE (e.seq > ? OR e.seq IN"
                           " (SELECT value FROM json_each(?)))" + where + " ORDER BY e.seq",
                           (mark, json.dumps(dirty), *params)).fetchall()
    eids = {seq: eid for seq, _, eid, _ in pending}
    for seq, sid, role, ts, length, text in _docs((seq, sid, body) for seq, sid, _, body in pending):
        eid = eids[seq]
        tfs = term_counts(query, Counter(text.split()))
        out.docs += 1
        out.total_length += length
        for i, n in enumerate(tfs):
            out.df[i] += n > 0
        if all(tfs) and (roles is None or role in roles):
            out.candidates.append(Candidate(unkey(sid), unkey(eid), role, int(ts), tfs, length))
    return out
