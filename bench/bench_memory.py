"""Memory after touching many sessions, counted by tracemalloc, beside the stated bound.

    python bench/bench_memory.py                      # 100,000 sessions, cache_bytes 16 MiB
    python bench/bench_memory.py --sessions 10000 --cache-mib 4 --top 15

A reference-format data_dir (no index sidecars, no sessions index; see
``memory_fixture``) is written first, outside the count. Then, with tracemalloc
running, a new store lists every session (pages of 500) and reads each one's
``messages-tail`` of 50 through the embedded API, so every session is loaded
once (its index built on the way) and most are evicted again. Printed: what
tracemalloc counts (at every tenth of the way, and at the end after a
collection) beside ``cache_bytes``, the cache's own estimate, and the bound the
store states (``session_manager.store.fs._cache``):

    cache_bytes + FIXED_OVERHEAD + sessions * CATALOG_PER_META_BYTE * (largest meta's JSON bytes)

tracemalloc slows allocation-heavy Python about 5x: 100k sessions take several
minutes. ``--top`` prints what holds the memory at the end (by source line).

``--listing`` measures issue 25's workload instead: a fresh process (the sessions
index written by an earlier one) lists every session, filters by metadata and
runs a mention search, loading no session; printed: tracemalloc's *peak* and what
it holds after, beside the same stated bound (``cache_bytes`` 0: nothing is loaded).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from memory_fixture import write_sessions

import session_manager
from session_manager.store.fs._cache import CATALOG_PER_META_BYTE, FIXED_OVERHEAD

MiB = 2**20
PAGE = 500
TAIL = 50


def mib(n: float) -> str:
    return f"{n / MiB:,.1f} MiB"


def list_all(sm: session_manager.SessionManager, order: str) -> tuple[int, int]:
    """Every page of ``session::list`` in ``order``: how many sessions, and the largest meta's JSON bytes."""
    listed, meta_bytes = 0, 0
    payload: dict[str, object] = {"limit": PAGE, "order": order}
    while True:
        got = sm.call("session::list", payload)
        for item in got["sessions"]:
            meta_bytes = max(meta_bytes, len(json.dumps(item, separators=(",", ":"))))
        listed += len(got["sessions"])
        if not got.get("next_cursor"):
            return listed, meta_bytes
        payload["cursor"] = got["next_cursor"]


