"""One benchmark run: every workload, ours against sqlite3 and raw baselines, one table.

    python bench/run.py             # the full run (under 3 minutes on a 2-core box)
    python bench/run.py --quick     # smaller sizes, fewer rounds (about 30 s)
    python bench/run.py --only list # one module (write/read/list/memory), or names containing it
    python bench/run.py --markdown  # the table as Markdown (for the README)
    python bench/run.py --show-baselines   # print the baselines' code and exit
    python bench/run.py --all       # then run the other bench/bench_*.py scripts that exist

Ours is driven only through the public embedded API (``session_manager.open(...).call(...)``);
the baselines are in ``bench/baselines.py``. Each figure is the median of interleaved
rounds, with min and max; "vs baseline" is the ratio of medians in the shown unit.
Figures depend on the machine: compare runs made on the same one.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

import workloads_list  # noqa: E402
import workloads_memory  # noqa: E402
import workloads_read  # noqa: E402
import workloads_write  # noqa: E402
from fixtures import FULL, MESSAGE_BYTES, QUICK, Context  # noqa: E402
from harness import Result, Workload, measure, table  # noqa: E402

MODULES: list[tuple[str, Callable[[Context], Iterator[Workload]]]] = [
    ("write", workloads_write.workloads),
    ("read", workloads_read.workloads),
    ("list", workloads_list.workloads),
    ("memory", workloads_memory.workloads),
]
# Scripts other engineers keep beside this one; --all runs those present, bench_mentions too.
# Seconds a workload's recorded rounds may take (judged from its warm-up round) before it gets fewer.
ROUND_BUDGET = 12.0
EXTRA_SCRIPTS = ("bench_mentions.py", "bench_streaming.py", "bench_postgres.py", "bench_import.py")


def environment(load_at_start: float) -> str:
    import session_manager

    version = getattr(session_manager, "__version__", "?")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"{now}; session-manager {version}; Python {platform.python_version()}; "
            f"sqlite {sqlite3.sqlite_version}; {os.cpu_count()} CPUs; {platform.system()} {platform.release()}; "
            f"load average {load_at_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
            f"messages of {MESSAGE_BYTES} bytes as JSON")


def run(quick: bool, rounds: int | None, only: str | None) -> list[Result]:
    ctx = Context(QUICK if quick else FULL, rounds or (3 if quick else 7))
    results: list[Result] = []
    try:
        by_module = only is not None and any(only == module for module, _ in MODULES)
        for module, make in MODULES:
            if by_module and module != only:
                continue
            for workload in make(ctx):
                if only and not by_module and only not in workload.name:
                    continue
                start = time.perf_counter()
                results.append(measure(workload, ctx.rounds, budget=None if quick else ROUND_BUDGET))
                print(f"  {workload.name}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    finally:
        ctx.stack.close()
        shutil.rmtree(ctx.root, ignore_errors=True)
    return results


def extras(quick: bool) -> int:
    failed = 0
    for name in EXTRA_SCRIPTS:
        script = HERE / name
        if not script.exists():
            continue
        args = [sys.executable, str(script)]
        if quick and name == "bench_mentions.py":
            args += ["--sessions", "2000", "--repeat", "5"]
        elif quick and "--quick" in script.read_text():
            args.append("--quick")  # only to scripts that take it
        print(f"\n== {name} ==", flush=True)
        failed |= subprocess.run(args, check=False).returncode != 0
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and 3 rounds (about 30 s)")
    parser.add_argument("--rounds", type=int, help="recorded rounds per workload (default 7, quick 3)")
    parser.add_argument("--only", help="one module (write, read, list, memory) or workloads whose name has this")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--show-baselines", action="store_true", help="print the baselines' code and exit")
    parser.add_argument("--all", action="store_true", help="also run the other bench/bench_*.py scripts present")
    args = parser.parse_args(argv)
    if args.show_baselines:
        print((HERE / "baselines.py").read_text())
        return 0
    started = time.perf_counter()
    load = os.getloadavg()[0]
    results = run(args.quick, args.rounds, args.only)
    print(environment(load))
    if args.quick:
        print("--quick: smaller data sets and fewer rounds; the targets hold only for the full run")
    print(table(results, markdown=args.markdown))
    print(f"({time.perf_counter() - started:.0f} s; baselines' code: bench/baselines.py, "
          f"or run with --show-baselines)")
    return extras(args.quick) if args.all else 0


if __name__ == "__main__":
    sys.exit(main())
