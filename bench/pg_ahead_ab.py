"""A warm plain append with and without its after-work overlapped with the server (issue 24),
in one process (not a test): ``optimistic.AHEAD`` on and off taking turns call by call (in a
shuffled order), on the same store and session, so the box's load hits both alike.

Run: ``python bench/pg_ahead_ab.py [--rounds 40] [--n 100] [--block 1]`` with a server at
``SESSION_MANAGER_TEST_POSTGRES`` (default ``postgresql://127.0.0.1:5432/test``). Prints each
side's median µs per append, the ratio (``off/on`` above 1: the overlap is faster), the 10th
percentiles and the load.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

import session_manager  # noqa: E402
from session_manager.store.postgres import PostgresSettings, PostgresStore, optimistic  # noqa: E402

DSN = os.environ.get("SESSION_MANAGER_TEST_POSTGRES", "postgresql://127.0.0.1:5432/test")
MSG = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--block", type=int, default=1, help="calls in a row per side (the scheduler settles"
                        " into each side's pattern only over a few)")
    args = parser.parse_args()
    schema = f"sm_ab_{uuid.uuid4().hex[:10]}"
    sm = session_manager.open(store=PostgresStore(PostgresSettings(dsn=DSN, schema=schema)))
    try:
        sid = sm.call("session::create", {})["session_id"]
        body = {"session_id": sid, "message": MSG}
        for _ in range(50):
            sm.call("session::append", body)
        # The sides alternate every ``block`` calls (their order shuffled per pair), each call timed alone:
        # the medians of all calls, so a burst of load on the shared box hits both sides alike.
        samples: dict[bool, list[float]] = {True: [], False: []}
        load = []
        clock = time.perf_counter
        for _ in range(args.rounds):
            for _ in range(args.n // args.block):
                sides = [True, False]
                random.shuffle(sides)
                for side in sides:
                    optimistic.AHEAD = side
                    for _ in range(args.block):
                        start = clock()
                        sm.call("session::append", body)
                        samples[side].append((clock() - start) * 1e6)
            load.append(float(Path("/proc/loadavg").read_text().split()[0]))
        on, off = statistics.median(samples[True]), statistics.median(samples[False])
        q_on, q_off = (statistics.quantiles(samples[s], n=10)[0] for s in (True, False))
        print(f"ahead on {on:.1f} µs, off {off:.1f} µs per append (medians of {len(samples[True])} calls each);"
              f" off/on {off / on:.3f}; 10th percentiles {q_on:.1f} / {q_off:.1f};"
              f" load {min(load):.2f}-{max(load):.2f}")
    finally:
        optimistic.AHEAD = True
        sm.close()
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
