"""The postgres adapter's search index: a ``tsvector`` per searchable entry
with a GIN index, brought up to date before each query.

Words are made in Python (:func:`..search_text.words`: case folding and
accent folding by NFKD, the one definition every adapter indexes), so this
index finds exactly what the others do; the ``tsvector`` is built from
those words as lexemes (``array_to_tsvector``: the ``simple``
configuration's no-stemming, no-stop-word rule, with no parser of its own
that would split words differently). A query is a ``tsquery`` of its folded
words, the last one a prefix (``'word':*``).

Commits stay one round trip (``sm_apply``): a trigger on ``entries``
queues each new or rewritten entry's ``seq`` in ``search_pending``, in the
commit's transaction; before a query, :func:`catch_up` turns the queued
entries into ``search_docs`` rows (any instance may, a batch at a time, its
rows locked). A deleted entry's row goes with it (the same trigger). The
migration that adds the index queues every stored entry (the backfill is
done by the first query).

A document whose words exceed what a ``tsvector`` holds (a lexeme of 2 KB,
1 MB in all) gets no ``tsvector``: such rows are read and checked in Python
on every query (a partial index finds them).

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
from ..search_index import K1, B, Bm25, Candidate, Matches, SortKey, sort_key, term_counts
from ..search_text import Query, entry_role, searchable_text, words
from ..sql.keys import key, unkey

__all__ = ["MIGRATION", "PAGE_MIGRATION", "TOTALS_MIGRATION", "catch_up", "page", "pending", "search"]

BATCH = 2000
LEXEME_BYTES = 2046  # PostgreSQL's longest lexeme (MAXSTRLEN - 1)
TSVECTOR_BYTES = 900_000  # under the 1 MB limit with room for its per-lexeme entries

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

# Migration 6: totals kept by the catch-up (one upsert per session and batch, sorted) instead
# of a row update per indexed entry (1,000 sessions of 100 entries left search_totals at
# 1,035 pages for 1,000 rows, read whole by every query: 17 ms of a 20 ms search), the
# trigger kept for deletes outside a catch-up; and sm_search_page, the ranked page of an
# unscoped search in one call whose statements keep generic plans (the client's statement
# was planned anew each time: 10-30 ms on a loaded machine for 0.8 ms of execution).
PAGE_MIGRATION = """
CREATE OR REPLACE FUNCTION sm_search_totals() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF current_setting('sm.catch_up', true) = 'on' THEN  -- (the catch-up counts its own changes)
        RETURN OLD;
    END IF;
    UPDATE search_totals SET docs = docs - 1, words = words - OLD.length WHERE session_id = OLD.session_id;
    DELETE FROM search_totals WHERE session_id = OLD.session_id AND docs <= 0;
    RETURN OLD;
END
$fn$;
DROP TRIGGER search_docs_totals ON search_docs;
CREATE TRIGGER search_docs_totals AFTER DELETE ON search_docs FOR EACH ROW EXECUTE FUNCTION sm_search_totals();
TRUNCATE search_totals;
INSERT INTO search_totals (session_id, docs, words)
    SELECT session_id, count(*), coalesce(sum(length), 0) FROM search_docs GROUP BY session_id;
CREATE FUNCTION sm_search_page(p_terms text[], p_spaced text[], p_qall text, p_roles text[], p_after float8,
                               p_read integer, p_k float8, p_base float8, p_k1 float8, p_b float8)
