"""Issue 24's ceiling: "our SQL, bare" without the protocols shared with the previous release.

``bench/pg_floor.py``'s one writer, with one more bare contender, **ceiling, bare**: ours' warm
plain append (``plain.LINKED``, the new entry's links sent) with the three parts that processes
of the previous release share taken away, as a coordinated release could:

- the lock statement: the session's advisory lock folded into the session row's ``UPDATE`` (a
  condition of its ``WHERE``: taken after the statement's snapshot, which is safe for the row,
  since an ``UPDATE`` rechecks the newest version of a row changed meanwhile, and the compare-and-
  set then fails); no gate (it only orders observers' registration);
- the observers check (no ``observers`` scan, no read-only listeners' lock probe);
- the search queue's trigger (``entries_search_born`` dropped: no ``search_pending`` row).

It runs on a schema of its own (the trigger is dropped there only). Every contender is timed in
the same process, in blocks of ``block`` appends taking turns (raw psycopg, langchain-postgres,
ours, our SQL bare, ceiling bare, contract minimum, raw bare; ``turns`` turns a round): on a box
shared with other jobs a block's wall time swings several-fold, so each round reports, per
contender, the 10th percentile and the median of its blocks' time per append (the quieter
moments, and the typical), its client CPU and server CPU per append (``/proc/<pid>/schedstat``
of its backend; steadier), with the load average, and what ours would reach with the ceiling's
SQL and ours' client as it is::

    ours at the ceiling, per append = ours - (our SQL bare - ceiling bare)

(the service's Python unchanged, the server and wire work of the SQL replaced) against lc, by
wall time (p10, median) and by CPU (client + server: no wire, no waiting for a core); and the
same with the contract minimum's SQL in the ceiling's place (what no SQL of ours can beat).

    python bench/pg_ceiling.py 'DSN' [block] [turns] [rounds]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import pg_floor  # noqa: E402

from session_manager.store.postgres import plain  # noqa: E402
from session_manager.store.postgres.core import Statement  # noqa: E402

_SEEN_CLAUSE = f" AND NOT ({plain._SEEN})"
assert _SEEN_CLAUSE in plain.LINKED
# The session's lock as a condition of the UPDATE (the key every writer takes); no gate, no
# observers check. (pg_advisory_xact_lock returns void, never NULL.)
CEILING = plain.LINKED.replace(
    _SEEN_CLAUSE, " AND pg_advisory_xact_lock(hashtextextended(%(schema)b::text || ':' || %(sid)b::text, 0))"
                  " IS NOT NULL")
CEILING_SCHEMA_CHANGE = "DROP TRIGGER entries_search_born ON entries"


def ceiling(dsn: str, schema: str, calls: int, opened: list[Any]) -> pg_floor.Bare:
    """:data:`CEILING` for ``calls`` appends on ``schema`` (migrated, its trigger dropped)."""
    sm = pg_floor.ours(dsn, schema)
    opened.append(sm)
    with pg_floor.connect(dsn, schema) as c:
        c.execute(CEILING_SCHEMA_CHANGE)
    bare = pg_floor.our_sql(dsn, schema, sm, calls, opened, (Statement(CEILING),))
    return bare


def main() -> None:
    dsn = sys.argv[1]
    block = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    turns = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    total = block * turns * rounds
    schema, cschema = f"smceil_{uuid.uuid4().hex[:8]}", f"smceil_c_{uuid.uuid4().hex[:8]}"
    opened: list[Any] = []
    try:
        pg_floor.setup(dsn, schema)
        pg_floor.setup(dsn, cschema)
        fns = pg_floor.appenders(dsn, schema, opened, total)
        fns["ceiling, bare"] = ceiling(pg_floor.tag(dsn, "ceiling, bare"), cschema, total + 20, opened)
        for _ in range(20):
            fns["ceiling, bare"]()
        order = ["raw", "langchain-postgres", "ours", "our SQL, bare", "ceiling, bare", "contract minimum",
                 "raw, bare"]
        with psycopg.connect(dsn, autocommit=True) as watch:
            names = {k: f"session-manager:{schema}"[:63] if k == "ours" else f"floor {k}" for k in order}
            pids = {k: [p for (p,) in watch.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                                                    (names[k],))] for k in order}
        print(f"{turns} turns of {block} appends per contender per round; per append: wall p10 / median us,"
              " client CPU / server CPU us")
        summary: dict[str, list[float]] = {"wall p10": [], "wall median": [], "cpu": [],
                                           "min wall p10": [], "min wall median": [], "min cpu": []}
        for r in range(rounds):
            loads = [os.getloadavg()[0]]
            walls: dict[str, list[float]] = {k: [] for k in order}
            client: dict[str, float] = dict.fromkeys(order, 0.0)
            server: dict[str, float] = dict.fromkeys(order, 0.0)
            for _ in range(turns):
                for k in order:
                    cpu, before = time.process_time(), pg_floor.server_ns(pids[k])
                    start = time.perf_counter()
                    for _ in range(block):
                        fns[k]()
                    walls[k].append((time.perf_counter() - start) / block * 1e6)
                    after = pg_floor.server_ns(pids[k])
                    client[k] += (time.process_time() - cpu) / block * 1e6 / turns
                    server[k] += (after - before) / block / 1000 / turns if before is not None and after is not None \
                        else float("nan")
            loads.append(os.getloadavg()[0])
            p10 = {k: sorted(v)[len(v) // 10] for k, v in walls.items()}
            med = {k: statistics.median(v) for k, v in walls.items()}
            cpu_of = {k: client[k] + server[k] for k in order}
            print(f"round {r + 1} (load {loads[0]:.2f}-{loads[1]:.2f}):")
            for k in order:
                print(f"  {k:18} {p10[k]:7,.0f} / {med[k]:7,.0f}   {client[k]:5,.0f} / {server[k]:5,.0f}"
                      f"   {med['langchain-postgres'] / med[k]:5.2f}x lc (median), "
                      f"{cpu_of['langchain-postgres'] / cpu_of[k]:5.2f}x lc (CPU)")
            for label, table, into in (("wall p10", p10, "wall p10"), ("wall median", med, "wall median"),
                                       ("CPU", cpu_of, "cpu")):
                lc = table["langchain-postgres"]
                at_ceiling = table["ours"] - (table["our SQL, bare"] - table["ceiling, bare"])
                at_minimum = table["ours"] - (table["our SQL, bare"] - table["contract minimum"])
                summary[into].append(lc / at_ceiling)
                summary["min " + into].append(lc / at_minimum)
                print(f"  by {label}: ours {lc / table['ours']:.2f}x lc; at the ceiling ~{at_ceiling:,.0f} us,"
                      f" {lc / at_ceiling:.2f}x lc; with the contract minimum's SQL ~{at_minimum:,.0f} us,"
                      f" {lc / at_minimum:.2f}x lc", flush=True)
        print("ours at the ceiling / lc, per round:")
        for key, values in summary.items():
            what = key.replace("min ", "with the contract minimum's SQL, by ") if key.startswith("min ") \
                else f"at the ceiling, by {key}"
            print(f"  {what}: {', '.join(f'{v:.2f}x' for v in values)}; median {statistics.median(values):.2f}x")
        print(f"load now {os.getloadavg()[0]:.2f}")
    finally:
        for thing in opened:
            thing.close()
        with psycopg.connect(dsn, autocommit=True) as c:
            for s in (schema, cschema):
                c.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(s)))


if __name__ == "__main__":
    main()
