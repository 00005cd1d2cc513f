"""The sqlite adapter beside its baselines and issue 23's targets, in one run (not a test).

Run: ``python bench/bench_sqlite.py [--quick]`` (default run well under two
minutes on a loaded 2-core box). Prints one table, each figure beside what it
is held to:

- append, one process: ``durability: fsync`` vs a raw stdlib sqlite3
  INSERT-per-append with ``synchronous=FULL`` (target >= 0.6x), ``flush`` vs
  raw ``NORMAL`` (>= 0.3x) with the WAL pages each commit writes (counted
  in the WAL file: the load does not change them), and ``flush`` vs OpenAI Agents
  ``SQLiteSession.add_items`` of one item (>= 3x; skipped without the package);
- ``messages-tail`` 50 of a 20k-entry session vs the raw ``SELECT ... ORDER BY
  seq DESC LIMIT 50`` (at most 2x the raw time): repeated (the page kept at the
  session's version answers) and right after an append (the page built);
- 4 processes appending to 4 sessions and to 1 shared session, beside one
  process: appends/s, then lost / duplicated counts and whether each session
  is one chain;
- event delivery across processes: from a writer process's acknowledged
  append to an observer in this process, p50 / p99.

Rounds interleave the contenders of a row; figures are medians of 3 rounds
(5 for the two raw append rows).
Everything lives in a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from baselines import Sqlite  # noqa: E402

import session_manager  # noqa: E402
from session_manager.store import Commit  # noqa: E402
from session_manager.store.sqlite import SqliteSettings, SqliteStore  # noqa: E402

Row = tuple[str, str, str, str, str]  # what, ours, baseline, ratio, target


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def rate(count: int, seconds: float) -> float:
    return count / seconds


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def rounds(contenders: dict[str, Callable[[], float]], count: int = 3) -> dict[str, float]:
    """The median of ``count`` interleaved rounds per contender (the order rotates)."""
    names = list(contenders)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(count):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(contenders[name]())
    return {n: statistics.median(s) for n, s in samples.items()}


# -- one process: appends ------------------------------------------------------------------------


def ours_appends(tmp: Path, durability: str, n: int) -> Callable[[], float]:
    def run() -> float:
        path = tmp / f"ours-{durability}-{time.perf_counter_ns()}.db"
        with session_manager.open(f"sqlite:///{path}", durability=durability) as sm:  # type: ignore[arg-type]
            sid = sm.create().session_id
            msg = user("hello " * 8)
            seconds = timed(lambda: [sm.append(sid, message=msg) for _ in range(n)])
        return rate(n, seconds)

    return run


def raw_appends(tmp: Path, synchronous: str, n: int) -> Callable[[], float]:
    def run() -> float:
        db = Sqlite(tmp / f"raw-{synchronous}-{time.perf_counter_ns()}.db", synchronous)  # type: ignore[arg-type]
        msg = user("hello " * 8)
        seconds = timed(lambda: [db.append("s", msg) for _ in range(n)])
        db.close()
        return rate(n, seconds)

    return run


def agents_appends(tmp: Path, n: int) -> Callable[[], float] | None:
    try:
        from agents import SQLiteSession
    except ImportError:
        return None

    def run() -> float:
        session = SQLiteSession("s", tmp / f"agents-{time.perf_counter_ns()}.db")
        item: Any = {"role": "user", "content": "hello " * 8}

        async def go() -> None:
            for _ in range(n):
                await session.add_items([item])

        seconds = timed(lambda: asyncio.run(go()))
        session.close()
        return rate(n, seconds)

    return run


def wal_frames(db: Path) -> int:
    """The frames in ``db``'s WAL file since its last restart (those whose salt is the header's)."""
    data = (db.parent / (db.name + "-wal")).read_bytes()
    page = int.from_bytes(data[8:12], "big")
    salt, count, at = data[16:24], 0, 32
    while at + 24 + page <= len(data) and data[at + 8:at + 16] == salt:
        count, at = count + 1, at + 24 + page
    return count


def wal_pages(tmp: Path, n: int) -> Row:
    """WAL pages (frames) one append's commit writes, ours (flush) vs the raw NORMAL insert: the
    work of a commit that the load does not change. Counted over ``n`` appends after a
    checkpoint emptied the WAL (fewer pages than either side's automatic checkpoint)."""
    msg = user("hello " * 8)
    path = tmp / "wal-ours.db"
    with session_manager.open(f"sqlite:///{path}", durability="flush") as sm:
        sid = sm.create().session_id
        for _ in range(50):
            sm.append(sid, message=msg)
        sm.service.store.db.conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")  # type: ignore[attr-defined]
        sm.append(sid, message=msg)  # the WAL restarts at this commit
        before = wal_frames(path)
        for _ in range(n):
            sm.append(sid, message=msg)
        ours = (wal_frames(path) - before) / n
    db = Sqlite(tmp / "wal-raw.db", "NORMAL")
    for _ in range(50):
        db.append("s", msg)
    db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.append("s", msg)
    before = wal_frames(tmp / "wal-raw.db")
    for _ in range(n):
        db.append("s", msg)
    raw = (wal_frames(tmp / "wal-raw.db") - before) / n
    db.close()
    return ("WAL pages per append, flush vs raw NORMAL", f"{ours:.2f}", f"{raw:.2f}", f"{ours / raw:.2f}x",
            "(load-independent)")


def bench_appends(tmp: Path, n: int) -> list[Row]:
    fsync_n = max(20, n // 5)  # an fsync per append: fewer of them
    # Five rounds: on a shared box one stall weighs on a short raw run; the median drops it.
    full = rounds({"ours": ours_appends(tmp, "fsync", fsync_n), "raw": raw_appends(tmp, "FULL", fsync_n)}, 5)
    normal = rounds({"ours": ours_appends(tmp, "flush", n), "raw": raw_appends(tmp, "NORMAL", n)}, 5)
    rows: list[Row] = [
        ("append, fsync vs raw INSERT synchronous=FULL", f"{full['ours']:,.0f}/s", f"{full['raw']:,.0f}/s",
         f"{full['ours'] / full['raw']:.2f}x", ">= 0.6x"),
        ("append, flush vs raw INSERT synchronous=NORMAL", f"{normal['ours']:,.0f}/s", f"{normal['raw']:,.0f}/s",
         f"{normal['ours'] / normal['raw']:.2f}x", ">= 0.3x"),
        wal_pages(tmp, min(n, 300)),
    ]
    agents = agents_appends(tmp, n)
    if agents is None:
        rows.append(("append, flush vs agents SQLiteSession.add_items", "", "not installed", "", ">= 3x"))
    else:
        vs = rounds({"ours": ours_appends(tmp, "flush", n), "agents": agents})
        rows.append(("append, flush vs agents SQLiteSession.add_items", f"{vs['ours']:,.0f}/s",
                     f"{vs['agents']:,.0f}/s", f"{vs['ours'] / vs['agents']:.2f}x", ">= 3x"))
    return rows


# -- one process: the tail of a long session ------------------------------------------------------


def bench_tail(tmp: Path, length: int) -> list[Row]:
    store = SqliteStore(SqliteSettings(path=str(tmp / "long.db")))
    raw = Sqlite(tmp / "long-raw.db")
    meta = {"session_id": "long", "title": "", "description": "", "status": "idle", "created_at": 1,
            "updated_at": 1, "message_count": 0}
    store.commit("long", Commit(meta=meta))
    parent = None
    batch: list[dict[str, Any]] = []
    with raw.conn:
        for i in range(length):
            msg = user(f"message {i} " + "lorem ipsum " * 8)
            e = {"kind": "message", "id": f"e{i:07d}", "parent_id": parent, "timestamp": i, "revision": 0,
                 "message": msg}
            parent = e["id"]
            batch.append(e)
            raw.conn.execute("INSERT INTO messages (session_id, body) VALUES (?, ?)", ("long", json.dumps(msg)))
            if len(batch) == 5000 or i == length - 1:
                store.commit("long", Commit(entries=tuple(batch), leaf=parent, meta={**meta, "message_count": i + 1}))
                batch = []
    store.close()
    req = {"session_id": "long", "limit": 50}
    with session_manager.open(f"sqlite:///{tmp / 'long.db'}") as sm:
        page = sm.call("session::messages-tail", req)
        assert len(page["messages"]) == 50 and page["messages"][-1]["entry_id"] == f"e{length - 1:07d}"
        assert len(raw.tail("long", 50)) == 50

        def ours() -> float:
            return statistics.median(timed(lambda: sm.call("session::messages-tail", req)) for _ in range(30))

        def ours_written() -> float:
            # A tail right after an append (a chat view's): the session is past the page kept, so
            # the page is built from the path (the append not timed).
            samples = []
            for _ in range(30):
                sm.append("long", message=user("one more " + "lorem ipsum " * 8))
                samples.append(timed(lambda: sm.call("session::messages-tail", req)))
            return statistics.median(samples)

        def theirs() -> float:
            return statistics.median(timed(lambda: raw.tail("long", 50)) for _ in range(30))

        got = rounds({"ours": ours, "written": ours_written, "raw": theirs})
    raw.close()
    return [(f"messages-tail 50 of {length:,} vs raw SELECT ... LIMIT 50", f"{got['ours'] * 1e3:.3f} ms",
             f"{got['raw'] * 1e3:.3f} ms", f"{got['ours'] / got['raw']:.2f}x time", "<= 2x time"),
            ("  the same right after an append (page built)", f"{got['written'] * 1e3:.3f} ms",
             f"{got['raw'] * 1e3:.3f} ms", f"{got['written'] / got['raw']:.2f}x time", "<= 2x time")]


# -- several processes ------------------------------------------------------------------------------

WORKER = """
import sys, time, session_manager
uri, sid, prefix, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sm = session_manager.open(uri)
msg = lambda i: {"role": "user", "content": [{"type": "text", "text": f"{prefix}-{i}"}], "timestamp": 1}
sys.stdout.write("ready\\n"); sys.stdout.flush(); sys.stdin.readline()
start = time.perf_counter()
for i in range(n):
    sm.append(sid, message=msg(i), entry_id=f"{prefix}-{i}")
    sys.stdout.write(f"{prefix}-{i} {time.time()}\\n")
sys.stdout.write(f"took {time.perf_counter() - start}\\n"); sys.stdout.flush()
sm.close()
"""


def run_processes(uri: str, sessions: list[str], n: int) -> tuple[float, list[str], dict[str, float]]:
    """The slowest process's time for its appends (all ready, then go), the acknowledged ids, and
    each one's ack time (time.time())."""
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, uri, sid, f"p{k}", str(n)], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for k, sid in enumerate(sessions)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    acked: dict[str, float] = {}
    took = 0.0
    for p in procs:
        out, _ = p.communicate()
        assert p.returncode == 0
        for line in out.splitlines():
            word, at = line.split()
            if word == "took":
                took = max(took, float(at))  # the slowest process, from "go" to its last append (not its exit)
            else:
                acked[word] = float(at)
    return took, list(acked), acked


def audit(uri: str, sessions: list[str], acked: list[str]) -> tuple[int, int, bool]:
    """Lost (acknowledged, not stored), duplicated (stored more than once), one chain per session."""
    stored: list[str] = []
    chains = True
    with session_manager.open(uri) as sm:
        store = sm.service.store
        for sid in sorted(set(sessions)):
            entries = store.entries(sid)
            path = list(store.path(sid, store.get_leaf(sid)))
            meta = store.get_meta(sid) or {}
            chains &= len(path) == len(entries) == meta.get("message_count")
            stored += [e["message"]["content"][0]["text"] for e in entries]
    lost = len(set(acked) - set(stored))
    return lost, len(stored) - len(set(stored)), chains


def bench_processes(tmp: Path, n: int) -> list[Row]:
    rows: list[Row] = []
    one_s = None
    for label, sessions in (("1 process, 1 session", ["solo"]), ("4 processes, 4 sessions", ["a", "b", "c", "d"]),
                            ("4 processes, 1 session", ["shared"] * 4)):
        uri = f"sqlite:///{tmp / (label.replace(' ', '_').replace(',', '') + '.db')}"
        with session_manager.open(uri) as sm:
            for sid in set(sessions):
                sm.ensure(sid)
        seconds, acked, _ = run_processes(uri, sessions, n)
        lost, duplicated, chains = audit(uri, sessions, acked)
        per_s = rate(len(acked), seconds)
        one_s = one_s or per_s
        rows.append((f"{label}, {n} appends each", f"{per_s:,.0f}/s", f"{one_s:,.0f}/s (1 process)",
                     f"{per_s / one_s:.2f}x", f"lost {lost}, duplicated {duplicated}, one chain: {chains}"))
    return rows


def bench_events(tmp: Path, n: int) -> list[Row]:
    uri = f"sqlite:///{tmp / 'events.db'}"
    received: dict[str, float] = {}
    done = threading.Event()
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id

        def seen(event: dict[str, Any]) -> None:
            received[event["entry_id"]] = time.time()
            if len(received) >= n:
                done.set()

        sm.observe({"function_id": "session::on-message-added"}, seen)
        _, _, acked = run_processes(uri, [sid], n)
        done.wait(timeout=30)
    delays = sorted(received[e] - acked[e] for e in acked if e in received)
    p50 = statistics.median(delays) * 1e3
    p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))] * 1e3
    return [(f"event latency across processes ({len(delays)}/{n} delivered)", f"p50 {p50:.1f} ms",
             f"p99 {p99:.1f} ms", "", "poll_ms 25 (default)")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    args = parser.parse_args()
    n, length, parallel = (100, 2000, 50) if args.quick else (1000, 20_000, 250)
    tmp = Path(tempfile.mkdtemp(prefix="smbench-sqlite-"))
    rows: list[Row] = []
    try:
        rows += bench_appends(tmp, n)
        rows += bench_tail(tmp, length)
        rows += bench_processes(tmp, parallel)
        rows += bench_events(tmp, parallel)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    header: Row = ("what", "ours", "baseline", "ratio", "target / audit")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


if __name__ == "__main__":
    main()