RETURNS TABLE (pending boolean, docs float8, words float8, df bigint[], session_id text, entry_id text,
               role text, ts numeric, length integer, tfs integer[], s float8)
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $fn$
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
    SELECT coalesce(sum(t.docs), 0), coalesce(sum(t.words), 0) INTO v_docs, v_words FROM search_totals t;
    SELECT array_agg(
        CASE WHEN u.q IS NULL THEN 0
             ELSE (SELECT count(*) FROM search_docs d WHERE d.tsv @@ u.q::tsquery) END
        + (SELECT count(*) FROM search_docs d WHERE d.tsv IS NULL
           AND position(u.sp in ' ' || replace(d.words, ' ', '  ') || ' ') > 0)
        ORDER BY u.i) INTO v_df
        FROM unnest(p_terms, p_spaced) WITH ORDINALITY AS u(q, sp, i);
    SELECT array_agg(ln(1.0 + (greatest(v_docs, 1) - n + 0.5) / (n + 0.5)) ORDER BY i) INTO v_idf
        FROM unnest(v_df) WITH ORDINALITY AS u(n, i);
    v_norm := p_k1 / (CASE WHEN v_words <> 0 THEN v_words / greatest(v_docs, 1) ELSE 1.0 END) * p_b;
    RETURN QUERY
    SELECT v_pending, v_docs, v_words, v_df, r.session_id, r.entry_id, r.role, r.ts, r.length, r.tfs, r.s
    FROM (SELECT 1) one LEFT JOIN LATERAL (
        SELECT m.session_id, m.entry_id, m.role, m.ts, m.length, m.tfs, m.s FROM (
            SELECT x.*, (SELECT sum(v_idf[i] * x.tfs[i] * p_k / (x.tfs[i] + (p_base + v_norm * x.length)))
                         FROM generate_subscripts(x.tfs, 1) AS i) AS s
            FROM (SELECT c.session_id, c.entry_id, c.role, c.ts, c.length,
                         ARRAY(SELECT ((length(c.sp) - length(replace(c.sp, t.w, ''))) / length(t.w))::integer
                               FROM unnest(p_spaced) WITH ORDINALITY AS t(w, i) ORDER BY t.i) AS tfs
                  FROM (SELECT d.session_id, d.entry_id, d.role, d.ts, d.length,
                               ' ' || replace(d.words, ' ', '  ') || ' ' AS sp
                        FROM search_docs d
                        WHERE p_qall IS NOT NULL AND d.tsv @@ p_qall::tsquery
                          AND (p_roles IS NULL OR d.role = ANY(p_roles))
                        UNION ALL
                        SELECT d.session_id, d.entry_id, d.role, d.ts, d.length,
                               ' ' || replace(d.words, ' ', '  ') || ' '
                        FROM search_docs d
                        WHERE d.tsv IS NULL AND (p_roles IS NULL OR d.role = ANY(p_roles))
                          AND NOT EXISTS (SELECT 1 FROM unnest(p_spaced) AS t(w)
                                          WHERE position(t.w in ' ' || replace(d.words, ' ', '  ') || ' ') = 0)
                        OFFSET 0) c
                  OFFSET 0) x
            ) m
        WHERE p_after IS NULL OR m.s <= p_after
        ORDER BY m.s DESC LIMIT p_read) r ON true;
END
$fn$;
"""

_NEXT = "SELECT seq FROM search_pending ORDER BY seq LIMIT %s"
# Locked in seq order (two catch-ups taking overlapping batches wait, never deadlock).
_TAKE = ("DELETE FROM search_pending WHERE seq IN"
         " (SELECT seq FROM search_pending WHERE seq = ANY(%s) ORDER BY seq FOR UPDATE) RETURNING seq")
_INSERT = ("INSERT INTO search_docs (seq, session_id, entry_id, role, ts, length, words, tsv)"
           " VALUES (%s, %s, %s, %s, %s, %s, %s, array_to_tsvector(%s::text[]))")
_TOTALS = ("INSERT INTO search_totals AS t (session_id, docs, words)"
           " SELECT * FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) ORDER BY 1"
           " ON CONFLICT (session_id) DO UPDATE SET docs = t.docs + EXCLUDED.docs, words = t.words + EXCLUDED.words")


def _lexemes(found: Iterable[str]) -> list[str] | None:
    """The distinct words as a tsvector's lexemes; ``None`` past its limits."""
    distinct = sorted(set(found))
    sizes = [len(w.encode("utf-8")) for w in distinct]
    if any(n > LEXEME_BYTES for n in sizes) or sum(sizes) + 8 * len(sizes) > TSVECTOR_BYTES:
        return None
    return distinct


def _row(seq: int, sid: str, eid: str, body: str) -> tuple[Any, ...] | None:
    entry = loads(body.encode("utf-8"))
    text = searchable_text(entry)
    if text is None:
        return None
    found = words(text)
    return (seq, sid, eid, entry_role(entry), int(entry.get("timestamp", 0)), len(found), " ".join(sorted(found)),
            _lexemes(found))


