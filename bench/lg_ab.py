"""LangGraph ``put`` of this tree's code beside another revision's, in one process (not a test):
``SessionManagerSaver`` as it is, the same saver from ``REV`` (``git archive`` of its
``session_manager``, imported as ``sm_base``) and ``SqliteSaver``, taking turns in a shuffled order
each round, each on its own thread of ``bench_langgraph``'s checkpoints.

Run: ``python bench/lg_ab.py [REV] [--rounds 30] [--state documents] [--store sqlite]
[--durability fsync]`` (REV: ``HEAD`` by default, i.e. the working tree's changes against the last
commit; ``--store sqlite``: both versions over our sqlite store, each its own file; ``SqliteSaver``
at the same durability: ``NORMAL`` for flush, ``FULL`` for fsync). Prints each saver's median and 10th
percentile put and the ratios; ``base/new`` above 1 is this tree faster. Both versions run the
same checkpoints in the same process and rounds, so a change's share of a put shows through a
busy machine's noise better than two ``bench_langgraph.py`` runs do (~1-2 % between runs here;
repeat and average). A part's cost in place (after LangGraph's serializer has cooled the caches)
can be read the same way: take it out in the working tree, compare against ``HEAD``.
"""

from __future__ import annotations

import argparse
import io
import random
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def base_package(rev: str, where: Path) -> None:
    """``rev``'s ``session_manager`` under ``where/sm_base`` (its absolute imports renamed),
    ``where`` put first on ``sys.path`` (``import sm_base`` then finds it)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "session_manager"], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(where, filter="data")
    (where / "session_manager").rename(where / "sm_base")
    for path in (where / "sm_base").rglob("*.py"):
        text = path.read_text()
        renamed = re.sub(r"\b(from|import) session_manager\b", r"\1 sm_base", text)
        if renamed != text:
            path.write_text(renamed)
    sys.path.insert(0, str(where))


def ab_parser(doc: str, rounds: int) -> argparse.ArgumentParser:
    """The arguments every A/B script here takes: the base revision, rounds and durability."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("rev", nargs="?", default="HEAD")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--durability", choices=("flush", "fsync"), default="flush")
    return parser


def main() -> None:
    parser = ab_parser(__doc__, 30)
    parser.add_argument("--state", choices=("settings", "documents"), default="settings")
    parser.add_argument("--store", choices=("fs", "sqlite"), default="fs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        base_package(args.rev, where / "pkg")
        import bench_langgraph as bench
        import sm_base  # type: ignore[import-not-found]
        from sm_base.adapters import langgraph as base_adapter  # type: ignore[import-not-found]

        import session_manager
        from session_manager.adapters import langgraph as new_adapter

        settings = bench.SETTINGS if args.state == "settings" else bench.DOCUMENTS
        def at(name: str) -> str | Path:
            return f"sqlite:///{where.resolve()}/{name}.db" if args.store == "sqlite" else where / name

        synchronous = "NORMAL" if args.durability == "flush" else "FULL"
        with sm_base.open(at("base"), durability=args.durability) as old, \
                session_manager.open(at("new"), durability=args.durability) as new:
            threads = {"base": bench.Thread(base_adapter.SessionManagerSaver(old), "t", settings),
                       "new": bench.Thread(new_adapter.SessionManagerSaver(new), "t", settings),
                       "sqlite": bench.Thread(bench.sqlite_saver(where / "x.db", synchronous), "t", settings)}
            times: dict[str, list[float]] = {name: [] for name in threads}
            order = list(threads)
            for _ in range(args.rounds):
                random.shuffle(order)
                for name in order:
                    times[name] += threads[name].put(25)
            threads["sqlite"].saver.conn.close()  # type: ignore[attr-defined]
    med = {name: statistics.median(t) * 1e6 for name, t in times.items()}
    p10 = {name: sorted(t)[len(t) // 10] * 1e6 for name, t in times.items()}
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    print(f"put over {args.store} ({args.durability}), {args.state}, {args.rounds} rounds of 25 "
          f"(base: {args.rev}), load {load}: "
          + ", ".join(f"{name} {med[name]:.1f} us (p10 {p10[name]:.1f})" for name in threads))
    print(f"  sqlite/base {med['sqlite'] / med['base']:.3f}x  sqlite/new {med['sqlite'] / med['new']:.3f}x  "
          f"base/new {med['base'] / med['new']:.3f}x")


if __name__ == "__main__":
    main()
