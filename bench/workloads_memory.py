"""Memory of loaded state: what tracemalloc counts after a new store has served every session once.

The fixture is its own reference-format data_dir (``memory_fixture``: the
store's bytes for one session, copied with new ids; written in a second or
two; one untraced pass then builds the indexes, as a reopened store finds
them), a quarter of the list store's size so the workload fits the run's
time budget (tracemalloc slows the touches about 5x; ``bench/bench_memory.py``
does 100k, from a reference-written directory). A small ``cache_bytes`` makes the
store evict nearly every session it loaded. The baseline is the bound the
store states (``cache_bytes`` + fixed overhead + the catalog's bound per
session); the logs on disk are shown for scale. sqlite3's page cache is
allocated outside Python's allocator (tracemalloc cannot see it), so it has no row.
"""

from __future__ import annotations

import gc
import json
import os
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

from fixtures import Context
from harness import Contender, Target, Workload
from memory_fixture import write_sessions

import session_manager
from session_manager.store.fs._cache import CATALOG_PER_META_BYTE, FIXED_OVERHEAD

TOUCH_TAIL = 50
CACHE_BYTES = 4 * 2**20


def _touch_all(sm: session_manager.SessionManager) -> None:
    ids = []
    payload: dict[str, object] = {"limit": 500, "order": "created_asc"}
    while True:
        got = sm.call("session::list", payload)
        ids += [m["session_id"] for m in got["sessions"]]
        if not got.get("next_cursor"):
            break
        payload["cursor"] = got["next_cursor"]
    del got
    for sid in ids:
        sm.call("session::messages-tail", {"session_id": sid, "limit": TOUCH_TAIL})


def _fixture(ctx: Context, sessions: int) -> Path:
    """The logs, then one untraced pass that builds their indexes (a reopened store's
    data_dir; bench_memory.py measures the first open of a reference-written one)."""
    where = ctx.dir("ours-memory")
    write_sessions(where, sessions)
    with session_manager.open(where, cache_bytes=CACHE_BYTES) as sm:
        _touch_all(sm)
    return where


def _ours(where: Path) -> Callable[[], float]:
    def run() -> float:
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            with session_manager.open(where, cache_bytes=CACHE_BYTES) as sm:
                _touch_all(sm)
                gc.collect()
                held = tracemalloc.get_traced_memory()[0] - before
            return float(held)
        finally:
            tracemalloc.stop()

    return run


def _bound(where: Path) -> Callable[[], float]:
    def run() -> float:
        largest, count = 0, 0
        for entry in os.scandir(where):
            if entry.name.endswith(".jsonl"):
                last = Path(entry.path).read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1]
                meta = json.loads(last)["meta"]
                largest = max(largest, len(json.dumps(meta, separators=(",", ":"))))
                count += 1
        return float(CACHE_BYTES + FIXED_OVERHEAD + count * CATALOG_PER_META_BYTE * largest)

    return run


def _disk(where: Path) -> Callable[[], float]:
    def run() -> float:
        return float(sum(entry.stat().st_size for entry in os.scandir(where) if entry.is_file()))

    return run


def workloads(ctx: Context) -> Iterator[Workload]:
    sessions = ctx.sizes.list_sessions // 4
    where = ctx.fixture("memory", lambda: _fixture(ctx, sessions))
    bound = "stated bound: cache_bytes + fixed + catalog"
    yield Workload(
        f"memory after touching {sessions:,} sessions (list + messages-tail each), cache_bytes 4 MiB", "bytes", bound,
        [Contender("ours, tracemalloc", _ours(where)), Contender(bound, _bound(where)),
         Contender("logs on disk", _disk(where))],
        targets=[Target("ours, tracemalloc", "<= the stated bound", lambda ratio, _: ratio <= 1.0)],
        rounds=1, warmup=False)