def catch_up(conn: psycopg.Connection[Any]) -> None:
    """Index the queued entries (autocommit ``conn``: a transaction per batch); after a
    catch-up of a batch or more, the index tables are vacuumed and analyzed (the planner
    otherwise has no statistics for new rows and scans search_docs for a rare word, and the
    queue's and totals' dead rows slow every query's reads of them until autovacuum)."""
    if _catch_up(conn) >= BATCH:
        conn.execute("VACUUM (ANALYZE) search_docs, search_totals, search_pending")


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
            rows = conn.execute("SELECT seq, session_id, entry_id, body FROM entries WHERE seq = ANY(%s)"
                                " ORDER BY seq FOR SHARE", (seqs,)).fetchall()
            # What this batch takes: another catch-up may have taken some, a delete removed others.
            taken = {r[0] for r in conn.execute(_TAKE, (seqs,)).fetchall()}
            done += len(seqs)
            rows = [r for r in rows if r[0] in taken]
            docs = [d for d in (_row(*r) for r in rows) if d is not None]
            # The totals change by what this batch removes and adds, applied once per session
            # (the trigger leaves the rows it deletes here to this count).
            conn.execute("SET LOCAL sm.catch_up = 'on'")
            delta: dict[str, list[int]] = {}
            old = conn.execute("DELETE FROM search_docs WHERE seq = ANY(%s) RETURNING session_id, length",
                               ([r[0] for r in rows],)).fetchall()
            for sid, length in old:
                d = delta.setdefault(sid, [0, 0])
                d[0], d[1] = d[0] - 1, d[1] - int(length)
            for doc in docs:
                d = delta.setdefault(doc[1], [0, 0])
                d[0], d[1] = d[0] + 1, d[1] + doc[5]
            with conn.cursor() as cur:
                cur.executemany(_INSERT, docs)
            changed = sorted((sid, n, w) for sid, (n, w) in delta.items() if n or w)
            if changed:  # (in session order: two catch-ups never wait on each other's rows in a cycle)
                conn.execute(_TOTALS, ([c[0] for c in changed], [c[1] for c in changed], [c[2] for c in changed]))
                conn.execute("DELETE FROM search_totals WHERE session_id = ANY(%s) AND docs <= 0",
                             ([c[0] for c in changed],))
        if len(seqs) < BATCH:
            return done


def _lexeme(word: str) -> str:
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


def _tsqueries(query: Query) -> list[str | None]:
    """Per term its ``tsquery`` (``None``: a word no tsvector can hold)."""
    out: list[str | None] = [_lexeme(w) if len(w.encode("utf-8")) <= LEXEME_BYTES else None for w in query.exact]
    p = query.prefix
    out.append(_lexeme(p) + ":*" if len(p.encode("utf-8")) <= LEXEME_BYTES else None)
    return out


def _scope(sessions: Collection[str] | None) -> tuple[str, list[Any]]:
    if sessions is None:
        return "", []
    return " AND session_id = ANY(%s)", [[key(s) for s in sessions]]


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
        where, params = where + " AND NOT (seq = ANY(%s))", [*params, queued]
    out = Matches()
    docs, total = _totals(conn, sessions, queued)
    out.docs, out.total_length = int(docs), int(total)
    qs = _tsqueries(query)
    usable = [q for q in qs if q is not None]
    counts: list[int] = []
    if usable:
        filters = ", ".join("count(*) FILTER (WHERE tsv @@ %s::tsquery)" for _ in usable)
        row = conn.execute(f"SELECT {filters} FROM search_docs WHERE tsv @@ %s::tsquery" + where,
                           [*usable, " | ".join(usable), *params]).fetchone()
        counts = [int(n) for n in row] if row is not None else [0] * len(usable)
    it = iter(counts)
    out.df = [next(it) if q is not None else 0 for q in qs]
    rows: list[tuple[Any, ...]] = []
    if all(q is not None for q in qs) and all(out.df):
        rows = conn.execute("SELECT session_id, entry_id, role, ts, length, words FROM search_docs"
                            " WHERE tsv @@ %s::tsquery" + where, [" & ".join(usable), *params]).fetchall()
    # Rows without a tsvector: checked here, for the statistics and as candidates.
    for r in conn.execute("SELECT session_id, entry_id, role, ts, length, words FROM search_docs"
                          " WHERE tsv IS NULL" + where, params):
        tfs = term_counts(query, Counter(r[5].split()))
        out.df = [n + (tf > 0) for n, tf in zip(out.df, tfs, strict=True)]
        rows.append(r)
    if queued:
        entry_where, entry_params = _scope(sessions)
        for seq, sid, eid, body in conn.execute("SELECT seq, session_id, entry_id, body FROM entries"
                                                " WHERE seq = ANY(%s)" + entry_where, [queued, *entry_params]):
            found = _row(seq, sid, eid, body)
            if found is None:
                continue
            out.docs += 1
            out.total_length += found[5]
            tfs = term_counts(query, Counter(found[6].split()))
            out.df = [n + (tf > 0) for n, tf in zip(out.df, tfs, strict=True)]
            rows.append(found[1:7])
    for sid, eid, role, ts, length, text in rows:
        if roles is not None and role not in roles:
            continue
        tfs = term_counts(query, Counter(text.split()))
        if all(tfs):
            out.candidates.append(Candidate(unkey(sid), unkey(eid), role, _int(ts), tfs, length))
    return out