def run(where: Path, sessions: int, cache_bytes: int, top: int) -> bool:
    # The ids to touch, from the file names, before tracing: the bench's own list is not the store's.
    ids = sorted(name[: -len(".jsonl")] for name in os.listdir(where) if name.endswith(".jsonl"))
    gc.collect()
    tracemalloc.start()
    started = time.perf_counter()
    before = tracemalloc.get_traced_memory()[0]
    with session_manager.open(where, cache_bytes=cache_bytes) as sm:
        store = sm.service.store
        listed, meta_bytes = list_all(sm, "created_asc")
        assert listed == len(ids) == sessions, (listed, len(ids), sessions)
        print(f"listed {listed:,} sessions in {time.perf_counter() - started:.1f} s "
              f"(largest meta {meta_bytes} bytes as JSON)", flush=True)
        step = max(1, len(ids) // 10)
        print(f"{'touched':>9}  {'tracemalloc':>12}  {'cache estimate':>14}  {'bound':>12}  {'seconds':>8}")
        for n, sid in enumerate(ids, 1):
            sm.call("session::messages-tail", {"session_id": sid, "limit": TAIL})
            if n % step == 0 or n == len(ids):
                held = tracemalloc.get_traced_memory()[0] - before
                bound = cache_bytes + FIXED_OVERHEAD + len(ids) * CATALOG_PER_META_BYTE * meta_bytes
                print(f"{n:>9,}  {mib(held):>12}  {mib(store._sessions.total):>14}  {mib(bound):>12}  "
                      f"{time.perf_counter() - started:>8.0f}", flush=True)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        peak = tracemalloc.get_traced_memory()[1] - before
        catalog = len(ids) * CATALOG_PER_META_BYTE * meta_bytes
        bound = cache_bytes + FIXED_OVERHEAD + catalog
        print()
        print(f"sessions touched           {len(ids):>12,}")
        print(f"tracemalloc, after gc      {mib(held):>12}   (peak {mib(peak)})")
        print(f"cache_bytes                {mib(cache_bytes):>12}   (estimate now {mib(store._sessions.total)}, "
              f"{len(store._sessions):,} sessions cached)")
        print(f"+ fixed overhead           {mib(FIXED_OVERHEAD):>12}")
        print(f"+ catalog bound            {mib(catalog):>12}   ({CATALOG_PER_META_BYTE} x {meta_bytes} bytes "
              f"x {len(ids):,} sessions)")
        print(f"= stated bound             {mib(bound):>12}   {'met' if held <= bound else 'NOT met'}")
        print(f"logs on disk               {mib(sum(e.stat().st_size for e in os.scandir(where) if e.is_file())):>12}")
        print(f"({time.perf_counter() - started:.0f} s with tracemalloc on)")
        if top:
            snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
            print(f"\nwhat holds it (top {top} source lines):")
            for stat in snapshot.statistics("lineno")[:top]:
                frame = stat.traceback[0]
                print(f"  {mib(stat.size):>10}  {stat.count:>9,} blocks  {frame.filename}:{frame.lineno}")
    tracemalloc.stop()
    return held <= bound


def listing(where: Path, sessions: int, top: int) -> bool:
    """Issue 25's workload (list, metadata filter, mention search) in a fresh process: its peak."""
    # An earlier process opened the data_dir and listed it once: the sessions index it writes is
    # what a restarted worker finds.
    subprocess.run([sys.executable, "-c", "import sys, session_manager\n"
                    "with session_manager.open(sys.argv[1]) as sm: sm.call('session::list', {'limit': 1})",
                    str(where)], check=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    code = f"import sys; sys.path[:0] = {sys.path[:2]!r}; import bench_memory as b; " \
           f"sys.exit(0 if b.listing_here(b.Path({str(where)!r}), {sessions}, {top}) else 1)"
    return subprocess.run([sys.executable, "-c", code]).returncode == 0


def listing_here(where: Path, sessions: int, top: int) -> bool:
    gc.collect()
    tracemalloc.start()
    started = time.perf_counter()
    before = tracemalloc.get_traced_memory()[0]
    with session_manager.open(where, cache_bytes=0) as sm:
        listed, meta_bytes = list_all(sm, "updated_desc")
        filtered = len(sm.call("session::list", {"metadata": {"owner": "u_07"}, "limit": 1000})["sessions"])
        found = len(sm.call("session::mention::search", {"query": "chat 00001", "limit": 50})["items"])
        gc.collect()
        held, peak = (n - before for n in tracemalloc.get_traced_memory())
        catalog = sessions * CATALOG_PER_META_BYTE * meta_bytes
        bound = FIXED_OVERHEAD + catalog
        print(f"listed {listed:,}, {filtered} by metadata, {found} by mention search "
              f"({time.perf_counter() - started:.1f} s with tracemalloc on)")
        print(f"peak (tracemalloc)         {mib(peak):>12}   {'met' if peak <= bound else 'NOT met'}")
        print(f"held after (gc)            {mib(held):>12}")
        print(f"stated bound               {mib(bound):>12}   (cache_bytes 0 + fixed {mib(FIXED_OVERHEAD)} + "
              f"catalog {CATALOG_PER_META_BYTE} x {meta_bytes} bytes x {sessions:,} sessions)")
        if top:
            snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
            for stat in snapshot.statistics("lineno")[:top]:
                frame = stat.traceback[0]
                print(f"  {mib(stat.size):>10}  {stat.count:>9,} blocks  {frame.filename}:{frame.lineno}")
    tracemalloc.stop()
    return peak <= bound


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--cache-mib", type=float, default=16)
    parser.add_argument("--top", type=int, default=0, help="print the N source lines holding the most memory")
    parser.add_argument("--quick", action="store_true", help="10,000 sessions (bench/run.py --all passes it)")
    parser.add_argument("--listing", action="store_true",
                        help="issue 25's workload: list, metadata filter, mention search in a fresh process (peak)")
    args = parser.parse_args(argv)
    sessions = 10_000 if args.quick else args.sessions
    root = Path(tempfile.mkdtemp(prefix="sm-bench-memory-"))
    try:
        start = time.perf_counter()
        written = write_sessions(root / "data", sessions)
        print(f"wrote {sessions:,} reference-format logs ({mib(written)}) in {time.perf_counter() - start:.1f} s; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        if args.listing:
            ok = listing(root / "data", sessions, args.top)
        else:
            ok = run(root / "data", sessions, int(args.cache_mib * MiB), args.top)
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
        return 0 if ok else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
