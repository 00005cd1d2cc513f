"""The postgres adapter's search index: per searchable entry its folded words
under a GIN index of them as a ``tsvector``, brought up to date before each query.

Words are made in Python (:func:`..search_text.words`: case folding and
accent folding by NFKD, the one definition every adapter indexes), so this
index finds exactly what the others do; the GIN index is on an expression
making those words lexemes (``array_to_tsvector``: the ``simple``
configuration's no-stemming, no-stop-word rule, with no parser of its own
that would split words differently). A query is a ``tsquery`` of its folded
words, the last one a prefix (``'word':*``).

A ``search_docs`` row (schema version 6) keeps only what a query needs for
every match: its entry's ``entries.seq``, its session as the integer id of
its ``search_totals`` row, role, word count and words; the entry and session
ids and the timestamp are read from ``entries`` (by ``entries_seq``) for the
rows a page reads only.

Commits stay one round trip (``sm_apply``): a trigger on ``entries``
queues each new or rewritten entry's ``seq`` in ``search_pending``, in the
commit's transaction; before a query, :func:`catch_up` turns the queued
entries into ``search_docs`` rows (any instance may, a batch at a time, its
rows locked), changing each session's totals and the global one once per
batch. A statement trigger on deletes from ``entries`` removes their rows
and totals. The migration queues every stored entry (the backfill is done
by the first query).

An unscoped page is one call of ``sm_search_page`` (its plans kept per
connection); a page inside a scope is one statement planned per call.

A document whose words exceed what a ``tsvector`` holds (a lexeme of 2 KB,
1 MB in all) is left out of the GIN index (``fits`` false): such rows are
matched on their words on every query (a partial index finds them).

A read-only store (a read-only session: it cannot take the queue) passes
the queued ``seq``s it read (:func:`pending`, in the same snapshot) to
:func:`search`: their ``search_docs`` rows (stale, or none yet) are left out
and their entries read and matched in Python instead, so its answer is the
one a writable store gives after its catch-up. Its cost grows with the queue.

Erasure: a deleted session's rows are deleted with its entries; like every
table's, their old tuples stay in the heap and the GIN index's pages until
``VACUUM`` reclaims them (no SQL read returns them).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Collection, Iterable
from decimal import Decimal
from typing import Any

import psycopg

from .._core.codec import loads
from ..path import Entry
from ..search_index import K1, B, Candidate, Matches, Ranked, SortKey, Stats, sort_key, term_counts
from ..search_text import Query, entry_role, searchable_text, words
from ..sql.keys import key, unkey

__all__ = ["LAYOUT_MIGRATION", "MIGRATION", "NUL_SAFE_PAGE_MIGRATION", "PAGE_MIGRATION", "REINDEX_MIGRATION",
           "TOTALS_MIGRATION", "catch_up", "page", "page_shown", "pending", "search"]

BATCH = 2000
LEXEME_BYTES = 2046  # PostgreSQL's longest lexeme (MAXSTRLEN - 1)
TSVECTOR_BYTES = 900_000  # under the 1 MB limit with room for its per-lexeme entries
# An entry's timestamp read on the server from its JSON text (the alias ``e``: entries). The
# server's JSON operators refuse a text holding the escape \u0000 anywhere in it (no text type
# holds NUL), so the escape becomes \u0020 first: still valid JSON (a \u0000 after an escaped
# backslash, \\u0000, becomes \\u0020: the same backslash and five characters), the timestamp
# unchanged.
TIMESTAMP = r"(replace(e.body, E'\\u0000', E'\\u0020')::json->>'timestamp')"
_BODY_TIMESTAMP = "e.body::json->>'timestamp'"  # (how migration 8's function read it)

MIGRATION = """
CREATE TABLE search_docs (
    seq         bigint PRIMARY KEY,       -- the entry's entries.seq
    session_id  text COLLATE "C" NOT NULL,
    entry_id    text NOT NULL,
    role        text NOT NULL,
    ts          numeric NOT NULL,
    length      integer NOT NULL,
    words       text NOT NULL,            -- the folded words, sorted, space separated
    tsv         tsvector                  -- NULL: past a tsvector's limits (checked in Python)
);
CREATE INDEX search_docs_tsv ON search_docs USING gin (tsv);
CREATE INDEX search_docs_session ON search_docs (session_id);
CREATE INDEX search_docs_unindexed ON search_docs (seq) WHERE tsv IS NULL;
CREATE TABLE search_pending (seq bigint PRIMARY KEY);
CREATE FUNCTION sm_search_queue() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM search_docs WHERE seq = OLD.seq;
        DELETE FROM search_pending WHERE seq = OLD.seq;
        RETURN OLD;
    END IF;
    INSERT INTO search_pending (seq) VALUES (NEW.seq) ON CONFLICT DO NOTHING;
    RETURN NEW;
END
$fn$;
CREATE TRIGGER entries_search AFTER INSERT OR UPDATE OF body OR DELETE ON entries
    FOR EACH ROW EXECUTE FUNCTION sm_search_queue();
INSERT INTO search_pending (seq) SELECT seq FROM entries;
"""

# Each session's searchable entries and their words, kept in step with search_docs by a
# trigger (the totals BM25 needs, read per query without a scan of search_docs). A row goes
# when its session has no searchable entry left (nothing of a deleted session stays).
TOTALS_MIGRATION = """
CREATE TABLE search_totals (
    session_id  text COLLATE "C" PRIMARY KEY,
    docs        bigint NOT NULL,
    words       bigint NOT NULL
);
CREATE FUNCTION sm_search_totals() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO search_totals AS t (session_id, docs, words) VALUES (NEW.session_id, 1, NEW.length)
            ON CONFLICT (session_id) DO UPDATE SET docs = t.docs + 1, words = t.words + EXCLUDED.words;
        RETURN NEW;
    ELSIF TG_OP = 'UPDATE' THEN
        IF NEW.length <> OLD.length THEN
            UPDATE search_totals SET words = words + NEW.length - OLD.length WHERE session_id = NEW.session_id;
        END IF;
        RETURN NEW;
    END IF;
    UPDATE search_totals SET docs = docs - 1, words = words - OLD.length WHERE session_id = OLD.session_id;
    DELETE FROM search_totals WHERE session_id = OLD.session_id AND docs <= 0;
    RETURN OLD;
