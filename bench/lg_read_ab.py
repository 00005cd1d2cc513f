"""LangGraph ``get_tuple`` of this tree's code beside another revision's, in one process (not a
test): ``SessionManagerSaver`` over a store (sqlite by default) as it is, the same saver from
``REV`` (``git archive`` of its ``session_manager``, imported as ``sm_base``: see ``lg_ab.py``)
and ``SqliteSaver``, each on its own thread of ``bench_langgraph``'s checkpoints, taking turns in
a shuffled order each round: every round puts 25 more checkpoints on each, then reads the newest
25 times and 25 by id (a random earlier one).

Run: ``python bench/lg_read_ab.py [REV] [--rounds 20] [--state documents] [--store fs]
[--fsync] [--reader]``. ``--reader``: the reads are made by a second saver over a second
instance of the store (another process's reader: nothing it reads was written through it).
Prints the medians and the ratios; ``base/new`` above 1 is this tree faster.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from lg_ab import base_package  # noqa: E402

OPS = ("newest", "by id")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", nargs="?", default="HEAD")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--state", choices=("settings", "documents"), default="settings")
    parser.add_argument("--store", choices=("sqlite", "fs"), default="sqlite")
    parser.add_argument("--fsync", action="store_true", help="durability fsync (SqliteSaver: synchronous=FULL)")
    parser.add_argument("--reader", action="store_true", help="read through a second instance of the store")
    args = parser.parse_args()
    durability = "fsync" if args.fsync else "flush"
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        base_package(args.rev, where / "pkg")
        import bench_langgraph as bench
        import sm_base  # type: ignore[import-not-found]
        from sm_base.adapters import langgraph as base_adapter  # type: ignore[import-not-found]

        import session_manager
        from session_manager.adapters import langgraph as new_adapter

        def target(name: str) -> str:
            return f"sqlite:///{where.resolve()}/{name}.db" if args.store == "sqlite" else str(where / name)

        settings = bench.SETTINGS if args.state == "settings" else bench.DOCUMENTS
        opened: list[Any] = []
        threads: dict[str, Any] = {}
        readers: dict[str, Any] = {}
        for name, package, adapter in (("base", sm_base, base_adapter), ("new", session_manager, new_adapter)):
            sm = package.open(target(name), durability=durability)
            opened.append(sm)
            threads[name] = bench.Thread(adapter.SessionManagerSaver(sm), "t", settings)
            readers[name] = threads[name]
            if args.reader:
                other = package.open(target(name), durability=durability)
                opened.append(other)
                readers[name] = bench.Thread(adapter.SessionManagerSaver(other), "t", settings)
        baseline = bench.sqlite_saver(where / "x.db", None if args.fsync else "NORMAL")
        threads["sqlite"] = readers["sqlite"] = bench.Thread(baseline, "t", settings)
        times: dict[tuple[str, str], list[float]] = {(name, op): [] for name in threads for op in OPS}
        order = list(threads)
        for _ in range(args.rounds):
            random.shuffle(order)
            for name in order:
                threads[name].put(25)
                reader = readers[name]
                reader.configs, reader.latest = threads[name].configs, threads[name].latest
                times[(name, "newest")] += reader.get_newest(25)
                times[(name, "by id")] += reader.get_by_id(25)
        baseline.conn.close()
        for sm in opened:
            sm.close()
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    print(f"get_tuple over {args.store} ({durability}{', another instance reads' if args.reader else ''}), "
          f"{args.state}, {args.rounds} rounds (base: {args.rev}), load {load}:")
    for op in OPS:
        med = {name: statistics.median(times[(name, op)]) * 1e6 for name in threads}
        print(f"  {op:<7} " + ", ".join(f"{name} {med[name]:.1f} us" for name in threads)
              + f"  sqlite/base {med['sqlite'] / med['base']:.3f}x  sqlite/new {med['sqlite'] / med['new']:.3f}x"
              f"  base/new {med['base'] / med['new']:.3f}x")


if __name__ == "__main__":
    main()
