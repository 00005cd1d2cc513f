"""Memory of loaded state: what tracemalloc counts after a new store has served every session once.

The comparison row is the size of the logs on disk, so the ratio reads as
"bytes held per byte stored". sqlite3's page cache is allocated outside
Python's allocator (tracemalloc cannot see it), so it has no row here.
"""

from __future__ import annotations

import gc
import os
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

from fixtures import Context
from harness import Contender, Workload
from workloads_list import list_fixture

import session_manager

TOUCH_TAIL = 50


def _ours(where: Path) -> Callable[[], float]:
    def run() -> float:
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            # Read-only: the warm list workloads' store still owns this directory
            # (one writer per data_dir); a read-only store loads the same state.
            with session_manager.open(where, read_only=True) as sm:
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
                gc.collect()
                held = tracemalloc.get_traced_memory()[0] - before
            return float(held)
        finally:
            tracemalloc.stop()

    return run


def _disk(where: Path) -> Callable[[], float]:
    def run() -> float:
        return float(sum(entry.stat().st_size for entry in os.scandir(where) if entry.is_file()))

    return run


def workloads(ctx: Context) -> Iterator[Workload]:
    ours, _, _ = list_fixture(ctx)
    count = f"{ctx.sizes.list_sessions:,}"
    yield Workload(
        f"memory after touching {count} sessions (list + messages-tail each)", "bytes", "logs on disk",
        [Contender("ours, tracemalloc", _ours(ours)), Contender("logs on disk", _disk(ours))],
        rounds=1, warmup=False)
