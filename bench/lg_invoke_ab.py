"""LangGraph ``graph.invoke`` turns over our sqlite store, this tree's code beside another revision's,
in one process (not a test): a chat ``StateGraph`` (``bench_langgraph.chat_graph``) checkpointed by
``SessionManagerSaver`` as it is, by the same saver from ``REV`` (``lg_ab.base_package``), and by
``SqliteSaver``, taking turns in a shuffled order each round, each on its own file and thread.

Run: ``python bench/lg_invoke_ab.py [REV] [--rounds 10] [--durability fsync]`` (REV: ``HEAD`` by
default). A turn is what an app pays: LangGraph's own work, the reads, and the checkpoint writes it
runs on a thread pool made per ``invoke`` (so each turn's writes come from new threads: over
sqlite, connections per thread matter; docs/langgraph.md, issue 29). Prints each saver's median and
10th percentile turn and ``x`` = SqliteSaver's median / its own.
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main() -> None:
    from lg_ab import ab_parser, base_package

    args = ab_parser(__doc__, 10).parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        base_package(args.rev, where / "pkg")
        import bench_langgraph as bench
        import sm_base  # type: ignore[import-not-found]
        from langchain_core.messages import HumanMessage
        from sm_base.adapters import langgraph as base_adapter  # type: ignore[import-not-found]

        import session_manager
        from session_manager.adapters import langgraph as new_adapter

        synchronous = "NORMAL" if args.durability == "flush" else "FULL"
        with sm_base.open(f"sqlite:///{where.resolve()}/base.db", durability=args.durability) as old, \
                session_manager.open(f"sqlite:///{where.resolve()}/new.db", durability=args.durability) as new:
            baseline = bench.sqlite_saver(where / "x.db", synchronous)
            graphs = {"base": bench.chat_graph(base_adapter.SessionManagerSaver(old)),
                      "new": bench.chat_graph(new_adapter.SessionManagerSaver(new)),
                      "sqlite": bench.chat_graph(baseline)}
            times: dict[str, list[float]] = {name: [] for name in graphs}
            thread: Any = {"configurable": {"thread_id": "turns"}}
            order = list(graphs)
            for _ in range(args.rounds):
                random.shuffle(order)
                for name in order:
                    for i in range(10):
                        message = HumanMessage(f"question {i}: " + "lorem ipsum " * 16)
                        start = time.perf_counter()
                        graphs[name].invoke({"messages": [message]}, thread)
                        times[name].append(time.perf_counter() - start)
            baseline.conn.close()
    med = {name: statistics.median(t) * 1e6 for name, t in times.items()}
    p10 = {name: sorted(t)[len(t) // 10] * 1e6 for name, t in times.items()}
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    print(f"graph.invoke over sqlite ({args.durability}), {args.rounds} rounds of 10 turns (base: {args.rev}), "
          f"load {load}: " + ", ".join(f"{name} {med[name]:.0f} us (p10 {p10[name]:.0f})" for name in graphs))
    print(f"  sqlite/base {med['sqlite'] / med['base']:.3f}x  sqlite/new {med['sqlite'] / med['new']:.3f}x  "
          f"base/new {med['base'] / med['new']:.3f}x")


if __name__ == "__main__":
    main()
