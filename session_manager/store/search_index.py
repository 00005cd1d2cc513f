"""The store side of ``session::search``: the entries matching every word of
a query inside a set of sessions, with what ranking needs.

A store answers :meth:`~session_manager.store.SessionStore.search` with
:class:`Matches`; the service ranks, orders, pages and cuts snippets. Two
ways to answer are here: :func:`scan`, reading every entry of the sessions
in scope (the default, right for any store and the oracle tests compare
with), and :class:`TermIndex`, an in-memory inverted index the memory and
fs stores keep up to date with their commits.
"""

from __future__ import annotations

import bisect
import heapq
import math
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from .path import Entry
from .search_text import Query, entry_role, searchable_text, words

__all__ = ["Bm25", "Candidate", "Matches", "Ranked", "SortKey", "Stats", "TermIndex", "rank", "scan", "scorer",
           "sort_key"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One entry matching every term: ``tfs[i]`` is how often term ``i`` occurs
    in it (the prefix term: words starting with it), ``length`` its word count."""

    session_id: str
    entry_id: str
    role: str
    timestamp: int
    tfs: tuple[int, ...]
    length: int


@dataclass(slots=True)
class Matches:
    """What ranking needs: the candidates, and over every searchable entry of
    the sessions in scope their count, total word count and, per term, how
    many contain it (so scores never depend on another tenant's entries)."""

    candidates: list[Candidate] = field(default_factory=list)
    docs: int = 0
    total_length: int = 0
    df: list[int] = field(default_factory=list)


K1 = 1.2
B = 0.75
# (-score, -timestamp, session_id, entry_id): the one total order hits are paged in.
SortKey = tuple[float, int, str, str]


@dataclass(frozen=True, slots=True)
class Bm25:
    """The BM25 parameters of one query over the sessions in scope: per term its idf,
    and ``base + norm * length``, the length part of an entry's denominator."""

    idfs: tuple[float, ...]
    base: float
    norm: float

    @classmethod
    def of(cls, docs: int, total_length: int, df: Iterable[int]) -> Bm25:
        n = max(docs, 1)
        avgdl = total_length / n if total_length else 1.0
        return cls(tuple(math.log(1.0 + (n - d + 0.5) / (d + 0.5)) for d in df), K1 * (1 - B), K1 / avgdl * B)

    def score(self, tfs: tuple[int, ...], length: int) -> float:
        """The score of an entry with these term counts and word count, rounded so the
        value a cursor carries compares equal on the next page."""
        length_part = self.base + self.norm * length
        terms = zip(self.idfs, tfs, strict=True)
        return round(sum(idf * tf * (K1 + 1) / (tf + length_part) for idf, tf in terms), 6)


@dataclass(frozen=True, slots=True)
class Stats:
    """The statistics a page was ranked with: the searchable entries in scope, their words,
    and per query term how many contain it. A cursor carries them, and the pages after it are
    ranked with them (not the scope's statistics of the moment), so an append or delete
    between two pages moves no score: a hit that exists throughout keeps its place."""

    docs: int
    total_length: int
    df: tuple[int, ...]

    def bm25(self) -> Bm25:
        return Bm25.of(self.docs, self.total_length, self.df)


class Ranked(list[tuple[SortKey, Candidate]]):
    """A ranked page (its hits with their keys, in order) and the :class:`Stats` it was
    ranked with (``None``: nothing matched, so no statistics were read)."""

    stats: Stats | None = None

    @classmethod
    def of(cls, hits: Iterable[tuple[SortKey, Candidate]], stats: Stats | None) -> Ranked:
        out = cls(hits)
        out.stats = stats
        return out


def stats_of(matches: Matches) -> Stats:
    return Stats(matches.docs, matches.total_length, tuple(matches.df))


def scorer(matches: Matches, stats: Stats | None = None) -> Callable[[Candidate], float]:
    """BM25 (k1 = 1.2, b = 0.75) over the statistics of the sessions in scope (``stats``: those
    given instead, a cursor's), the idf of each term computed once, rounded to 6 decimals."""
    bm25 = (stats or stats_of(matches)).bm25()
    return lambda c: bm25.score(c.tfs, c.length)


def sort_key(score: float, c: Candidate) -> SortKey:
    """A hit's place in the total order: higher score, then newer timestamp, session id, entry id."""
    return (-score, -c.timestamp, c.session_id, c.entry_id)


def rank(matches: Matches, limit: int, after: SortKey | None, stats: Stats | None = None) -> Ranked:
    """The first ``limit`` candidates in the total order strictly after ``after``, in order
    (no sort of every candidate), scored with ``stats`` (a cursor's) or else the matches'."""
    stats = stats or stats_of(matches)
    score = scorer(matches, stats)
    keyed = ((sort_key(score(c), c), c) for c in matches.candidates)
    if after is not None:
        keyed = ((k, c) for k, c in keyed if k > after)
    return Ranked.of(heapq.nsmallest(limit, keyed, key=lambda kc: kc[0]), stats)


def term_counts(query: Query, counts: Counter[str] | dict[str, int],
                prefixed: list[str] | None = None) -> tuple[int, ...]:
    """Occurrences of each query term among ``counts`` (folded word -> count);
    ``prefixed``: every indexed word starting with the prefix, when known (fewer
    lookups than a walk of the entry's words when it is the shorter)."""
    out = [counts.get(t, 0) for t in query.exact]
    if prefixed is not None and len(prefixed) < len(counts):
        out.append(sum(counts.get(w, 0) for w in prefixed))
    else:
        out.append(sum(n for w, n in counts.items() if w.startswith(query.prefix)))
    return tuple(out)


def scan(query: Query, sessions: Iterable[str], entries: Callable[[str], list[Entry]],
         roles: Collection[str] | None) -> Matches:
    """:class:`Matches` by reading every entry of ``sessions``."""
    out = Matches(df=[0] * len(query.terms))
    for sid in sessions:
        for entry in entries(sid):
            text = searchable_text(entry)
            if text is None:
                continue
            found = words(text)
            out.docs += 1
            out.total_length += len(found)
            tfs = term_counts(query, Counter(found))
            for i, n in enumerate(tfs):
                out.df[i] += n > 0
            role = entry_role(entry)
            if all(tfs) and (roles is None or role in roles):
                out.candidates.append(Candidate(sid, entry["id"], role, int(entry.get("timestamp", 0)),
                                                tfs, len(found)))
    return out


@dataclass(slots=True)
class _Doc:
    role: str
    timestamp: int
    length: int
    counts: dict[str, int]


class TermIndex:
    """An inverted index of searchable entries, kept in memory.

    ``put`` indexes an entry (replacing its previous revision, so an edited
    entry is found by its new text only), ``drop`` forgets a session.
    Thread-safe: one lock around every method.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._docs: dict[str, dict[str, _Doc]] = {}  # session -> entry -> doc
        self._postings: dict[str, dict[str, set[str]]] = {}  # word -> session -> entries
        self._vocab: list[str] | None = []  # sorted words; None: to re-sort
        self._totals: dict[str, list[int]] = {}  # session -> [entries, words]: no per-query sum over entries

    def put(self, session_id: str, entry: Entry) -> None:
        """Index ``entry`` (a new one or a new revision of one)."""
        text = searchable_text(entry)
        if text is None:
            with self._lock:
                self._remove(session_id, entry["id"])
            return
        self.put_doc(session_id, entry["id"], entry_role(entry), int(entry.get("timestamp", 0)),
                     dict(Counter(words(text))))

    def put_doc(self, session_id: str, entry_id: str, role: str, timestamp: int, counts: dict[str, int]) -> None:
        """Index an entry already analyzed: its role, timestamp and word counts."""
        with self._lock:
            self._remove(session_id, entry_id)
            doc = _Doc(role, timestamp, sum(counts.values()), counts)
            self._docs.setdefault(session_id, {})[entry_id] = doc
            totals = self._totals.setdefault(session_id, [0, 0])
            totals[0] += 1
            totals[1] += doc.length
            for w in counts:
                by_session = self._postings.get(w)
                if by_session is None:
                    by_session = self._postings[w] = {}
                    self._vocab = None
                by_session.setdefault(session_id, set()).add(entry_id)

    def docs_of(self, session_id: str) -> list[tuple[str, str, int, dict[str, int]]]:
        """The indexed entries of a session as ``(entry_id, role, timestamp, counts)``."""
        with self._lock:
            return [(eid, d.role, d.timestamp, d.counts) for eid, d in self._docs.get(session_id, {}).items()]

    def sessions(self) -> list[str]:
        with self._lock:
            return list(self._docs)

    def drop(self, session_id: str) -> None:
        with self._lock:
            for entry_id in list(self._docs.get(session_id, ())):
                self._remove(session_id, entry_id)
            self._docs.pop(session_id, None)
            self._totals.pop(session_id, None)

    def clear(self) -> None:
        with self._lock:
            self._docs.clear()
            self._postings.clear()
            self._totals.clear()
            self._vocab = []

    def _remove(self, session_id: str, entry_id: str) -> None:
        doc = self._docs.get(session_id, {}).pop(entry_id, None)
        if doc is None:
            return
        totals = self._totals[session_id]
        totals[0] -= 1
        totals[1] -= doc.length
        for w in doc.counts:
            by_session = self._postings[w]
            ids = by_session[session_id]
            ids.discard(entry_id)
            if not ids:
                del by_session[session_id]
                if not by_session:
                    del self._postings[w]
                    self._vocab = None

    def _words_with_prefix(self, prefix: str) -> list[str]:
        if self._vocab is None:
            self._vocab = sorted(self._postings)
        vocab = self._vocab
        i = bisect.bisect_left(vocab, prefix)
        out: list[str] = []
        while i < len(vocab) and vocab[i].startswith(prefix):
            out.append(vocab[i])
            i += 1
        return out

    def _term_hits(self, query: Query, scope: set[str], prefixed: list[str]) -> list[dict[str, set[str]]]:
        """Per term, session -> entries containing it, inside ``scope``."""
        hits: list[dict[str, set[str]]] = []
        for t in query.exact:
            by_session = self._postings.get(t, {})
            hits.append({s: ids for s, ids in by_session.items() if s in scope})
        merged: dict[str, set[str]] = {}
        for w in prefixed:
            for s, ids in self._postings[w].items():
                if s in scope:
                    merged.setdefault(s, set()).update(ids)
        hits.append(merged)
        return hits

    def search(self, query: Query, sessions: Collection[str] | None,
               roles: Collection[str] | None) -> Matches:
        """:class:`Matches` inside ``sessions`` (``None``: every indexed session)."""
        with self._lock:
            scope = set(self._docs) if sessions is None else {s for s in sessions if s in self._docs}
            out = Matches()
            for s in scope:
                n, length = self._totals.get(s, (0, 0))
                out.docs += n
                out.total_length += length
            prefixed = self._words_with_prefix(query.prefix)
            hits = self._term_hits(query, scope, prefixed)
            out.df = [sum(len(ids) for ids in h.values()) for h in hits]
            smallest = min(hits, key=lambda h: sum(len(ids) for ids in h.values()))
            for s, ids in smallest.items():
                for eid in ids:
                    if not all(eid in h.get(s, ()) for h in hits):
                        continue
                    doc = self._docs[s][eid]
                    if roles is not None and doc.role not in roles:
                        continue
                    out.candidates.append(Candidate(s, eid, doc.role, doc.timestamp,
                                                    term_counts(query, doc.counts, prefixed), doc.length))
            return out
