"""``session::search`` on the fs store beside an FTS5 table over the same texts.

100k messages in 1k sessions (``--quick``: 10k in 100), words drawn from a
Zipf-like vocabulary; 100 queries of 1-3 words drawn from the corpus (half
from common words, half from rare ones). Printed side by side:

- p50 of a whole ``session::search`` call (limit 20) vs the p50 of
  ``SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT 20`` from
  Python (target: <= 3x), each query run by both back to back, in
  ``--rounds`` passes (the median round's figures printed, every round's ratio);
- the first query after a cold open (target: <= 200 ms);
- index bytes (``.search/``) vs the FTS5 database file, content included
  (target: <= 1.5x);
- append throughput with the index vs without: the fs index is brought up to
  date before each query, so "with" charges the appends with the catch-up the
  next query does (target: >= 0.7x).

``--store sqlite`` or ``--store postgres`` (a server at
``SESSION_MANAGER_TEST_POSTGRES``, a schema of its own dropped afterwards)
measures another adapter against the same baseline (sqlite's index bytes:
its ``search*`` tables; postgres's: ``search_docs``, ``search_totals`` and
``search_total`` with their indexes, the empty queue printed apart).

Run: ``python bench/bench_search.py [--quick] [--rounds N] [--store fs|sqlite|postgres]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import session_manager
from session_manager.store.fs._search import SEARCH_DIR


def vocabulary(n: int, rnd: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyzéü"
    return ["".join(rnd.choice(letters) for _ in range(rnd.randint(3, 9))) for _ in range(n)]


def corpus(sessions: int, per: int, rnd: random.Random) -> list[list[str]]:
    vocab = vocabulary(20_000, rnd)
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    out = []
    for _ in range(sessions):
        words = rnd.choices(vocab, weights, k=per * 12)
        out.append([" ".join(words[i * 12 : i * 12 + rnd.randint(4, 12)]) for i in range(per)])
    return out


def append_all(sm: session_manager.SessionManager, texts: list[list[str]]) -> float:
    t = time.perf_counter()
    for session in texts:
        sid = sm.call("session::create", {"metadata": {"owner": "bench"}})["session_id"]
        for text in session:
            sm.call("session::append", {"session_id": sid, "message": {
                "role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}})
    return time.perf_counter() - t


def queries(texts: list[list[str]], rnd: random.Random) -> list[str]:
    counts: dict[str, int] = {}
    for session in texts:
        for text in session:
            for w in text.split():
                counts[w] = counts.get(w, 0) + 1
    ranked = sorted(counts, key=lambda w: -counts[w])
    common, rare = ranked[:200], ranked[len(ranked) // 2 :]
    out = []
    for i in range(100):
        pool = common if i % 2 == 0 else rare
        out.append(" ".join(rnd.sample(pool, rnd.randint(1, 3))))
    return out


def fts_baseline(path: str, texts: list[list[str]]) -> sqlite3.Connection:
    db = sqlite3.connect(path)
    db.execute("CREATE VIRTUAL TABLE fts USING fts5(body, tokenize='unicode61 remove_diacritics 2')")
    with db:
        db.executemany("INSERT INTO fts(body) VALUES (?)", ((t,) for s in texts for t in s))
    db.execute("INSERT INTO fts(fts) VALUES ('optimize')")
    db.commit()
    db.execute("VACUUM")
    return db


def interleaved(sm: session_manager.SessionManager, db: sqlite3.Connection, qs: list[str]) -> tuple[float, float]:
    """The p50 of ours and of the baseline, each query run by both back to back (so load
    from other jobs falls on both alike)."""
    ours, base = [], []
    for q in qs:
        words = q.split()
        match = " ".join(f'"{w}"' for w in words[:-1]) + f' "{words[-1]}"*'
        t = time.perf_counter()
        db.execute("SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT 20", (match,)).fetchall()
        base.append(time.perf_counter() - t)
        t = time.perf_counter()
        sm.call("session::search", {"query": q, "limit": 20})
        ours.append(time.perf_counter() - t)
    return statistics.median(ours), statistics.median(base)


DSN = os.environ.get("SESSION_MANAGER_TEST_POSTGRES", "postgresql://127.0.0.1:5432/test")


class Target:
    """Where the store under test keeps its data: open it, and what its search index weighs."""

    def __init__(self, kind: str, tmp: str) -> None:
        self.kind, self.tmp = kind, tmp
        self.schema = f"bench_search_{uuid.uuid4().hex[:8]}"
        self.queue_bytes: int | None = None

    def open(self) -> session_manager.SessionManager:
        if self.kind == "fs":
            return session_manager.open(Path(self.tmp) / "data")
        if self.kind == "sqlite":
            return session_manager.open(f"sqlite:///{self.tmp}/sessions.db")
        from session_manager.store.postgres import PostgresSettings, PostgresStore

        return session_manager.open(store=PostgresStore(PostgresSettings(dsn=DSN, schema=self.schema)))

    def index_bytes(self) -> int | None:
        if self.kind == "fs":
            return sum(f.stat().st_size for f in (Path(self.tmp) / "data" / SEARCH_DIR).iterdir())
        if self.kind == "sqlite":
            with contextlib.closing(sqlite3.connect(f"{self.tmp}/sessions.db")) as db:
                try:
                    return int(db.execute("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'search%'").fetchone()[0])
                except sqlite3.Error:
                    return None  # (a build without the dbstat table)
        import psycopg

        with psycopg.connect(DSN) as conn:
            # (the index's tables with their indexes and TOAST; the queue, empty once caught
            # up, is printed apart: its primary key keeps the pages of the entries it held)
            row = conn.execute("SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c"
                               " WHERE c.relnamespace = %s::regnamespace AND c.relkind = 'r'"
                               " AND c.relname IN ('search_docs', 'search_totals', 'search_total')",
                               (self.schema,)).fetchone()
            queue = conn.execute("SELECT pg_total_relation_size(%s)", (f"{self.schema}.search_pending",)).fetchone()
            self.queue_bytes = int(queue[0]) if queue and queue[0] is not None else None
            return int(row[0]) if row and row[0] is not None else None

    def drop(self) -> None:
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(DSN, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="10k messages in 100 sessions")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved passes over the 100 queries")
    ap.add_argument("--store", choices=["fs", "sqlite", "postgres"], default="fs",
                    help=f"the adapter (postgres: at SESSION_MANAGER_TEST_POSTGRES, default {DSN})")
    args = ap.parse_args()
    sessions, per = (100, 100) if args.quick else (1000, 100)
    rnd = random.Random(26)
    texts = corpus(sessions, per, rnd)
    qs = queries(texts, rnd)
    with tempfile.TemporaryDirectory() as tmp:
        fts_path = os.path.join(tmp, "fts.db")
        db = fts_baseline(fts_path, texts)
        fts_bytes = os.path.getsize(fts_path)
        target = Target(args.store, tmp)
        sm = target.open()
        append_s = append_all(sm, texts)
        t = time.perf_counter()
        timeouts = 0
        while True:  # the catch-up the appends leave to a query
            try:
                sm.call("session::search", {"query": qs[0]})
                break
            except session_manager.SessionError as e:
                # (postgres: a catch-up of 100k entries outlasts one call's deadline; its batches
                # are committed, so the next call goes on where it stopped)
                if "no answer within" not in e.detail or timeouts == 10:
                    raise
                timeouts += 1
        catch_up_s = time.perf_counter() - t
        rounds = [interleaved(sm, db, qs) for _ in range(args.rounds)]
        p50, base_p50 = sorted(rounds, key=lambda r: r[0] / r[1])[len(rounds) // 2]  # the median round
        db.close()
        sm.close()
        index_bytes = target.index_bytes()
        sm = target.open()
        t = time.perf_counter()
        sm.call("session::search", {"query": qs[1], "limit": 20})
        cold = time.perf_counter() - t
        sm.close()
        target.drop()
    n = sessions * per
    print(f"session::search, {args.store} store, {n:,} messages in {sessions:,} sessions, 100 queries, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'figure':44} {'ours':>12} {'baseline':>12} {'ratio':>7}  target")
    print(f"{'p50 of one call, limit 20':44} {p50 * 1e3:10.2f}ms {base_p50 * 1e3:10.2f}ms "
          f"{p50 / base_p50:6.2f}x  <= 3x (FTS5 MATCH ... LIMIT 20)")
    print(f"{'  each round (interleaved)':44} " + ", ".join(f"{o / b:.2f}x" for o, b in rounds))
    print(f"{'first query after a cold open':44} {cold * 1e3:10.1f}ms {'':>12} {'':>7}  <= 200 ms")
    if index_bytes is None:
        print(f"{'index bytes':44} {'n/a':>12} {fts_bytes / 1e6:10.2f}MB")
    else:
        print(f"{'index bytes':44} {index_bytes / 1e6:10.2f}MB {fts_bytes / 1e6:10.2f}MB "
              f"{index_bytes / fts_bytes:6.2f}x  <= 1.5x (FTS5 database, content included)")
    if target.queue_bytes is not None:
        print(f"{'  (the queue, empty: not counted)':44} {target.queue_bytes / 1e6:10.2f}MB")
    if timeouts:
        print(f"(the catch-up after the appends took {timeouts + 1} calls: {timeouts} ran past the call deadline)")
    without = n / append_s
    with_index = n / (append_s + catch_up_s)
    print(f"{'appends/s with the index (catch-up charged)':44} {with_index:12,.0f} {without:12,.0f} "
          f"{with_index / without:6.2f}x  >= 0.7x (without)")


if __name__ == "__main__":
    main()
