"""A plain fs-store append of this tree's code beside another revision's, in one process (not a
test): the typed ``sm.append(sid, message=...)`` and the adapters' owned custom append
(``sm._append_owned`` with ``data_json``), each over its own store, taking turns in a shuffled
order each round (``REV``'s ``session_manager`` imported as ``sm_base``: :func:`lg_ab.base_package`).

Run: ``python bench/fs_append_ab.py [REV] [--rounds 40] [--durability flush|fsync]`` (REV: ``HEAD``
by default, i.e. the working tree's changes against the last commit). Prints each one's median
per-append time over rounds of 50 (and the 10th percentile: under load the median swings), the load
average beside it, and ``base/new`` (above 1: this tree faster).
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

BATCH = 50


def appender(sm: Any, kind: str, user_message: Callable[..., Any]) -> Callable[[], None]:
    sid = sm.create().session_id
    typed = user_message("hello " * 8, timestamp=1)
    data = {"v": {"messages": ["m"] * 20, "n": 3}, "settings": "x" * 2000}
    data_json = orjson.dumps(data)

    def batch() -> None:
        if kind == "typed":
            for _ in range(BATCH):
                sm.append(sid, message=typed)
        else:
            for _ in range(BATCH):
                sm._append_owned(sid, "checkpoint", data, data_json=data_json)
    return batch


def main() -> None:
    from lg_ab import ab_parser, base_package

    args = ab_parser(__doc__, 40).parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        base_package(args.rev, where / "pkg")
        import sm_base  # type: ignore[import-not-found]
        from sm_base.messages import user_message as base_message  # type: ignore[import-not-found]

        import session_manager
        from session_manager.messages import user_message

        with sm_base.open(where / "base", durability=args.durability) as old, \
                session_manager.open(where / "new", durability=args.durability) as new:
            runs = {f"{version} {kind}": appender(sm, kind, message)
                    for kind in ("typed", "owned")
                    for version, sm, message in (("base", old, base_message), ("new", new, user_message))}
            for run in runs.values():
                run()  # warm-up
            times: dict[str, list[float]] = {name: [] for name in runs}
            order = list(runs)
            for _ in range(args.rounds):
                random.shuffle(order)
                for name in order:
                    start = time.perf_counter()
                    runs[name]()
                    times[name].append((time.perf_counter() - start) / BATCH)
    med = {name: statistics.median(t) * 1e6 for name, t in times.items()}
    p10 = {name: sorted(t)[len(t) // 10] * 1e6 for name, t in times.items()}
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    print(f"fs append ({args.durability}), {args.rounds} rounds of {BATCH} (base: {args.rev}), load {load}: "
          + ", ".join(f"{name} {med[name]:.1f} us (p10 {p10[name]:.1f})" for name in runs))
    for kind in ("typed", "owned"):
        print(f"  {kind}: base/new {med[f'base {kind}'] / med[f'new {kind}']:.3f}x "
              f"(p10 {p10[f'base {kind}'] / p10[f'new {kind}']:.3f}x)")


if __name__ == "__main__":
    main()
