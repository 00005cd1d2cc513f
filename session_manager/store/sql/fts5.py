"""The FTS5 forms the sqlite adapter's index and the fs adapter's search index
share: an entry's document (its folded words, made in Python, so every index
splits text alike), a word quoted as an FTS5 string, a prefix expanded to
the indexed words it begins, and a page of hits ranked inside SQLite."""

from __future__ import annotations

import functools
import math
import sqlite3
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..search_index import K1, B, Candidate, Ranked, SortKey, Stats, sort_key
from ..search_text import Query, entry_role, searchable_text, words

__all__ = ["PREFIX_WORDS", "doc", "quoted", "ranked_page", "vocabulary"]

_INT64 = 2**63  # timestamps past SQLite's integer range are stored as text


def doc(entry: dict[str, Any]) -> tuple[str, Any, int, str] | None:
    """``(role, timestamp, length, words)`` of a searchable entry, ``None`` otherwise."""
    text = searchable_text(entry)
    if text is None:
        return None
    found = words(text)
    ts = int(entry.get("timestamp", 0))
    stored_ts: Any = ts if -_INT64 <= ts < _INT64 else str(ts)
    return entry_role(entry), stored_ts, len(found), " ".join(sorted(found))



def quoted(word: str) -> str:
    return '"' + word.replace('"', '""') + '"'


# -- ranking inside the index ---------------------------------------------------

PREFIX_WORDS = 32  # a prefix of at most this many indexed words is matched as their OR
_MARGIN = 1e-6  # above the rounding (5e-7) and any difference of SQL's arithmetic from Python's (far below)
_TOP = chr(0x10FFFF)  # above every character of a word (a noncharacter, never \\w)


def vocabulary(conn: sqlite3.Connection, table: str, fts: str) -> None:
    """Make ``temp.<table>``, the ``fts5vocab`` of the FTS5 table ``fts`` (a connection's own),
    which :func:`ranked_page` reads to expand a prefix."""
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table} USING fts5vocab(main, {fts}, row)")


def ranked_page(conn: sqlite3.Connection, *, vocab: str, fts: str | None = None, cols: str, length: str,
                spaced: str, source: str, resolve: str = "",
                count: str, totals: str, params: dict[str, Any], query: Query, limit: int,
                after: SortKey | None, candidate: Callable[[tuple[Any, ...], tuple[int, ...]], Candidate],
                stats: Stats | None = None) -> Ranked:
    """The first ``limit`` hits after ``after`` in the total order, ranked by SQLite in
    one statement, so a query costs one round of FTS5 work and only the best rows
    come back to Python.

    ``source`` (``FROM ... WHERE ...`` of the documents in scope matching ``{match}``,
    allowed roles only) has the columns ``cols``, the word count ``length`` and
    ``spaced``, the words with every word between its own two spaces (sorted); ``count``
    is the ``SELECT count(*)`` of the documents in scope matching ``{match}``; both take
    the named ``params`` (none starting with ``_``). ``vocab`` is the table of
    :func:`vocabulary` (made on the connection's first query when ``fts`` names the
    FTS5 table); ``totals`` is a ``SELECT`` of the scope's searchable entries (``docs``)
    and their words (``words``), read only when something matches.
    ``candidate`` makes a hit of a row's ``cols`` and ``length``, and its term counts.
    ``resolve`` (optional) adds columns before ``cols``, computed only for the rows read
    (not every match): expressions over ``r.<name>`` of the named ``cols`` (ids a
    document's row does not keep, looked up where they are stored).

    In the statement: the prefix is expanded to the OR of its indexed words (at most
    :data:`PREFIX_WORDS`: FTS5 merges a ``"word"*`` term's lists in a much slower way),
    each term's document count in scope is taken (once, if anything matches), each
    match's term counts are read from its words, and matches are ordered by the BM25
    score of :class:`~..search_index.Bm25` computed in SQL (unrounded). Here the exact
    score and key of each row read are computed and sorted. Enough rows are read when
    the last one scores below the ``limit``-th kept hit's rounded score by more than
    rounding can move it: no row unread can come before that hit. Otherwise more are
    read (ties at the boundary, hits the cursor skips).

    ``stats`` (a cursor's): the statistics to score with, given as parameters; ``count`` and
    ``totals`` are then not read (the scope's statistics of the moment play no part), so the
    pages of one cursor are one ranking whatever was appended or deleted between them.
    """
    # Each whole word once in the statement, its summand weighted by how often the query
    # repeats it (a query's fold may repeat a word hundreds of times: "ﷺ" is four words, and 256
    # of them, a term per word, outgrew SQLite's expression depth and column limits); the
    # statement's columns are the distinct terms', ``slot`` maps each query term to its column.
    exact = list(dict.fromkeys(query.exact))
    column = {w: i for i, w in enumerate(exact)}
    slot = [column[w] for w in query.exact] + [len(exact)]
    nt = len(exact) + 1
    sql = _page_sql(len(exact), after is not None, vocab, cols, length, spaced, source, count, totals, resolve,
                    stats is not None)
    p: dict[str, Any] = dict(params)
    p.update(_p=query.prefix, _phi=query.prefix + _TOP, _pq=quoted(query.prefix), _cap=PREFIX_WORDS,
             _k1=K1, _b=B, _k=K1 + 1, _base=K1 * (1 - B),
             _wp=" " + query.prefix, _lp=len(query.prefix) + 1, **{f"_m{len(exact)}": 1})
    repeats = Counter(query.exact)
    for i, w in enumerate(exact):
        p[f"_e{i}"], p[f"_w{i}"], p[f"_l{i}"], p[f"_m{i}"] = quoted(w), " " + w + " ", len(w) + 2, repeats[w]
    if after is not None:
        p["_after"] = -after[0] + _MARGIN
    if stats is not None:  # (each distinct word's count: its first query term's)
        first = {w: i for i, w in reversed(list(enumerate(query.exact)))}
        p.update(_docs=stats.docs, _words=stats.total_length, **{f"_d{len(exact)}": stats.df[-1]},
                 **{f"_d{i}": stats.df[first[w]] for i, w in enumerate(exact)})
    read = limit + 16
    while True:
        p["_read"] = read
        try:
            got = conn.execute(sql, p).fetchall()
        except sqlite3.OperationalError as e:
            if "no such function: ln" in str(e):
                conn.create_function("ln", 1, math.log, deterministic=True)  # (a build without math functions)
            elif f"no such table: temp.{vocab}" in str(e) and fts is not None:
                vocabulary(conn, vocab, fts)  # (a connection's first query)
            else:
                raise
            continue
        if not got:
            return Ranked.of([], stats)
        if stats is None:
            docs, words = got[0][-3:-1]
            df = got[0][-3 - nt : -3]
            stats = Stats(int(docs), int(words), tuple(int(df[j]) for j in slot))
        bm25 = stats.bm25()
        kept: list[tuple[SortKey, Candidate]] = []
        for row in got:
            tfs = row[-3 - 2 * nt : -3 - nt]
            tf = tuple(tfs[j] for j in slot)
            if not all(tf):  # (the tokenizer agrees with words(); checked, never trusted)
                continue
            c = candidate(row[: -3 - 2 * nt], tf)
            k = sort_key(bm25.score(tf, c.length), c)
            if after is None or k > after:
                kept.append((k, c))
        kept.sort(key=lambda kc: kc[0])
        if len(got) < read or (len(kept) >= limit and got[-1][-1] < -kept[limit - 1][0][0] - _MARGIN):
            return Ranked.of(kept[:limit], stats)
        read *= 8