def _totals(conn: psycopg.Connection[Any], sessions: Collection[str] | None,
            queued: list[int] | None) -> tuple[int, int]:
    """The searchable entries in scope and their words (``queued``'s index rows left out)."""
    where, params = _scope(sessions)
    row = conn.execute("SELECT coalesce(sum(docs), 0), coalesce(sum(words), 0) FROM search_totals WHERE true"
                       + where, params).fetchone() or (0, 0)
    docs, total = int(row[0]), int(row[1])
    if queued:
        stale = conn.execute("SELECT count(*), coalesce(sum(length), 0) FROM search_docs WHERE seq = ANY(%s)" + where,
                             [queued, *params]).fetchone() or (0, 0)
        docs, total = docs - int(stale[0]), total - int(stale[1])
    return docs, total


# -- ranking inside the database --------------------------------------------------

_MARGIN = 1e-6  # above the rounding (5e-7) and any difference of SQL's arithmetic from Python's (far below)


def page(conn: psycopg.Connection[Any], query: Query, sessions: Collection[str] | None,
         roles: Collection[str] | None, limit: int, after: SortKey | None) -> list[tuple[SortKey, Candidate]]:
    """The ranked page of :meth:`~session_manager.store.SessionStore.search_page`, ranked by
    PostgreSQL (autocommit ``conn``): one statement reads the queue's state, the totals of the
    scope (``search_totals``), each term's document count and the best matches ordered by the
    BM25 score of :class:`~..search_index.Bm25` computed in SQL (unrounded); when the queue
    was not empty, :func:`catch_up` runs and the statement again. Here each row's exact score
    and key are computed and sorted; enough rows were read when the lowest SQL score is below
    the ``limit``-th kept hit's rounded score by more than rounding can move it (as
    :func:`..sql.fts5.ranked_page`), else more are read (ties at the boundary, hits the
    cursor skips). Rows without a ``tsvector`` are matched on their words in SQL."""
    if limit <= 0:
        return []
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
    if sessions is None:  # (every session: one call of sm_search_page, its plans kept)
        fn = {"terms": qs, "spaced": [" " + w + " " for w in query.exact] + [" " + query.prefix],
              "qall": params.get("qall"), "roles": params.get("roles"), "after": params.get("after"),
              "k": K1 + 1, "base": K1 * (1 - B), "k1": K1, "b": B}

        def fetch(read: int) -> tuple[bool, int, int, list[int], list[tuple[Any, ...]]]:
            got = conn.execute(_PAGE_CALL, {**fn, "read": read}, prepare=True).fetchall()
            head = got[0]
            rows = [(*r[4:9], tuple(r[9]), r[10]) for r in got if r[4] is not None]
            return bool(head[0]), int(head[1]), int(head[2]), [int(n) for n in head[3]], rows
    else:
        sql = _page_sql(len(query.exact), tuple(q is not None for q in qs), True, roles is not None,
                        after is not None)

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
            return []
        bm25 = Bm25.of(docs, words, df)
        kept: list[tuple[SortKey, Candidate]] = []
        for sid, eid, role, ts, length, tfs, _ in rows:
            tfs = tuple(int(t) for t in tfs)
            if not all(tfs):  # (checked, never trusted)
                continue
            c = Candidate(unkey(sid), unkey(eid), role, _int(ts), tfs, int(length))
            k = sort_key(bm25.score(tfs, c.length), c)
            if after is None or k > after:
                kept.append((k, c))
        kept.sort(key=lambda kc: kc[0])
        lowest = min(float(r[-1]) for r in rows)
        if len(rows) < read or (len(kept) >= limit and lowest < -kept[limit - 1][0][0] - _MARGIN):
            return kept[:limit]
        read *= 8


