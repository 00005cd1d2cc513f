"""Storage and read-path figures for the embedded session store (not a test).

Run: ``/work/venv/bin/python bench/bench.py [--quick]``. Prints one table:
append throughput per durability mode and append latency, replay of a
100k-entry session, messages-tail / messages first-page latency on it, and
session::list over 10k sessions (cold scan, then warm). Everything runs in
a temp dir on the local disk; numbers depend on the machine, so compare
runs on the same one.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import session_manager
from session_manager.store import Commit, FsStore

Row = tuple[str, str, str]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def latencies(fn: Callable[[], Any], n: int) -> list[float]:
    return [timed(fn) for _ in range(n)]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spread(samples: list[float]) -> tuple[str, str]:
    """Median as the value; sample count and p99 as the note."""
    return ms(statistics.median(samples)), f"median of {len(samples)}; p99 {ms(pct(samples, .99))}"


# -- appends -------------------------------------------------------------------------


def bench_appends(root: Path, durability: str, n: int) -> tuple[float, list[float]]:
    sm = session_manager.open(root / f"appends-{durability}", durability=durability)  # type: ignore[arg-type]
    sid = sm.call("session::create", {"title": "bench"})["session_id"]
    body = {"session_id": sid, "message": user("a typical short user turn, about eighty bytes of text....")}
    samples = latencies(lambda: sm.call("session::append", body), n)
    sm.close()
    return n / sum(samples), samples


# -- a 100k-entry session ------------------------------------------------------------------


def build_big_session(where: Path, entries: int) -> str:
    """Write a long transcript through the store in large commits (fast, same format)."""
    store = FsStore(where)
    sid = "s_big"
    meta: dict[str, Any] = {"session_id": sid, "title": "big", "description": "", "status": "idle",
                            "created_at": 1, "updated_at": 1, "message_count": 0}
    store.commit(sid, Commit(meta=meta))
    parent: str | None = None
    n = 0
    batch_size = 2000
    while n < entries:
        batch = []
        for _ in range(min(batch_size, entries - n)):
            n += 1
            eid = f"e_{n:07d}"
            if n % 10 == 3:  # a tool call and its result now and then, so tail paging sees runs
                message: dict[str, Any] = {
                    "role": "assistant", "timestamp": 1, "stop_reason": "function_call", "model": "m",
                    "provider": "p", "content": [{"type": "function_call", "id": f"c{n}", "function_id": "shell::run",
                                                  "arguments": {"cmd": "ls -la"}}],
                }
            elif n % 10 == 4:
                message = {"role": "function_result", "function_call_id": f"c{n - 1}", "function_id": "shell::run",
                           "content": [{"type": "text", "text": "README.md\nsrc\n"}], "details": None,
                           "is_error": False, "timestamp": 1}
            else:
                message = user(f"message number {n}: some ordinary conversational text of modest length.")
            batch.append({"kind": "message", "id": eid, "parent_id": parent, "timestamp": n, "revision": 0,
                          "message": message})
            parent = eid
        meta = {**meta, "message_count": n, "updated_at": n}
        store.commit(sid, Commit(entries=tuple(batch), leaf=parent, meta=meta))
    store.close()
    return sid


def bench_big(root: Path, entries: int, reads: int) -> list[Row]:
    where = root / "big"
    build_s = timed(lambda: build_big_session(where, entries))
    size_mb = sum(p.stat().st_size for p in where.glob("*.jsonl")) / 1e6
    replays = []
    for _ in range(3):
        sm = session_manager.open(where)
        start = time.perf_counter()
        sm.call("session::get", {"session_id": "s_big"})  # the first read replays the file
        replays.append(time.perf_counter() - start)
        sm.close()
    sm = session_manager.open(where)
    sm.call("session::get", {"session_id": "s_big"})
    tail = latencies(lambda: sm.call("session::messages-tail", {"session_id": "s_big", "limit": 50}), reads)
    first = latencies(lambda: sm.call("session::messages", {"session_id": "s_big"}), reads)
    body = {"session_id": "s_big", "message": user("one more turn")}
    appends = latencies(lambda: sm.call("session::append", body), reads)
    tail_after = latencies(lambda: sm.call("session::messages-tail", {"session_id": "s_big", "limit": 50}), reads)
    sm.close()
    return [
        (f"build {entries} entries via store (setup)", f"{build_s:.2f} s", f"{size_mb:.1f} MB file"),
        (f"replay: fresh open + first read ({entries} entries)", ms(statistics.median(replays)),
         f"median of 3; min {ms(min(replays))}"),
        ("messages-tail limit 50 (blocks)", *spread(tail)),
        ("messages first page (limit 50)", *spread(first)),
        ("append on the big session", *spread(appends)),
        ("messages-tail after those appends", *spread(tail_after)),
    ]


# -- list over many sessions -------------------------------------------------------------------


def bench_list(root: Path, sessions: int, reads: int) -> list[Row]:
    where = root / "many"
    store = FsStore(where)
    setup = time.perf_counter()
    for n in range(sessions):
        sid = f"s_{n:06d}"
        meta = {"session_id": sid, "title": f"chat {n}", "description": "", "status": "idle",
                "metadata": {"owner": f"u_{n % 7}"}, "created_at": n, "updated_at": n, "message_count": 1}
        entry = {"kind": "message", "id": "e_1", "parent_id": None, "timestamp": n, "revision": 0,
                 "message": user("hello")}
        store.commit(sid, Commit(entries=(entry,), leaf="e_1", meta=meta))
    setup_s = time.perf_counter() - setup
    store.close()
    sm = session_manager.open(where)
    cold = timed(lambda: sm.call("session::list", {}))
    warm = latencies(lambda: sm.call("session::list", {}), reads)
    filtered = latencies(lambda: sm.call("session::list", {"metadata": {"owner": "u_3"}, "limit": 50}), reads)
    pages = 0

    def walk() -> None:
        nonlocal pages
        payload: dict[str, Any] = {"limit": 500, "order": "created_asc"}
        while True:
            got = sm.call("session::list", payload)
            pages += 1
            if "next_cursor" not in got:
                return
            payload["cursor"] = got["next_cursor"]

    walk_s = timed(walk)
    sm.close()
    return [
        (f"create {sessions} sessions via store (setup)", f"{setup_s:.2f} s", ""),
        (f"session::list over {sessions}, cold (first call)", ms(cold), "scans file tails, no replay"),
        (f"session::list over {sessions}, warm", ms(statistics.median(warm)), f"median of {reads}"),
        ("session::list metadata filter, warm", ms(statistics.median(filtered)), f"median of {reads}"),
        (f"session::list full walk, limit 500 ({pages} pages)", ms(walk_s), "created_asc"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a tenth of the sizes (smoke run)")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    root = Path(tempfile.mkdtemp(prefix="sm-bench-"))
    rows: list[Row] = []
    try:
        for durability, n in (("flush", 5000 // scale), ("fsync", 500 // scale)):
            rate, samples = bench_appends(root, durability, n)
            rows.append((f"append, durability={durability} ({n} appends)", f"{rate:,.0f} /s",
                         f"p50 {ms(statistics.median(samples))}, p99 {ms(pct(samples, .99))}"))
        rows += bench_big(root, 100_000 // scale, 200)
        rows += bench_list(root, 10_000 // scale, 50)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    print(f"{'measure':<{width}}  {'value':>{vwidth}}  notes")
    print(f"{'-' * width}  {'-' * vwidth}  {'-' * 30}")
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>{vwidth}}  {note}")


if __name__ == "__main__":
    main()