END
$fn$;
CREATE TRIGGER search_docs_totals AFTER INSERT OR UPDATE OF length OR DELETE ON search_docs
    FOR EACH ROW EXECUTE FUNCTION sm_search_totals();
INSERT INTO search_totals (session_id, docs, words)
    SELECT session_id, count(*), coalesce(sum(length), 0) FROM search_docs GROUP BY session_id;
"""

# Migration 6: a smaller index (3.5x the bytes of an FTS5 table over the same texts at 100k
# messages, now 1.4x) and a faster query. search_docs keeps no ids, timestamp or tsvector:
# its session as the small integer of its search_totals row, its entry as entries.seq (the
# ids and timestamp are read from entries for the rows a page shows, by entries_seq), and
# the GIN index is built on an expression of its words (fastupdate off: the pending list
# left the index at twice the size of one built row by row). The totals change once per
# session and catch-up batch (a row update per indexed entry bloated search_totals to 1,035
# pages for 1,000 rows, read whole by each query) and once per deleting statement (a
# statement trigger with the deleted rows). sm_search_page ranks an unscoped search in one
# call whose statements keep generic plans (the client's statement was planned anew each
# time: 10-30 ms on a loaded machine for 0.8 ms of execution), with sequential scans off (a
# generic plan knows no term's rarity: its EXISTS read the whole table for a rare word).
# Every entry is queued again.
LAYOUT_MIGRATION = """
DROP TABLE search_docs;
DROP FUNCTION sm_search_totals();
DROP TABLE search_totals;
DROP TRIGGER entries_search ON entries;
DROP FUNCTION sm_search_queue();
DROP TABLE search_pending;
CREATE TABLE search_pending (
    seq         bigint PRIMARY KEY,
    rewrite     boolean NOT NULL          -- an update: the entry's index row (if any) is replaced
);
CREATE TABLE search_totals (
    id          integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- search_docs.sess
    session_id  text NOT NULL UNIQUE,     -- (entries' collation: joined with entries_seq)
    docs        bigint NOT NULL,
    words       bigint NOT NULL
);
CREATE TABLE search_total (              -- one row: search_totals summed (an unscoped search's totals)
    docs        bigint NOT NULL,
    words       bigint NOT NULL
);
INSERT INTO search_total VALUES (0, 0);
CREATE TABLE search_docs (
    seq         bigint NOT NULL,          -- the entry's entries.seq
    sess        integer NOT NULL,         -- its session's search_totals.id
    length      integer NOT NULL,         -- its word count
    fits        boolean NOT NULL,         -- false: past a tsvector's limits (matched on words, unindexed)
    role        text NOT NULL,
    words       text NOT NULL             -- the folded words, sorted, space separated
);
CREATE INDEX search_docs_words ON search_docs USING gin ((array_to_tsvector(string_to_array(words, ' '))))
    WITH (fastupdate = off) WHERE fits;
CREATE INDEX search_docs_sess ON search_docs (sess);
CREATE INDEX search_docs_unfit ON search_docs (sess) WHERE NOT fits;
CREATE FUNCTION sm_search_queue() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO search_pending AS p (seq, rewrite) VALUES (NEW.seq, TG_OP = 'UPDATE')
        ON CONFLICT (seq) DO UPDATE SET rewrite = p.rewrite OR EXCLUDED.rewrite;
    RETURN NEW;
END
$fn$;
CREATE TRIGGER entries_search AFTER INSERT OR UPDATE OF body ON entries
    FOR EACH ROW EXECUTE FUNCTION sm_search_queue();
CREATE FUNCTION sm_search_forget() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM search_pending p USING gone g WHERE p.seq = g.seq;
    WITH t AS (SELECT id, session_id FROM search_totals WHERE session_id IN (SELECT session_id FROM gone)),
         d AS (DELETE FROM search_docs d USING gone g, t WHERE t.session_id = g.session_id AND d.sess = t.id
               AND d.seq = g.seq RETURNING d.sess, d.length),
         n AS (SELECT sess, count(*) AS docs, sum(length) AS words FROM d GROUP BY sess),
         u AS (UPDATE search_totals s SET docs = s.docs - n.docs, words = s.words - n.words FROM n
               WHERE s.id = n.sess RETURNING n.docs, n.words)
    UPDATE search_total SET docs = docs - (SELECT sum(u.docs) FROM u), words = words - (SELECT sum(u.words) FROM u)
        WHERE EXISTS (SELECT 1 FROM u);
    DELETE FROM search_totals WHERE docs <= 0 AND session_id IN (SELECT session_id FROM gone);
    RETURN NULL;
END
$fn$;
CREATE TRIGGER entries_search_forget AFTER DELETE ON entries REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION sm_search_forget();
INSERT INTO search_pending (seq, rewrite) SELECT seq, false FROM entries;
CREATE FUNCTION sm_search_page(p_terms text[], p_spaced text[], p_qall text, p_roles text[], p_after float8,
                               p_read integer, p_k float8, p_base float8, p_k1 float8, p_b float8)
RETURNS TABLE (pending boolean, docs float8, words float8, df bigint[], session_id text, entry_id text,
               role text, ts text, length integer, tfs integer[], s float8)
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $fn$
#variable_conflict use_column
DECLARE
    v_pending boolean;
    v_docs float8;
    v_words float8;
    v_df bigint[];
    v_idf float8[];
    v_norm float8;
BEGIN
    v_pending := EXISTS (SELECT 1 FROM search_pending);
    -- No entry holding every term: nothing to count (a term's count reads each of its rows).
    IF NOT v_pending AND NOT EXISTS (
            SELECT 1 FROM search_docs d WHERE p_qall IS NOT NULL AND d.fits
            AND array_to_tsvector(string_to_array(d.words, ' ')) @@ p_qall::tsquery)
       AND NOT EXISTS (
            SELECT 1 FROM search_docs d WHERE NOT d.fits
            AND NOT EXISTS (SELECT 1 FROM unnest(p_spaced) AS t(w)
                            WHERE position(t.w in ' ' || replace(d.words, ' ', '  ') || ' ') = 0)) THEN
        RETURN QUERY SELECT false, 0::float8, 0::float8, NULL::bigint[], NULL::text, NULL::text, NULL::text,
                            NULL::text, NULL::integer, NULL::integer[], NULL::float8;
        RETURN;
    END IF;
    SELECT array_agg(
        CASE WHEN u.q IS NULL THEN 0
             ELSE (SELECT count(*) FROM search_docs d
                   WHERE d.fits AND array_to_tsvector(string_to_array(d.words, ' ')) @@ u.q::tsquery) END
        + (SELECT count(*) FROM search_docs d WHERE NOT d.fits
           AND position(u.sp in ' ' || replace(d.words, ' ', '  ') || ' ') > 0)
        ORDER BY u.i) INTO v_df
        FROM unnest(p_terms, p_spaced) WITH ORDINALITY AS u(q, sp, i);
    IF 0 = ANY(v_df) THEN  -- (a term found nowhere: no entry matches them all)
        RETURN QUERY SELECT v_pending, 0::float8, 0::float8, v_df, NULL::text, NULL::text, NULL::text, NULL::text,
                            NULL::integer, NULL::integer[], NULL::float8;
        RETURN;
    END IF;
    SELECT t.docs, t.words INTO v_docs, v_words FROM search_total t;
    SELECT array_agg(ln(1.0 + (greatest(v_docs, 1) - n + 0.5) / (n + 0.5)) ORDER BY i) INTO v_idf
        FROM unnest(v_df) WITH ORDINALITY AS u(n, i);
    v_norm := p_k1 / (CASE WHEN v_words <> 0 THEN v_words / greatest(v_docs, 1) ELSE 1.0 END) * p_b;
    RETURN QUERY
    SELECT v_pending, v_docs, v_words, v_df, t.session_id, e.entry_id, r.role, e.body::json->>'timestamp',
           r.length, r.tfs, r.s
    FROM (SELECT 1) one LEFT JOIN LATERAL (
        SELECT m.* FROM (
            SELECT x.*, (SELECT sum(v_idf[i] * x.tfs[i] * p_k / (x.tfs[i] + (p_base + v_norm * x.length)))
                         FROM generate_subscripts(x.tfs, 1) AS i) AS s
            FROM (SELECT c.seq, c.sess, c.role, c.length,
                         ARRAY(SELECT ((length(c.sp) - length(replace(c.sp, t.w, ''))) / length(t.w))::integer
                               FROM unnest(p_spaced) WITH ORDINALITY AS t(w, i) ORDER BY t.i) AS tfs
                  FROM (SELECT d.seq, d.sess, d.role, d.length, ' ' || replace(d.words, ' ', '  ') || ' ' AS sp
                        FROM search_docs d
                        WHERE p_qall IS NOT NULL AND d.fits
                          AND array_to_tsvector(string_to_array(d.words, ' ')) @@ p_qall::tsquery
                          AND (p_roles IS NULL OR d.role = ANY(p_roles))
                        UNION ALL
                        SELECT d.seq, d.sess, d.role, d.length, ' ' || replace(d.words, ' ', '  ') || ' '
                        FROM search_docs d
                        WHERE NOT d.fits AND (p_roles IS NULL OR d.role = ANY(p_roles))
                          AND NOT EXISTS (SELECT 1 FROM unnest(p_spaced) AS t(w)
                                          WHERE position(t.w in ' ' || replace(d.words, ' ', '  ') || ' ') = 0)
                        OFFSET 0) c
                  OFFSET 0) x
            ) m
        WHERE p_after IS NULL OR m.s <= p_after
        ORDER BY m.s DESC LIMIT p_read) r ON true
    LEFT JOIN search_totals t ON t.id = r.sess
    LEFT JOIN entries e ON e.session_id = t.session_id AND e.seq = r.seq;
END
$fn$;
"""

# Migration 7: sm_search_page also returns, for the first p_shown rows by its score (then
# newer timestamp), the entry's body and whether its session's active path holds it (the
# walk of ..reads.HITS_SQL), so a search with hits is one round trip, not two (the page, then
# hits_on_active_paths). Only the rows a page may show are walked, not all p_read of them.
# Idempotent (IF EXISTS, OR REPLACE): a test replays it over a schema that has it.
PAGE_MIGRATION = """
DROP FUNCTION IF EXISTS sm_search_page(text[], text[], text, text[], float8, integer, float8, float8, float8, float8);
CREATE OR REPLACE FUNCTION sm_search_page(p_terms text[], p_spaced text[], p_qall text, p_roles text[], p_after float8,
                               p_read integer, p_k float8, p_base float8, p_k1 float8, p_b float8,
                               p_shown integer)
RETURNS TABLE (pending boolean, docs float8, words float8, df bigint[], session_id text, entry_id text,
               role text, ts text, length integer, tfs integer[], s float8, body text, on_path boolean)
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $fn$
#variable_conflict use_column
DECLARE
    v_pending boolean;
    v_docs float8;
    v_words float8;
    v_df bigint[];
    v_idf float8[];
    v_norm float8;
BEGIN
    v_pending := EXISTS (SELECT 1 FROM search_pending);
    -- No entry holding every term: nothing to count (a term's count reads each of its rows).
    IF NOT v_pending AND NOT EXISTS (
            SELECT 1 FROM search_docs d WHERE p_qall IS NOT NULL AND d.fits
            AND array_to_tsvector(string_to_array(d.words, ' ')) @@ p_qall::tsquery)
       AND NOT EXISTS (
            SELECT 1 FROM search_docs d WHERE NOT d.fits
            AND NOT EXISTS (SELECT 1 FROM unnest(p_spaced) AS t(w)
                            WHERE position(t.w in ' ' || replace(d.words, ' ', '  ') || ' ') = 0)) THEN
        RETURN QUERY SELECT false, 0::float8, 0::float8, NULL::bigint[], NULL::text, NULL::text, NULL::text,
                            NULL::text, NULL::integer, NULL::integer[], NULL::float8, NULL::text, NULL::boolean;
        RETURN;
    END IF;
    SELECT array_agg(
        CASE WHEN u.q IS NULL THEN 0
             ELSE (SELECT count(*) FROM search_docs d
                   WHERE d.fits AND array_to_tsvector(string_to_array(d.words, ' ')) @@ u.q::tsquery) END
        + (SELECT count(*) FROM search_docs d WHERE NOT d.fits
           AND position(u.sp in ' ' || replace(d.words, ' ', '  ') || ' ') > 0)
        ORDER BY u.i) INTO v_df
        FROM unnest(p_terms, p_spaced) WITH ORDINALITY AS u(q, sp, i);
    IF 0 = ANY(v_df) THEN  -- (a term found nowhere: no entry matches them all)
        RETURN QUERY SELECT v_pending, 0::float8, 0::float8, v_df, NULL::text, NULL::text, NULL::text, NULL::text,
                            NULL::integer, NULL::integer[], NULL::float8, NULL::text, NULL::boolean;
        RETURN;
    END IF;
    SELECT t.docs, t.words INTO v_docs, v_words FROM search_total t;
    SELECT array_agg(ln(1.0 + (greatest(v_docs, 1) - n + 0.5) / (n + 0.5)) ORDER BY i) INTO v_idf
        FROM unnest(v_df) WITH ORDINALITY AS u(n, i);
    v_norm := p_k1 / (CASE WHEN v_words <> 0 THEN v_words / greatest(v_docs, 1) ELSE 1.0 END) * p_b;
    RETURN QUERY
    WITH RECURSIVE p AS MATERIALIZED (
        SELECT q.*, row_number() OVER (ORDER BY q.s DESC, q.tsn DESC NULLS LAST) AS n
        FROM (SELECT t.session_id, e.entry_id, r.role, e.body, e.depth, r.length, r.tfs, r.s,
                     e.body::json->>'timestamp' AS ts, (e.body::json->>'timestamp')::numeric AS tsn
              FROM (
                SELECT m.* FROM (
                    SELECT x.*, (SELECT sum(v_idf[i] * x.tfs[i] * p_k / (x.tfs[i] + (p_base + v_norm * x.length)))
                                 FROM generate_subscripts(x.tfs, 1) AS i) AS s
                    FROM (SELECT c.seq, c.sess, c.role, c.length,
                                 ARRAY(SELECT ((length(c.sp) - length(replace(c.sp, t.w, ''))) / length(t.w))::integer
                                       FROM unnest(p_spaced) WITH ORDINALITY AS t(w, i) ORDER BY t.i) AS tfs
                          FROM (SELECT d.seq, d.sess, d.role, d.length, ' ' || replace(d.words, ' ', '  ') || ' ' AS sp
                                FROM search_docs d
                                WHERE p_qall IS NOT NULL AND d.fits
                                  AND array_to_tsvector(string_to_array(d.words, ' ')) @@ p_qall::tsquery
                                  AND (p_roles IS NULL OR d.role = ANY(p_roles))
                                UNION ALL
                                SELECT d.seq, d.sess, d.role, d.length, ' ' || replace(d.words, ' ', '  ') || ' '
                                FROM search_docs d
                                WHERE NOT d.fits AND (p_roles IS NULL OR d.role = ANY(p_roles))
                                  AND NOT EXISTS (SELECT 1 FROM unnest(p_spaced) AS t(w)
                                                  WHERE position(t.w in ' ' || replace(d.words, ' ', '  ') || ' ') = 0)
                                OFFSET 0) c
                          OFFSET 0) x
                    ) m
                WHERE p_after IS NULL OR m.s <= p_after
                ORDER BY m.s DESC LIMIT p_read) r
              JOIN search_totals t ON t.id = r.sess
              JOIN entries e ON e.session_id = t.session_id AND e.seq = r.seq) q
    ), w(sid, target, tdepth, entry_id, depth, parent_id, jump_id, jump_depth) AS (
        SELECT p.session_id, p.entry_id, p.depth, e.entry_id, e.depth, e.parent_id, e.jump_id, e.jump_depth
        FROM p JOIN sessions s ON s.session_id = p.session_id
        JOIN entries e ON e.session_id = p.session_id AND e.entry_id = s.leaf
        WHERE p.n <= p_shown
      UNION ALL
        SELECT w.sid, w.target, w.tdepth, e.entry_id, e.depth, e.parent_id, e.jump_id, e.jump_depth
        FROM w JOIN entries e ON e.session_id = w.sid
         AND e.entry_id = CASE WHEN w.depth > w.tdepth AND w.jump_depth >= w.tdepth THEN w.jump_id ELSE w.parent_id END
        WHERE w.depth > w.tdepth
    )
    SELECT v_pending, v_docs, v_words, v_df, p.session_id, p.entry_id, p.role, p.ts, p.length, p.tfs, p.s,
           CASE WHEN p.n <= p_shown THEN p.body END,
           CASE WHEN p.n <= p_shown THEN EXISTS (SELECT 1 FROM w WHERE w.sid = p.session_id AND w.target = p.entry_id
                                                 AND w.depth = p.depth AND w.entry_id = p.entry_id) END
    FROM (SELECT 1) one LEFT JOIN p ON true;
END
$fn$;
"""

# Migration 12: sm_search_page reads a hit's timestamp with TIMESTAMP. Migration 8's function
# cast the body to json, which the server refuses for a body holding the escape \u0000 (no text
# holds NUL) wherever it stands: every search whose page read such an entry failed.
NUL_SAFE_PAGE_MIGRATION = PAGE_MIGRATION.replace(_BODY_TIMESTAMP, TIMESTAMP)

# Migration 13: the index emptied and every entry queued again (the first query indexes them),
# since words are the runs of the text's NFC form (search_text.py): a text typed decomposed
# was indexed as other words. (No trigger is on search_docs: the totals are set here.)
REINDEX_MIGRATION = """
DELETE FROM search_docs;
DELETE FROM search_totals;
UPDATE search_total SET docs = 0, words = 0;
INSERT INTO search_pending (seq, rewrite) SELECT seq, false FROM entries ON CONFLICT (seq) DO NOTHING;
"""

_NEXT = "SELECT seq FROM search_pending ORDER BY seq LIMIT %s"
# Locked in seq order (two catch-ups taking overlapping batches wait, never deadlock).
_TAKE = ("DELETE FROM search_pending WHERE seq IN"
         " (SELECT seq FROM search_pending WHERE seq = ANY(%s) ORDER BY seq FOR UPDATE) RETURNING seq, rewrite")
_INSERT = "INSERT INTO search_docs (seq, sess, length, fits, role, words) VALUES (%s, %s, %s, %s, %s, %s)"
# The entries' ids and timestamps, for index rows (sessions' ids, seqs).
_ENTRIES = (f"SELECT e.session_id, e.seq, e.entry_id, {TIMESTAMP}"
            " FROM unnest(%s::text[], %s::bigint[]) AS u(s, q) JOIN entries e ON e.session_id = u.s AND e.seq = u.q")


def _fits(found: Iterable[str]) -> bool:
    """Whether the words fit a tsvector (each lexeme, and all of them)."""
    distinct = set(found)
    sizes = [len(w.encode("utf-8")) for w in distinct]
    return not (any(n > LEXEME_BYTES for n in sizes) or sum(sizes) + 8 * len(sizes) > TSVECTOR_BYTES)


def _doc(body: str) -> tuple[str, int, bool, str, int] | None:
    """``(role, length, fits, words, timestamp)`` of a searchable entry's JSON text, else ``None``."""
    entry = loads(body.encode("utf-8"))
    text = searchable_text(entry)
    if text is None:
        return None
    found = words(text)
    return entry_role(entry), len(found), _fits(found), " ".join(sorted(found)), int(entry.get("timestamp", 0))


def catch_up(conn: psycopg.Connection[Any]) -> None:
    """Index the queued entries (autocommit ``conn``: a transaction per batch); after a
    catch-up of a batch or more, the index tables are vacuumed and analyzed (the planner
    otherwise has no statistics for new rows and scans search_docs for a rare word, and the
    queue's dead rows slow every query's look at it until autovacuum)."""
    done = _catch_up(conn)
    if done >= BATCH or (done and _stale(conn)):
        conn.execute("VACUUM (ANALYZE) search_docs, search_totals, search_total, search_pending")


def _stale(conn: psycopg.Connection[Any]) -> bool:
    """Whether search_docs changed by a batch or more since analyzed (what a catch-up cut
    short by a call's deadline leaves: the calls after it index less than a batch each)."""
    row = conn.execute("SELECT n_mod_since_analyze >= %s FROM pg_stat_user_tables"
                       " WHERE relid = 'search_docs'::regclass", (BATCH,)).fetchone()
    return bool(row and row[0])


def _catch_up(conn: psycopg.Connection[Any]) -> int:
    done = 0
    while True:
        with conn.transaction():
            seqs = [r[0] for r in conn.execute(_NEXT, (BATCH,)).fetchall()]
            if not seqs:
                return done
            # The entries first, FOR SHARE, then their queue rows: the order a delete (or rewrite)
            # of an entry takes them in (its trigger touches the queue after the entry), so the
            # two never wait on each other (the queue first deadlocked with a racing delete). A
            # delete of these entries waits for this batch, so its trigger then removes the rows
            # written here; without the lock a delete committing between this read and the insert
            # left an indexed entry of a deleted session (found by a search racing deletes).
            rows = conn.execute("SELECT seq, session_id, body FROM entries WHERE seq = ANY(%s)"
                                " ORDER BY seq FOR SHARE", (seqs,)).fetchall()
            # What this batch takes: another catch-up may have taken some, a delete removed others.
            taken = dict(conn.execute(_TAKE, (seqs,)).fetchall())
            done += len(seqs)
            rows = [r for r in rows if r[0] in taken]
            _index(conn, rows, [r[0] for r in rows if taken[r[0]]])
        if len(seqs) < BATCH:
            return done


def _index(conn: psycopg.Connection[Any], rows: list[tuple[Any, ...]], rewritten: list[int]) -> None:
    """Index ``rows`` (seq, session, body), replacing the index rows of ``rewritten``; each
    session's totals change once, by what is removed and added."""
    delta: dict[str, list[int]] = {}
    if rewritten:
        sids = sorted({r[1] for r in rows if r[0] in set(rewritten)})
        for sid, length in conn.execute("DELETE FROM search_docs d USING search_totals t"
                                        " WHERE t.session_id = ANY(%s) AND d.sess = t.id AND d.seq = ANY(%s)"
                                        " RETURNING t.session_id, d.length", (sids, rewritten)):
            d = delta.setdefault(sid, [0, 0])
            d[0], d[1] = d[0] - 1, d[1] - int(length)
    docs = [(r[0], r[1], doc) for r in rows if (doc := _doc(r[2])) is not None]
    for _, sid, doc in docs:
        d = delta.setdefault(sid, [0, 0])
        d[0], d[1] = d[0] + 1, d[1] + doc[1]
    if not delta:
        return
    sids = sorted(delta)
    # Each session's totals row locked in session order (two catch-ups never wait in a cycle),
    # made first when missing (its id numbers the session's index rows).
    ids = dict(conn.execute("SELECT session_id, id FROM search_totals WHERE session_id = ANY(%s)"
                            " ORDER BY session_id FOR UPDATE", (sids,)).fetchall())
    missing = [s for s in sids if s not in ids]
    if missing:
        conn.execute("INSERT INTO search_totals (session_id, docs, words) SELECT s, 0, 0"
                     " FROM unnest(%s::text[]) AS s ORDER BY 1 ON CONFLICT (session_id) DO NOTHING", (missing,))
        ids.update(conn.execute("SELECT session_id, id FROM search_totals WHERE session_id = ANY(%s)"
                                " ORDER BY session_id FOR UPDATE", (missing,)).fetchall())
    conn.execute("UPDATE search_totals t SET docs = t.docs + u.d, words = t.words + u.w"
                 " FROM unnest(%s::integer[], %s::bigint[], %s::bigint[]) AS u(id, d, w) WHERE t.id = u.id",
                 ([ids[s] for s in sids], [delta[s][0] for s in sids], [delta[s][1] for s in sids]))
    docs_delta, words_delta = sum(d[0] for d in delta.values()), sum(d[1] for d in delta.values())
    if docs_delta or words_delta:  # (after the sessions' rows: the order a delete's trigger takes them in)
        conn.execute("UPDATE search_total SET docs = docs + %s, words = words + %s", (docs_delta, words_delta))
    with conn.cursor() as cur:
        cur.executemany(_INSERT, [(seq, ids[sid], doc[1], doc[2], doc[0], doc[3]) for seq, sid, doc in docs])
    conn.execute("DELETE FROM search_totals WHERE session_id = ANY(%s) AND docs <= 0", (sids,))


def _lexeme(word: str) -> str:
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


def _tsqueries(query: Query) -> list[str | None]:
    """Per term its ``tsquery`` (``None``: a word no tsvector can hold)."""
    out: list[str | None] = [_lexeme(w) if len(w.encode("utf-8")) <= LEXEME_BYTES else None for w in query.exact]
    p = query.prefix
    out.append(_lexeme(p) + ":*" if len(p.encode("utf-8")) <= LEXEME_BYTES else None)
    return out


_TSV = "array_to_tsvector(string_to_array(d.words, ' '))"  # (the expression search_docs_words indexes)
_IN_SCOPE = " AND d.sess IN (SELECT id FROM search_totals WHERE session_id = ANY(%s))"


def _scope(sessions: Collection[str] | None) -> tuple[str, list[Any]]:
    if sessions is None:
        return "", []
    return _IN_SCOPE, [[key(s) for s in sessions]]


def pending(conn: psycopg.Connection[Any]) -> list[int]:
    """The queued entries (new or rewritten since indexed): what a read-only search reads itself."""
    return [int(r[0]) for r in conn.execute("SELECT seq FROM search_pending")]


def search(conn: psycopg.Connection[Any], query: Query, sessions: Collection[str] | None,
           roles: Collection[str] | None, queued: list[int] | None = None) -> Matches:
    """:class:`Matches` inside ``sessions`` (``None``: every indexed session), after a catch-up;
    ``queued`` (a read-only store, in one snapshot: :func:`pending`): no catch-up, those
    entries' index rows left out and the entries matched here."""
    if queued is None:
        catch_up(conn)
    where, params = _scope(sessions)
    if queued:
        where, params = where + " AND NOT (d.seq = ANY(%s))", [*params, queued]
    out = Matches()
    docs, total = _totals(conn, sessions, queued)
    out.docs, out.total_length = int(docs), int(total)
    qs = _tsqueries(query)
    usable = [q for q in qs if q is not None]
    counts: list[int] = []
    cols = ("SELECT t.session_id, d.seq, d.role, d.length, d.words FROM search_docs d"
            " JOIN search_totals t ON t.id = d.sess")
    if usable:
        filters = ", ".join(f"count(*) FILTER (WHERE {_TSV} @@ %s::tsquery)" for _ in usable)
        row = conn.execute(f"SELECT {filters} FROM search_docs d WHERE d.fits AND {_TSV} @@ %s::tsquery" + where,
                           [*usable, " | ".join(usable), *params]).fetchone()
        counts = [int(n) for n in row] if row is not None else [0] * len(usable)
    it = iter(counts)
    out.df = [next(it) if q is not None else 0 for q in qs]
    rows: list[tuple[Any, ...]] = []
    if all(q is not None for q in qs) and all(out.df):
        rows = conn.execute(f"{cols} WHERE d.fits AND {_TSV} @@ %s::tsquery" + where,
                            [" & ".join(usable), *params]).fetchall()
    # Rows without a tsvector: checked here, for the statistics and as candidates.
    for r in conn.execute(f"{cols} WHERE NOT d.fits" + where, params):
        tfs = term_counts(query, Counter(r[4].split()))
        out.df = [n + (tf > 0) for n, tf in zip(out.df, tfs, strict=True)]
        rows.append(r)
    found: list[tuple[str, int, str, int, tuple[int, ...]]] = []  # (session, seq, role, length, tfs)
    for sid, seq, role, length, text in rows:
        if roles is not None and role not in roles:
            continue
        tfs = term_counts(query, Counter(text.split()))
        if all(tfs):
            found.append((sid, seq, role, length, tfs))
    ids = _entry_ids(conn, [(f[0], f[1]) for f in found])
    for sid, seq, role, length, tfs in found:
        if (sid, seq) in ids:
            eid, ts = ids[sid, seq]
            out.candidates.append(Candidate(unkey(sid), unkey(eid), role, ts, tfs, int(length)))
    if queued:
        entry_where = " AND session_id = ANY(%s)" if sessions is not None else ""
        entry_params = [[key(s) for s in sessions]] if sessions is not None else []
        for sid, eid, body in conn.execute("SELECT session_id, entry_id, body FROM entries"
                                           " WHERE seq = ANY(%s)" + entry_where, [queued, *entry_params]):
            doc = _doc(body)
            if doc is None:
                continue
            out.docs += 1
            out.total_length += doc[1]
            tfs = term_counts(query, Counter(doc[3].split()))
            out.df = [n + (tf > 0) for n, tf in zip(out.df, tfs, strict=True)]
            if all(tfs) and (roles is None or doc[0] in roles):
                out.candidates.append(Candidate(unkey(sid), unkey(eid), doc[0], doc[4], tfs, doc[1]))
    return out


def _entry_ids(conn: psycopg.Connection[Any], rows: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[str, int]]:
    """Each index row's (session, seq) -> its entry's id and timestamp."""
    if not rows:
        return {}
    got = conn.execute(_ENTRIES, ([r[0] for r in rows], [r[1] for r in rows])).fetchall()
    return {(sid, seq): (eid, _ts(ts)) for sid, seq, eid, ts in got}


def _ts(text: str | None) -> int:
    """An entry's timestamp as read from its JSON text (absent: 0, as the entry's reader has it)."""
    return 0 if text is None else int(Decimal(text))


def _totals(conn: psycopg.Connection[Any], sessions: Collection[str] | None,
            queued: list[int] | None) -> tuple[int, int]:
    """The searchable entries in scope and their words (``queued``'s index rows left out)."""
    where = " WHERE session_id = ANY(%s)" if sessions is not None else ""
    params = [[key(s) for s in sessions]] if sessions is not None else []
    row = conn.execute("SELECT coalesce(sum(docs), 0), coalesce(sum(words), 0) FROM search_totals" + where,
                       params).fetchone() or (0, 0)
    docs, total = int(row[0]), int(row[1])
    if queued:
        scope, scope_params = _scope(sessions)
        stale = conn.execute("SELECT count(*), coalesce(sum(d.length), 0) FROM search_docs d WHERE d.seq = ANY(%s)"
                             + scope, [queued, *scope_params]).fetchone() or (0, 0)
        docs, total = docs - int(stale[0]), total - int(stale[1])
    return docs, total


# -- ranking inside the database --------------------------------------------------

_MARGIN = 1e-6  # above the rounding (5e-7) and any difference of SQL's arithmetic from Python's (far below)


Shown = dict[tuple[str, str], tuple[Entry, bool]]


def page(conn: psycopg.Connection[Any], query: Query, sessions: Collection[str] | None,
         roles: Collection[str] | None, limit: int, after: SortKey | None, stats: Stats | None = None) -> Ranked:
    """:func:`page_shown` without the entries."""
    return page_shown(conn, query, sessions, roles, limit, after, 0, stats)[0]


def page_shown(conn: psycopg.Connection[Any], query: Query, sessions: Collection[str] | None,
               roles: Collection[str] | None, limit: int, after: SortKey | None,
               shown: int, stats: Stats | None = None) -> tuple[Ranked, Shown]:
    """The ranked page of :meth:`~session_manager.store.SessionStore.search_page`, ranked by
    PostgreSQL (autocommit ``conn``): one call of ``sm_search_page`` (every session) or one
    statement (a scope) reads the queue's state, the totals (``search_total``; a scope's
    ``search_totals`` rows), each term's document count and the best matches ordered by the
    BM25 score of :class:`~..search_index.Bm25` computed in SQL (unrounded); when the queue
    was not empty, :func:`catch_up` runs and the statement again. Here each row's exact score
    and key are computed and sorted; enough rows were read when the lowest SQL score is below
    the ``limit``-th kept hit's rounded score by more than rounding can move it (as
    :func:`..sql.fts5.ranked_page`), else more are read (ties at the boundary, hits the
    cursor skips). Rows without a ``tsvector`` are matched on their words in SQL.

    With the page, every session's call returns the entry and the active-path flag of its
    first ``shown`` rows by SQL score (then newer timestamp), keyed by (session, entry) id:
    usually every hit a page shows (one round trip); a hit missing there (a tie ordered
    otherwise, a scoped search) is for the caller to read.

    ``stats`` (a cursor's): the statistics to score with, sent as parameters of the client
    statement (scoped or not; ``sm_search_page`` counts for itself), so nothing is counted
    and the pages of one cursor are one ranking whatever was appended or deleted between
    them."""
    found: Shown = {}
    if limit <= 0:
        return Ranked.of([], stats), found
    qs = _tsqueries(query)
    nt = len(qs)
    params: dict[str, Any] = {"k": K1 + 1, "base": K1 * (1 - B), "k1": K1, "b": B,
                              "wp": " " + query.prefix, "lp": len(query.prefix) + 1}
    for i, w in enumerate(query.exact):
        params[f"w{i}"], params[f"l{i}"] = " " + w + " ", len(w) + 2
    for i, q in enumerate(qs):
        if q is not None:
            params[f"q{i}"] = q
    usable = [q for q in qs if q is not None]
    if len(usable) == nt:
        params["qall"] = " & ".join(usable)
    if sessions is not None:
        params["scope"] = [key(s) for s in sessions]
    if roles is not None:
        params["roles"] = sorted(roles)
    if after is not None:
        params["after"] = -after[0] + _MARGIN
    if stats is not None:
        params.update(docs=stats.docs, words=stats.total_length, **{f"d{i}": n for i, n in enumerate(stats.df)})
    if sessions is None and stats is None:  # (every session: one call of sm_search_page, its plans kept)
        fn = {"terms": qs, "spaced": [" " + w + " " for w in query.exact] + [" " + query.prefix],
              "qall": params.get("qall"), "roles": params.get("roles"), "after": params.get("after"),
              "k": K1 + 1, "base": K1 * (1 - B), "k1": K1, "b": B}

        def fetch(read: int) -> tuple[bool, int, int, list[int], list[tuple[Any, ...]]]:
            got = conn.execute(_PAGE_CALL, {**fn, "read": read, "shown": shown}, prepare=True).fetchall()
            head = got[0]
            found.clear()
            for r in got:
                if r[11] is not None:
                    found[unkey(r[4]), unkey(r[5])] = (loads(r[11].encode("utf-8")), bool(r[12]))
            rows = [(*r[4:9], tuple(r[9]), r[10]) for r in got if r[4] is not None]
            return bool(head[0]), int(head[1]), int(head[2]), [int(n) for n in head[3] or ()], rows
    else:
        sql = _page_sql(len(query.exact), tuple(q is not None for q in qs), roles is not None, after is not None,
                        sessions is not None, stats is not None)

        def fetch(read: int) -> tuple[bool, int, int, list[int], list[tuple[Any, ...]]]:
            got = conn.execute(sql, {**params, "read": read}).fetchall()
            head = got[0]
            rows = [(*r[3 + nt : 8 + nt], tuple(r[8 + nt : 8 + 2 * nt]), r[-1]) for r in got if r[3 + nt] is not None]
            return bool(head[0]), int(head[1]), int(head[2]), [int(n) for n in head[3 : 3 + nt]], rows
    read = limit + 16
    caught_up = False
    while True:
        pending_rows, docs, words, df, rows = fetch(read)
        if pending_rows and not caught_up:  # (the queue held entries: index them, then read again)
            catch_up(conn)
            caught_up = True
            continue
        if not rows:
            return Ranked.of([], stats), found
        bm25 = (stats or Stats(docs, words, tuple(df))).bm25()
        kept: list[tuple[SortKey, Candidate]] = []
        for sid, eid, role, ts, length, tfs, _ in rows:
            tfs = tuple(int(t) for t in tfs)
            if not all(tfs):  # (checked, never trusted)
                continue
            c = Candidate(unkey(sid), unkey(eid), role, _ts(ts), tfs, int(length))
            k = sort_key(bm25.score(tfs, c.length), c)
            if after is None or k > after:
                kept.append((k, c))
        kept.sort(key=lambda kc: kc[0])
        lowest = min(float(r[-1]) for r in rows)
        if len(rows) < read or (len(kept) >= limit and lowest < -kept[limit - 1][0][0] - _MARGIN):
            return Ranked.of(kept[:limit], stats or Stats(docs, words, tuple(df))), found
        read *= 8


_PAGE_CALL = ("SELECT * FROM sm_search_page(%(terms)s::text[], %(spaced)s::text[], %(qall)s::text,"
              " %(roles)s::text[], %(after)s::float8, %(read)s::integer, %(k)s::float8, %(base)s::float8,"
              " %(k1)s::float8, %(b)s::float8, %(shown)s::integer)")


@functools.lru_cache(maxsize=64)
def _page_sql(exact: int, indexed: tuple[bool, ...], by_role: bool, after: bool, scoped: bool = True,
              frozen: bool = False) -> str:
    """The statement of :func:`page` inside a scope for a query of ``exact`` whole words and
    a prefix (``indexed``: per term, whether a tsvector can hold it), made once per shape;
    ``scoped`` false: every session; ``frozen``: the statistics are the parameters
    ``%(d<i>)s``, ``%(docs)s`` and ``%(words)s`` (a cursor's), nothing counted."""
    nt = exact + 1
    scope = " AND d.sess IN (SELECT id FROM search_totals WHERE session_id = ANY(%(scope)s))" if scoped else ""
    only = " AND d.role = ANY(%(roles)s)" if by_role else ""
    sp = "(' ' || replace(d.words, ' ', '  ') || ' ')"
    # A row without a tsvector: each term looked for in its words (one space around each word).
    text = [f"position(%(w{i})s in {sp}) > 0" for i in range(exact)] + [f"position(%(wp)s in {sp}) > 0"]
    counts = []
    for i in range(nt):
        unindexed = f"(SELECT count(*) FROM search_docs d WHERE NOT d.fits AND {text[i]}{scope})"
        if indexed[i]:
            counts.append(f"(SELECT count(*) FROM search_docs d WHERE d.fits AND {_TSV} @@ %(q{i})s::tsquery{scope})"
                          f" + {unindexed}")
        else:
            counts.append(unindexed)
    stats = ", ".join(f"{c} AS d{i}" for i, c in enumerate(counts))
    totals = ("SELECT coalesce(sum(docs), 0)::float8 AS docs, coalesce(sum(words), 0)::float8 AS words"
              " FROM search_totals WHERE session_id = ANY(%(scope)s)")
    if frozen:
        stats = ", ".join(f"%(d{i})s::bigint AS d{i}" for i in range(nt))
        totals = "SELECT %(docs)s::float8 AS docs, %(words)s::float8 AS words"
    idfs = ", ".join(f"ln(1.0 + (greatest(docs, 1) - d{i} + 0.5) / (d{i} + 0.5)) AS i{i}" for i in range(nt))
    norm = "%(k1)s / (CASE WHEN words <> 0 THEN words / greatest(docs, 1) ELSE 1.0 END) * %(b)s AS norm"
    tfs = [f"(length(sp) - length(replace(sp, %(w{i})s, ''))) / %(l{i})s AS t{i}" for i in range(exact)]
    tfs.append(f"(length(sp) - length(replace(sp, %(wp)s, ''))) / %(lp)s AS t{exact}")
    cols = "seq, sess, role, length"
    dcols = "d.seq, d.sess, d.role, d.length"
    branches = []
    if all(indexed):
        branches.append(f"SELECT {dcols}, {sp} AS sp FROM search_docs d"
                        f" WHERE d.fits AND {_TSV} @@ %(qall)s::tsquery{scope}{only}")
    branches.append(f"SELECT {dcols}, {sp} AS sp FROM search_docs d"
                    f" WHERE NOT d.fits AND {' AND '.join(text)}{scope}{only}")
    source = " UNION ALL ".join(branches)
    score = " + ".join(f"(w.i{i} * t{i} * %(k)s / (t{i} + (%(base)s + w.norm * length)))" for i in range(nt))
    where = " WHERE s <= %(after)s" if after else ""
    ts_ = ", ".join(f"t{i}" for i in range(nt))
    ds = ", ".join(f"w.d{i}" for i in range(nt))
    rts = ", ".join(f"r.t{i}" for i in range(nt))
    # (MATERIALIZED and OFFSET 0: each count and each row's spaced words and term counts are
    # computed once, not once per reference the planner would inline; the ids and timestamp
    # are read for the rows read only)
    return (f"WITH c AS MATERIALIZED (SELECT {stats}),"
            f" w AS MATERIALIZED (SELECT *, {idfs}, {norm} FROM c, ({totals}) t),"
            f" m AS (SELECT {cols}, {ts_}, {score} AS s FROM"
            f" (SELECT {cols}, {', '.join(tfs)} FROM ({source} OFFSET 0) x OFFSET 0) v, w)"
            f" SELECT EXISTS (SELECT 1 FROM search_pending), w.docs, w.words, {ds},"
            f" t.session_id, e.entry_id, r.role, {TIMESTAMP}, r.length, {rts}, r.s"
            f" FROM w LEFT JOIN LATERAL (SELECT * FROM m{where} ORDER BY s DESC LIMIT %(read)s) r ON true"
            f" LEFT JOIN search_totals t ON t.id = r.sess"
            f" LEFT JOIN entries e ON e.session_id = t.session_id AND e.seq = r.seq")


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, Decimal)) else int(str(value))