_PAGE_CALL = ("SELECT * FROM sm_search_page(%(terms)s::text[], %(spaced)s::text[], %(qall)s::text,"
              " %(roles)s::text[], %(after)s::float8, %(read)s::integer, %(k)s::float8, %(base)s::float8,"
              " %(k1)s::float8, %(b)s::float8)")


@functools.lru_cache(maxsize=64)
def _page_sql(exact: int, indexed: tuple[bool, ...], scoped: bool, by_role: bool, after: bool) -> str:
    """The statement of :func:`page` for a query of ``exact`` whole words and a prefix
    (``indexed``: per term, whether a tsvector can hold it), made once per shape."""
    nt = exact + 1
    scope = " AND session_id = ANY(%(scope)s)" if scoped else ""
    only = " AND role = ANY(%(roles)s)" if by_role else ""
    sp = "(' ' || replace(words, ' ', '  ') || ' ')"
    # A row without a tsvector: each term looked for in its words (one space around each word).
    text = [f"position(%(w{i})s in {sp}) > 0" for i in range(exact)] + [f"position(%(wp)s in {sp}) > 0"]
    counts = []
    for i in range(nt):
        unindexed = f"(SELECT count(*) FROM search_docs WHERE tsv IS NULL AND {text[i]}{scope})"
        if indexed[i]:
            counts.append(f"(SELECT count(*) FROM search_docs WHERE tsv @@ %(q{i})s::tsquery{scope}) + {unindexed}")
        else:
            counts.append(unindexed)
    stats = ", ".join(f"{c} AS d{i}" for i, c in enumerate(counts))
    totals = ("SELECT coalesce(sum(docs), 0)::float8 AS docs, coalesce(sum(words), 0)::float8 AS words"
              " FROM search_totals WHERE true" + scope)
    idfs = ", ".join(f"ln(1.0 + (greatest(docs, 1) - d{i} + 0.5) / (d{i} + 0.5)) AS i{i}" for i in range(nt))
    norm = "%(k1)s / (CASE WHEN words <> 0 THEN words / greatest(docs, 1) ELSE 1.0 END) * %(b)s AS norm"
    tfs = [f"(length(sp) - length(replace(sp, %(w{i})s, ''))) / %(l{i})s AS t{i}" for i in range(exact)]
    tfs.append(f"(length(sp) - length(replace(sp, %(wp)s, ''))) / %(lp)s AS t{exact}")
    cols = "session_id, entry_id, role, ts, length"
    branches = []
    if all(indexed):
        branches.append(f"SELECT {cols}, words FROM search_docs WHERE tsv @@ %(qall)s::tsquery{scope}{only}")
    branches.append(f"SELECT {cols}, words FROM search_docs WHERE tsv IS NULL AND {' AND '.join(text)}{scope}{only}")
    source = " UNION ALL ".join(branches)
    score = " + ".join(f"(w.i{i} * t{i} * %(k)s / (t{i} + (%(base)s + w.norm * length)))" for i in range(nt))
    where = " WHERE s <= %(after)s" if after else ""
    ts_ = ", ".join(f"t{i}" for i in range(nt))
    ds = ", ".join(f"w.d{i}" for i in range(nt))
    # (MATERIALIZED and OFFSET 0: each count and each row's spaced words and term counts are
    # computed once, not once per reference the planner would inline)
    return (f"WITH c AS MATERIALIZED (SELECT {stats}),"
            f" w AS MATERIALIZED (SELECT *, {idfs}, {norm} FROM c, ({totals}) t),"
            f" m AS (SELECT {cols}, {ts_}, {score} AS s FROM"
            f" (SELECT {cols}, {', '.join(tfs)} FROM"
            f" (SELECT {cols}, {sp} AS sp FROM ({source}) u OFFSET 0) x OFFSET 0) v, w)"
            f" SELECT EXISTS (SELECT 1 FROM search_pending), w.docs, w.words, {ds}, r.*"
            f" FROM w LEFT JOIN LATERAL (SELECT * FROM m{where} ORDER BY s DESC LIMIT %(read)s) r ON true")


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, Decimal)) else int(str(value))
