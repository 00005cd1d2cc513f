"""fsync-mode ``put`` with the write-ahead journal beside without it, and SqliteSaver FULL, in one process.

Run: ``python bench/journal_ab.py [--puts 2000] [--state settings|documents]``.

Three savers on ``bench_langgraph``'s checkpoints, one put each per round in a rotating order:
``SessionManagerSaver`` over an fs store in ``durability="fsync"`` with the journal
(``session_manager.store.fs._journal``, the default), the same over a store opened with the
journal off (``_journal.ENABLED = False`` while it opens: each put fsyncs the log, as before the
journal), and ``SqliteSaver`` as it comes (WAL, ``synchronous=FULL``). Prints median, 10th and
25th percentiles and mean per saver, the ratios to SqliteSaver and the load average. Also message
appends: ``session::append`` of a short message through ``SessionManager.call`` on each fs store
(``--appends``, the same alternation).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_langgraph as bench  # noqa: E402

import session_manager  # noqa: E402
from session_manager.adapters.langgraph import SessionManagerSaver  # noqa: E402
from session_manager.store.fs import _journal  # noqa: E402


def _open(where: Path, journal: bool) -> session_manager.SessionManager:
    _journal.ENABLED = journal
    try:
        return session_manager.open(where, durability="fsync")
    finally:
        _journal.ENABLED = True


def _row(name: str, values: list[float], base: list[float] | None) -> str:
    tenths, quarters = statistics.quantiles(values, n=10), statistics.quantiles(values, n=4)
    med = statistics.median(values)
    ratio = f"  {statistics.median(base) / med:.2f}x / p10 {statistics.quantiles(base, n=10)[0] / tenths[0]:.2f}x" \
        if base is not None else ""
    return (f"{name:<34} {med * 1e6:>7.0f} us {tenths[0] * 1e6:>7.0f} us {quarters[0] * 1e6:>7.0f} us "
            f"{statistics.fmean(values) * 1e6:>7.0f} us{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=2000)
    parser.add_argument("--appends", type=int, default=0)
    parser.add_argument("--state", choices=("settings", "documents"), default="settings")
    args = parser.parse_args()
    state = bench.SETTINGS if args.state == "settings" else bench.DOCUMENTS
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        with_j, without = _open(where / "journal", True), _open(where / "plain", False)
        savers = {"ours fsync, journal": bench.Thread(SessionManagerSaver(with_j), "bench", state),
                  "ours fsync, log fsync (before)": bench.Thread(SessionManagerSaver(without), "bench", state),
                  "SqliteSaver FULL": bench.Thread(bench.sqlite_saver(where / "sqlite.db", None), "bench", state)}
        times: dict[str, list[float]] = {name: [] for name in savers}
        names = list(savers)
        for i in range(args.puts):
            turn = i % len(names)
            for name in names[turn:] + names[:turn]:
                times[name].extend(savers[name].put(1))
        appends: dict[str, list[float]] = {"append, journal": [], "append, log fsync (before)": []}
        stores = {"append, journal": with_j, "append, log fsync (before)": without}
        sids = {name: sm.call("session::create", {})["session_id"] for name, sm in stores.items()}
        message = {"role": "user", "content": [{"type": "text", "text": "hello " * 40}], "timestamp": 1}
        for i in range(args.appends):
            order = list(stores) if i % 2 == 0 else list(stores)[::-1]
            for name in order:
                start = time.perf_counter()
                stores[name].call("session::append", {"session_id": sids[name], "message": message})
                appends[name].append(time.perf_counter() - start)
        with_j.close()
        without.close()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"fsync put ({args.state}), {args.puts} each, one at a time, rotating; load average {load}")
    print(f"{'':<34} {'median':>10} {'p10':>10} {'p25':>10} {'mean':>10}  SqliteSaver/this (median, p10)")
    base = times["SqliteSaver FULL"]
    for name, values in times.items():
        print(_row(name, values, base if name != "SqliteSaver FULL" else None))
    if args.appends:
        before = appends["append, log fsync (before)"]
        for name, values in appends.items():
            print(_row(name, values, before if name != "append, log fsync (before)" else None))


if __name__ == "__main__":
    main()
