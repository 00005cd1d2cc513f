"""Client instructions per postgres append and tail, under callgrind (issue 24).

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p python bench/pg_instr.py append 200
    python bench/pg_instr.py per-op          # runs callgrind itself: append and tail, per operation
    python bench/pg_instr.py per-op tail-anew   # a tail whose page is built anew
    python bench/pg_instr.py per-op get get-message messages   # the other warm reads
    python bench/pg_instr.py profile append 2000   # cProfile call counts instead

Wall-clock time on a shared box swings with its load; the instructions this
process's calling thread executes per operation do not (the server's are another process's;
the store's own threads are left out: their timing varies).
``per-op`` runs each workload twice (n and 2n operations, after the same
warm-up) and divides the difference by n: the set-up, the interpreter's start
and the warm-up cancel out. Each run uses its own schema (dropped afterwards).

``tail-anew`` is a warm store's tail whose page is built anew each time (the
service's kept page dropped first): what a tail right after an append costs
the client, its append aside. (A cold open is not counted here: its pool's
threads make the count swing with the machine's timing; on 2026-12-06 a run
of 40 cold opens counted fewer instructions than one of 20.)
"""

from __future__ import annotations

import cProfile
import os
import pstats
import re
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DSN = os.environ.get("SESSION_MANAGER_TEST_POSTGRES", "postgresql://127.0.0.1:5432/test")
MSG = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}
WARM = 30


def _schema() -> str:
    return f"sm_instr_{uuid.uuid4().hex[:10]}"


def _drop(schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _open(schema: str) -> Any:
    import session_manager
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    return session_manager.open(store=PostgresStore(PostgresSettings(dsn=DSN, schema=schema)))


def workload(kind: str, n: int) -> Any:
    """(set-up done) a function running ``n`` operations of ``kind``, and a clean-up."""
    schema = _schema()
    if kind.startswith("raw-"):
        return _raw(kind, n, schema)
    sm = _open(schema)
    sid = sm.create().session_id
    if kind == "append":
        for _ in range(WARM):
            sm.append(sid, message=MSG)

        def run() -> None:
            for _ in range(n):
                sm.append(sid, message=MSG)
    elif kind == "call-append":
        body = {"session_id": sid, "message": MSG}
        for _ in range(WARM):
            sm.call("session::append", body)

        def run() -> None:
            for _ in range(n):
                sm.call("session::append", body)
    elif kind == "tail":
        for i in range(200):
            sm.append(sid, message={**MSG, "content": [{"type": "text", "text": f"message {i}"}]})
        req = {"session_id": sid, "limit": 50}
        for _ in range(WARM):
            sm.call("session::messages-tail", req)

        def run() -> None:
            for _ in range(n):
                sm.call("session::messages-tail", req)
    elif kind == "store-tail":  # the store's part of a warm tail alone (its one read)
        for i in range(200):
            sm.append(sid, message={**MSG, "content": [{"type": "text", "text": f"message {i}"}]})
        store = sm.service.store
        version = store.meta_and_leaf_since(sid, None)[2]

        def run() -> None:
            for _ in range(n):
                store.meta_and_leaf_since(sid, version)
    elif kind in ("get", "get-message", "messages"):  # the other warm reads a chat view makes
        for i in range(200):
            sm.append(sid, message={**MSG, "content": [{"type": "text", "text": f"message {i}"}]})
        function = f"session::{kind}"
        req = ({"session_id": sid} if kind == "get" else {"session_id": sid, "limit": 50} if kind == "messages"
               else {"session_id": sid, "entry_id": sm.call("session::messages-tail", {"session_id": sid, "limit": 1})
                     ["messages"][0]["entry_id"]})
        for _ in range(WARM):
            sm.call(function, req)

        def run() -> None:
            for _ in range(n):
                sm.call(function, req)
    elif kind == "tail-anew":  # the page built anew each time (as right after an append), the read warm
        for i in range(200):
            sm.append(sid, message={**MSG, "content": [{"type": "text", "text": f"message {i}"}]})
        from session_manager._service.page_memo import PageMemo

        req = {"session_id": sid, "limit": 50}
        core = sm.service.core

        def tail_anew() -> None:
            core.tail_pages = PageMemo()  # (nothing kept: the page is built)
            sm.call("session::messages-tail", req)

        for _ in range(WARM):
            tail_anew()

        def run() -> None:
            for _ in range(n):
                tail_anew()
    else:
        raise SystemExit(f"unknown workload {kind!r}")

    def done() -> None:
        sm.close()
        _drop(schema)

    return run, done


def _raw(kind: str, n: int, schema: str) -> Any:
    """The floor of bench/pg_floor.py: a prepared autocommit INSERT per message, a prepared
    SELECT ... ORDER BY ... LIMIT 50 per tail, on one psycopg connection."""
    import psycopg
    from psycopg import sql

    sys.path.insert(0, str(ROOT / "bench"))
    import pg_floor

    with psycopg.connect(DSN, autocommit=True) as c:
        c.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    with pg_floor.connect(DSN, schema) as c:  # (several statements: not prepared)
        c.execute(pg_floor.RAW_TABLE)
        c.execute(pg_floor.RAW_TAIL_TABLE)
    conn = pg_floor.connect(DSN, schema, prepare_threshold=0)
    if kind == "raw-append":
        def op() -> None:
            conn.execute(pg_floor.RAW_INSERT, ("s", '{"role":"user"}'))
    else:
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO raw_tail (session_id, body) VALUES (%s, %s)",
                            [("long", f'{{"n":{i}}}') for i in range(200)])

        def op() -> None:
            conn.execute(pg_floor.RAW_TAIL, ("long",)).fetchall()
    for _ in range(WARM):
        op()

    def run() -> None:
        for _ in range(n):
            op()

    def done() -> None:
        conn.close()
        _drop(schema)

    return run, done


def main(argv: list[str]) -> None:
    if argv[0] == "per-op":
        kinds = argv[1:] or ["append", "tail"]
        for kind in kinds:
            n = 200
            counts = [_callgrind(kind, k) for k in (n, 2 * n)]
            print(f"{kind}: {(counts[1] - counts[0]) / n:,.0f} instructions per operation (callgrind, n={n})")
        return
    if argv[0] == "profile":
        kind, n = argv[1], int(argv[2])
        run, done = workload(kind, n)
        prof = cProfile.Profile()
        prof.runcall(run)
        done()
        pstats.Stats(prof).sort_stats("tottime").print_stats(40)
        return
    run, done = workload(argv[0], int(argv[1]))
    run()
    done()


def _callgrind(kind: str, n: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        # Each thread counted apart: the calling thread's count only (the caller's cost per
        # operation). The store's other threads (pool, watchdog, listener, the outbox pruner,
        # which opens a connection of its own a second after the first commit, then each
        # minute) ran in one of the two runs and not the other: a swing of ~150,000 a call.
        proc = subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes",
                               f"--callgrind-out-file={out}", sys.executable, __file__, kind, str(n)],
                              capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONHASHSEED": "0"})
        main = Path(f"{out}-01")
        found = re.findall(r"^summary: (\d+)", main.read_text(), re.M) if main.exists() else []
        if proc.returncode != 0 or not found:
            raise SystemExit(proc.stderr[-2000:])
        return int(found[0])


if __name__ == "__main__":
    main(sys.argv[1:])
