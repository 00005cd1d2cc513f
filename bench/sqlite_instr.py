"""Instructions per sqlite append and tail, under callgrind (issue 23): load-independent.

    python bench/sqlite_instr.py per-op                  # append, raw-append, agents-append, tail-written
    python bench/sqlite_instr.py per-op append            # one workload
    python bench/sqlite_instr.py profile append 2000      # cProfile call counts instead
    valgrind --tool=callgrind python bench/sqlite_instr.py append 1000   # a run to annotate

``per-op`` runs each workload twice (n and 2n operations, after the same warm-up, each in a
fresh temp file) and divides the difference by n: the interpreter's start, the set-up and the
warm-up cancel out. Only the main thread is counted (``--separate-threads``): a follower's
beat once a second would otherwise count wall time (the agents' session: every thread, its
``add_items`` runs in a worker thread). The workloads are bench_sqlite.py's:
a typed ``sm.append`` with ``durability: flush``, the raw ``synchronous=NORMAL`` INSERT
(bench/baselines.py), OpenAI Agents' ``SQLiteSession.add_items`` of one item, and a
messages-tail of 50 right after an append (``tail-written``: append and tail, less ``append``).
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

WARM = 200


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def workload(kind: str, n: int, tmp: Path) -> Any:
    """(set-up done) a function running ``n`` operations of ``kind``, and a clean-up."""
    msg = user("hello " * 8)
    if kind == "raw-append":
        from baselines import Sqlite

        db = Sqlite(tmp / "raw.db", "NORMAL")
        for _ in range(WARM):
            db.append("s", msg)

        def raw() -> None:
            for _ in range(n):
                db.append("s", msg)
        return raw, db.close
    if kind == "agents-append":
        from agents import SQLiteSession

        session = SQLiteSession("s", tmp / "agents.db")
        item: Any = {"role": "user", "content": "hello " * 8}
        loop = asyncio.new_event_loop()
        for _ in range(WARM):
            loop.run_until_complete(session.add_items([item]))

        def agents() -> None:
            async def go() -> None:
                for _ in range(n):
                    await session.add_items([item])
            loop.run_until_complete(go())

        def closed() -> None:
            session.close()
            loop.close()
        return agents, closed

    import session_manager

    sm = session_manager.open(f"sqlite:///{tmp / 'ours.db'}", durability="flush")
    sid = sm.create().session_id
    for _ in range(WARM):
        sm.append(sid, message=msg)
    if kind == "append":
        def run() -> None:
            for _ in range(n):
                sm.append(sid, message=msg)
    elif kind == "append-tail":  # per-op subtracts append's count (tail-written)
        req = {"session_id": sid, "limit": 50}

        def run() -> None:
            for _ in range(n):
                sm.append(sid, message=msg)
                sm.call("session::messages-tail", req)
    else:
        raise SystemExit(f"unknown workload {kind!r}")
    return run, sm.close


def main(argv: list[str]) -> None:
    if argv[0] == "per-op":
        kinds = argv[1:] or ["append", "raw-append", "agents-append", "tail-written"]
        n = 1000
        counts: dict[str, float] = {}

        def per_op(kind: str) -> float:
            if kind not in counts:
                c = [_callgrind(kind, k) for k in (n, 2 * n)]
                counts[kind] = (c[1] - c[0]) / n
            return counts[kind]

        for kind in kinds:
            got = per_op("append-tail") - per_op("append") if kind == "tail-written" else per_op(kind)
            print(f"{kind}: {got:,.0f} instructions per operation (callgrind, main thread, n={n})", flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        if argv[0] == "profile":
            kind, n = argv[1], int(argv[2])
            run, done = workload(kind, n, Path(tmp))
            prof = cProfile.Profile()
            prof.runcall(run)
            done()
            pstats.Stats(prof).sort_stats("tottime").print_stats(40)
            return
        run, done = workload(argv[0], int(argv[1]), Path(tmp))
        run()
        done()


def _callgrind(kind: str, n: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        proc = subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes",
                               f"--callgrind-out-file={out}", sys.executable, __file__, kind, str(n)],
                              capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-2000:])
        # The main thread's file (separate threads: -01, -02, ...), or every thread's for the
        # agents' session, which runs each add_items in a worker thread (asyncio.to_thread).
        files = sorted(Path(tmp).glob("cg.out-*")) if kind == "agents-append" else [Path(f"{out}-01")]
        total = 0
        for file in files:
            text = file.read_text()
            found = re.findall(r"^summary: (\d+)", text, re.M) or re.findall(r"^totals: (\d+)", text, re.M)
            total += int(found[-1])
        return total


if __name__ == "__main__":
    main(sys.argv[1:])
