"""The postgres adapter beside the fs adapter, in one run (not a test).

Run: ``python bench/bench_postgres.py [--quick] [--explain] [--floor]`` with a server at
``SESSION_MANAGER_TEST_POSTGRES`` (default ``postgresql://127.0.0.1:5432/test``).
Prints one table: append and update-message latency, cold and warm
``messages-tail`` on a long session, ``list`` first pages over many sessions
(plain, status filter, metadata filter), then appends from 4 instances
(processes) on 4 sessions vs 1 instance, and 4 instances on one session.
``--explain`` also prints the plans of the queries behind those calls.
``--floor`` prints only issue 24's table (``bench/pg_floor.py``): ours beside
raw psycopg and langchain-postgres (the ``bench`` extra), and contenders that run
no service code (our SQL alone, the contract's minimum), with round trips counted
at the wire and the CPU per append; the full run prints it last.
Everything lives in a private schema (dropped afterwards) and a temp dir.
The server shares the machine with the benchmark, so compare runs on one box.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

import session_manager  # noqa: E402
from session_manager.store import Commit, FsStore  # noqa: E402
from session_manager.store._core.codec import encode_line as _line  # noqa: E402
from session_manager.store.postgres import PostgresSettings, PostgresStore  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pg_floor  # noqa: E402

DSN = os.environ.get("SESSION_MANAGER_TEST_POSTGRES", "postgresql://127.0.0.1:5432/test")
Row = tuple[str, str, str, str]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def median(samples: list[float]) -> str:
    return ms(statistics.median(samples))


def open_pg(schema: str) -> session_manager.SessionManager:
    return session_manager.open(store=PostgresStore(PostgresSettings(dsn=DSN, schema=schema)))


def entry(eid: str, parent: str | None, n: int) -> dict[str, Any]:
    return {"kind": "message", "id": eid, "parent_id": parent, "timestamp": n, "revision": 0,
            "message": user(f"message {n} " + "lorem ipsum " * 8)}


def meta(sid: str, n: int, count: int = 0, **extra: Any) -> dict[str, Any]:
    return {"session_id": sid, "title": f"t{n}", "description": "", "status": extra.pop("status", "idle"),
            **extra, "created_at": n, "updated_at": n, "message_count": count}


# -- calls ------------------------------------------------------------------------------


def one_session(sm: session_manager.SessionManager, n: int) -> dict[str, list[float]]:
    sid = sm.call("session::create", {})["session_id"]
    appends = [timed(lambda: sm.call("session::append", {"session_id": sid, "message": user("hi")}))
               for _ in range(n)]
    eid = sm.call("session::append", {"session_id": sid, "message": user("streamed")})["entry_id"]
    update = {"session_id": sid, "entry_id": eid, "content": [{"type": "text", "text": "delta " * 20}]}
    updates = [timed(lambda: sm.call("session::update-message", update)) for _ in range(n)]
    return {"append": appends, "update": updates}


def bench_calls(fs_sm: session_manager.SessionManager, pg_sm: session_manager.SessionManager,
                n: int) -> list[Row]:
    rows: list[Row] = []
    samples: dict[str, dict[str, list[float]]] = {}
    for name, sm in (("fs", fs_sm), ("postgres", pg_sm)):
        samples[name] = one_session(sm, n)
    for what, label in (("append", "append (one session)"), ("update", "update-message (one entry)")):
        rows.append((label, median(samples["fs"][what]), median(samples["postgres"][what]), f"median of {n}"))
    return rows


# -- a long session -------------------------------------------------------------------------


def long_session(store: Any, sid: str, length: int) -> None:
    store.commit(sid, Commit(meta=meta(sid, 1)))
    parent = None
    batch: list[dict[str, Any]] = []
    for i in range(length):
        e = entry(f"e{i:07d}", parent, i)
        parent = e["id"]
        batch.append(e)
        if len(batch) == 5000 or i == length - 1:
            store.commit(sid, Commit(entries=tuple(batch), leaf=parent, meta=meta(sid, 1, i + 1)))
            batch = []


def bench_tail(tmp: Path, schema: str, length: int) -> list[Row]:
    fs_store = FsStore(tmp / "long")
    long_session(fs_store, "long", length)
    fs_store.close()
    pg_store = PostgresStore(PostgresSettings(dsn=DSN, schema=schema))
    long_session(pg_store, "long", length)
    pg_store.close()
    req = {"session_id": "long", "limit": 50}
    out: dict[str, list[float]] = {}
    for name, make in (("fs", lambda: session_manager.open(tmp / "long")), ("postgres", lambda: open_pg(schema))):
        cold: list[float] = []
        for _ in range(3):
            sm = make()
            cold.append(timed(lambda: sm.call("session::messages-tail", req)))  # noqa: B023
            warm = [timed(lambda: sm.call("session::messages-tail", req)) for _ in range(20)]  # noqa: B023
            sm.close()
        out[name] = cold
        out[name + "-warm"] = warm
        sm = make()
        page = sm.call("session::messages-tail", req)
        assert len(page["messages"]) == 50 and page["messages"][-1]["entry_id"] == f"e{length - 1:07d}"
        out[name + "-get"] = [timed(lambda: sm.call("session::get-message", {  # noqa: B023
            "session_id": "long", "entry_id": f"e{length // 2:07d}"})) for _ in range(20)]
        sm.close()
    return [
        (f"messages-tail 50, cold, {length:,} entries", median(out["fs"]), median(out["postgres"]),
         "first call after open (fs replays the file)"),
        (f"messages-tail 50, warm, {length:,} entries", median(out["fs-warm"]), median(out["postgres-warm"]),
         "median of 20"),
        (f"get-message, {length:,} entries", median(out["fs-get"]), median(out["postgres-get"]), "median of 20"),
    ]


# -- many sessions ------------------------------------------------------------------------------


def many_sessions_fs(where: Path, count: int) -> None:
    where.mkdir(parents=True)
    for i in range(count):
        sid = f"s{i:07d}"
        m = meta(sid, 1_000_000 + i, status="done" if i % 10 == 0 else "idle", metadata={"owner": f"u{i % 100}"})
        (where / f"{sid}.jsonl").write_bytes(_line({"type": "meta", "meta": m}) + b"\n")


def many_sessions_pg(schema: str, count: int) -> None:
    PostgresStore(PostgresSettings(dsn=DSN, schema=schema)).close()  # migrate
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        with conn.cursor().copy(
            "COPY sessions (session_id, meta, status, created_at, updated_at, metadata) FROM STDIN"
        ) as copy:
            for i in range(count):
                sid = f"s{i:07d}"
                status = "done" if i % 10 == 0 else "idle"
                m = meta(sid, 1_000_000 + i, status=status, metadata={"owner": f"u{i % 100}"})
                copy.write_row((sid, _line(m).decode(), status, m["created_at"], m["updated_at"],
                                json.dumps(m["metadata"])))
        conn.execute("ANALYZE sessions")


LIST_CASES = (
    ("list, first page", {"limit": 50}),
    ("list, status filter", {"limit": 50, "status": "done"}),
    ("list, metadata filter (1%)", {"limit": 50, "metadata": {"owner": "u7"}}),
)


def bench_list(tmp: Path, schema: str, count: int) -> list[Row]:
    many_sessions_fs(tmp / "many", count)
    many_sessions_pg(schema, count)
    rows: list[Row] = []
    for label, req in LIST_CASES:
        figures: dict[str, tuple[float, list[float]]] = {}
        for name, make in (("fs", lambda: session_manager.open(tmp / "many")), ("postgres", lambda: open_pg(schema))):
            sm = make()
            cold = timed(lambda: sm.call("session::list", req))  # noqa: B023
            warm = [timed(lambda: sm.call("session::list", req)) for _ in range(5)]  # noqa: B023
            assert len(sm.call("session::list", req)["sessions"]) == 50
            sm.close()
            figures[name] = (cold, warm)
        rows.append((f"{label}, {count:,} sessions, cold", ms(figures["fs"][0]), ms(figures["postgres"][0]),
                     "first call after open"))
        rows.append((f"{label}, {count:,} sessions, warm", median(figures["fs"][1]), median(figures["postgres"][1]),
                     "median of 5"))
    return rows


# -- instances in parallel ----------------------------------------------------------------------

def run_instances(schema: str, sessions: list[str], n: int) -> float:
    """Wall time for len(sessions) processes appending n messages each (after all are ready)."""
    return len(sessions) * n / pg_floor.processes("ours", DSN, schema, sessions, n)


def bench_parallel(schema: str, n: int) -> list[Row]:
    PostgresStore(PostgresSettings(dsn=DSN, schema=schema)).close()  # migrate once, outside the timing
    one = run_instances(schema, ["solo"], n)
    four = run_instances(schema, [f"p{k}" for k in range(4)], n)
    shared = run_instances(schema, ["shared"] * 4, n)
    rate = lambda count, secs: f"{count / secs:,.0f} appends/s"  # noqa: E731
    return [
        (f"1 instance, 1 session, {n} appends", "", rate(n, one), "one process"),
        (f"4 instances, 4 sessions, {n} appends each", "", rate(4 * n, four),
         "4 processes; 2 cores, server on the same box"),
        (f"4 instances, 1 session, {n} appends each", "", rate(4 * n, shared), "serialized by the session's lock"),
    ]


# -- plans ---------------------------------------------------------------------------------------

EXPLAINS = (
    ("list, first page (updated_desc)",
     "SELECT meta, updated_at, session_id FROM sessions WHERE meta IS NOT NULL "
     "ORDER BY updated_at DESC, session_id DESC LIMIT 200", ()),
    ("list, status filter",
     "SELECT meta, updated_at, session_id FROM sessions WHERE meta IS NOT NULL AND status = %s "
     "ORDER BY updated_at DESC, session_id DESC LIMIT 200", ("done",)),
    ("list, metadata filter",
     "SELECT meta, updated_at, session_id FROM sessions WHERE meta IS NOT NULL AND metadata @> %s::jsonb "
     "ORDER BY updated_at DESC, session_id DESC LIMIT 200", ('{"owner": "u7"}',)),
    ("get-message", "SELECT body FROM entries WHERE session_id = %s AND entry_id = %s", ("long", "e0000100")),
    ("append: the parent and its jump target (all an append reads to link its entry)",
     "SELECT p.entry_id, p.depth, p.jump_id, p.jump_depth, j.jump_id, j.jump_depth FROM entries p"
     " LEFT JOIN entries j ON j.session_id = p.session_id AND j.entry_id = p.jump_id"
     " WHERE p.session_id = %s AND p.entry_id = ANY(%s)", ("long", ["e0000100"])),
)


def explain(long_schema: str, many_schema: str, length: int) -> None:
    from session_manager.store.sql.path import _WINDOW_SQL

    window = ("messages-tail window (64 entries from the leaf)", _WINDOW_SQL,
              {"s": "long", "start": f"e{length - 1:07d}", "a": length - 64, "b": length - 1})
    with psycopg.connect(DSN, autocommit=True) as conn:
        for schema, cases in ((many_schema, EXPLAINS[:3]), (long_schema, [*EXPLAINS[3:], window])):
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            conn.execute("ANALYZE")
            for label, query, params in cases:
                print(f"\n-- {label}")
                plan = conn.execute(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {query}", params)
                for (line,) in plan:
                    print(line)


def floor(schema: str, quick: bool) -> None:
    try:
        pg_floor.report(DSN, schema, quick)
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--explain", action="store_true", help="also print the query plans")
    parser.add_argument("--floor", action="store_true", help="only the floor table: ours beside the baselines")
    args = parser.parse_args()
    try:
        psycopg.connect(DSN, connect_timeout=3).close()
    except psycopg.Error as e:
        print(f"bench_postgres: no PostgreSQL answers at SESSION_MANAGER_TEST_POSTGRES ({type(e).__name__}); skipped")
        return
    n, length, sessions, parallel = (50, 2000, 5000, 50) if args.quick else (300, 100_000, 100_000, 300)
    schema = f"smbench_{uuid.uuid4().hex[:8]}"
    if args.floor:
        floor(schema, args.quick)
        return
    tmp = Path(tempfile.mkdtemp(prefix="smbench-"))
    rows: list[Row] = []
    try:
        fs_sm, pg_sm = session_manager.open(tmp / "calls"), open_pg(schema)
        rows += bench_calls(fs_sm, pg_sm, n)
        fs_sm.close()
        pg_sm.close()
        rows += bench_tail(tmp, schema + "_long", length)
        rows += bench_list(tmp, schema + "_many", sessions)
        rows += bench_parallel(schema + "_par", parallel)
        width = max(len(r[0]) for r in rows)
        print(f"{'what':<{width}}  {'fs':>12}  {'postgres':>18}  note")
        for what, fs_v, pg_v, note in rows:
            print(f"{what:<{width}}  {fs_v:>12}  {pg_v:>18}  {note}")
        if args.explain:
            explain(schema + "_long", schema + "_many", length)
        print()
        floor(schema + "_floor", args.quick)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with psycopg.connect(DSN, autocommit=True) as conn:
            for suffix in ("", "_long", "_many", "_par"):
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema + suffix)))


if __name__ == "__main__":
    main()