@functools.lru_cache(maxsize=64)
def _page_sql(exact: int, after: bool, vocab: str, cols: str, length: str, spaced: str, source: str,
              count: str, totals: str, resolve: str = "", frozen: bool = False) -> str:
    """The statement of :func:`ranked_page` for a query of ``exact`` distinct whole words and
    a prefix (made once per shape; its parameters are named; ``:_m<i>``: how often the query
    holds term ``i``; ``frozen``: the statistics are the parameters ``:_d<i>``, ``:_docs`` and
    ``:_words``, a cursor's, and nothing is counted)."""
    nt = exact + 1
    terms = [f":_e{i}" for i in range(exact)] + ["(SELECT m FROM x)"]
    expanded = ("SELECT CASE WHEN count(*) > :_cap THEN :_pq || '*' WHEN count(*) = 0 THEN :_pq"
                " ELSE '(' || group_concat('\"' || replace(term, '\"', '\"\"') || '\"', ' OR ') || ')' END AS m"
                f" FROM (SELECT term FROM temp.{vocab} WHERE term >= :_p AND term < :_phi LIMIT :_cap + 1)")
    every = "(SELECT " + " || ' AND ' || ".join([*terms[:-1], "m"]) + " FROM x)"
    if frozen:
        counts = ", ".join(f":_d{i} AS d{i}" for i in range(nt))
        totals = "SELECT :_docs AS docs, :_words AS words"
    else:
        counts = ", ".join(f"({count.format(match=t)}) AS d{i}" for i, t in enumerate(terms))
    idfs = ", ".join(f"ln(1.0 + (max(docs, 1) - d{i} + 0.5) / (d{i} + 0.5)) AS i{i}" for i in range(nt))
    norm = ":_k1 / (CASE WHEN words <> 0 THEN words * 1.0 / max(docs, 1) ELSE 1.0 END) * :_b AS norm"
    tfs = [f"(length({spaced}) - length(replace({spaced}, :_w{i}, ''))) / :_l{i} AS t{i}" for i in range(exact)]
    tfs.append(f"(length({spaced}) - length(replace({spaced}, :_wp, ''))) / :_lp AS t{exact}")  # words it begins
    score = " + ".join(f"(:_m{i} * (SELECT i{i} FROM w) * t{i} * :_k / (t{i} + (:_base + (SELECT norm FROM w) * n)))"
                       for i in range(nt))
    stats = ", ".join([*(f"(SELECT d{i} FROM w)" for i in range(nt)), "(SELECT docs FROM w)", "(SELECT words FROM w)"])
    where = " WHERE s <= :_after" if after else ""
    # (LIMIT -1 keeps the inner select from being flattened into the outer one, which would
    # compute each term count twice: for its column and in the score)
    ranked = (f" SELECT *, {stats}, {score} AS s FROM"
              f" (SELECT {cols}, {length} AS n, {', '.join(tfs)} {source.format(match=every)} LIMIT -1)"
              f"{where} ORDER BY s DESC LIMIT :_read")
    if resolve:  # (for the rows read only: outside the LIMIT)
        ranked = f" SELECT {resolve}, r.* FROM ({ranked}) r ORDER BY r.s DESC"
    return (f"WITH x AS MATERIALIZED ({expanded}),"
            f" w AS MATERIALIZED (SELECT *, {idfs}, {norm} FROM (SELECT {counts}), ({totals}))" + ranked)
