"""The warm plain append of this tree against another release's, in one process (issue 24):
calls taking turns (in a shuffled order), each side on its own store, schema and session, so
the box's load hits both alike. Not a test.

The other release is a copy of its ``session_manager`` package under another name (its
imports are relative), e.g. for commit ``ffc867b``::

    mkdir -p /tmp/base && git archive ffc867b session_manager | tar -x -C /tmp/base
    mv /tmp/base/session_manager /tmp/base/sm_base
    python bench/pg_client_ab.py --base /tmp/base/sm_base [--rounds 40] [--n 100]

with a server at ``SESSION_MANAGER_TEST_POSTGRES`` (default ``postgresql://127.0.0.1:5432/test``).
Prints each side's median µs per ``sm.call("session::append")``, the ratio (``base/this`` above
1: this tree is faster), the 10th percentiles and the load; and each side's medians by part: from
the call to the pipeline's start (``_pipeline`` entered: what the client does before the send,
but for a few libpq calls), the pipeline (the send, the work run meanwhile, the wait for the
answer, reading it) and from its end to the call's return.
"""

from __future__ import annotations

import argparse
import importlib
import os
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

DSN = os.environ.get("SESSION_MANAGER_TEST_POSTGRES", "postgresql://127.0.0.1:5432/test")
MSG = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}


def _open(package: str, schema: str, marks: list[float]) -> Any:
    top = importlib.import_module(package)
    pg = importlib.import_module(f"{package}.store.postgres")
    core = importlib.import_module(f"{package}.store.postgres.core")
    pipeline = core._pipeline

    def timed(*args: Any) -> Any:  # (run_pair calls the module's _pipeline by name)
        marks.append(time.perf_counter())
        try:
            return pipeline(*args)
        finally:
            marks.append(time.perf_counter())

    core._pipeline = timed
    return top.open(store=pg.PostgresStore(pg.PostgresSettings(dsn=DSN, schema=schema)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True, help="the other release's package directory (renamed)")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--n", type=int, default=100)
    args = parser.parse_args()
    base = Path(args.base).resolve()
    sys.path.insert(0, str(base.parent))
    schemas = {side: f"sm_cab_{uuid.uuid4().hex[:10]}" for side in ("this", "base")}
    marks: dict[str, list[float]] = {"this": [], "base": []}
    sms = {"this": _open("session_manager", schemas["this"], marks["this"]),
           "base": _open(base.name, schemas["base"], marks["base"])}
    try:
        bodies = {}
        for side, sm in sms.items():
            sid = sm.call("session::create", {})["session_id"]
            bodies[side] = {"session_id": sid, "message": MSG}
            for _ in range(50):
                sm.call("session::append", bodies[side])
        samples: dict[str, list[float]] = {"this": [], "base": []}
        parts: dict[str, list[tuple[float, float, float]]] = {"this": [], "base": []}
        load = []
        clock = time.perf_counter
        for _ in range(args.rounds):
            for _ in range(args.n):
                sides = ["this", "base"]
                random.shuffle(sides)
                for side in sides:
                    sm, body, mark = sms[side], bodies[side], marks[side]
                    mark.clear()
                    start = clock()
                    sm.call("session::append", body)
                    end = clock()
                    samples[side].append((end - start) * 1e6)
                    if len(mark) == 2:  # (one pipeline: the plain statement's)
                        parts[side].append(((mark[0] - start) * 1e6, (mark[1] - mark[0]) * 1e6, (end - mark[1]) * 1e6))
            load.append(float(Path("/proc/loadavg").read_text().split()[0]))
        this, other = statistics.median(samples["this"]), statistics.median(samples["base"])
        q_this, q_base = (statistics.quantiles(samples[s], n=10)[0] for s in ("this", "base"))
        print(f"this {this:.1f} µs, base {other:.1f} µs per append (medians of {len(samples['this'])} calls each);"
              f" base/this {other / this:.3f}; 10th percentiles {q_this:.1f} / {q_base:.1f};"
              f" load {min(load):.2f}-{max(load):.2f}")
        for side in ("this", "base"):
            if not parts[side]:  # (a release whose warm run_pair sends its pipeline inline: no mark)
                print(f"  {side}: no parts (its warm append does not call _pipeline)")
                continue
            pre, pipe, post = (statistics.median(p[i] for p in parts[side]) for i in range(3))
            print(f"  {side}: to the pipeline {pre:.1f} µs, the pipeline {pipe:.1f} µs, after it {post:.1f} µs"
                  f" (medians of {len(parts[side])} calls)")
    finally:
        for sm in sms.values():
            sm.close()
        with psycopg.connect(DSN, autocommit=True) as conn:
            for schema in schemas.values():
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
