"""What a LangGraph ``put`` over our sqlite store writes and where its SQLite time goes, beside
``SqliteSaver`` at the same ``synchronous`` level (issue 29): not a test.

Run: ``python bench/sqlite_put_parts.py [--puts 300] [--durability flush|fsync]`` (~10-30 s).

- **WAL frames per put, by b-tree** (load-independent): each saver's file on its own, its WAL
  checkpointed and restarted after a warm-up, ``--puts`` more puts, then the frames the WAL holds,
  each named by the b-tree and page type its page belongs to (SQLite's ``dbstat``, on a copy).
  A commit writes each page it changed once; in ``fsync`` mode each frame is also synced.
- **Per statement** (wall clock, medians and 10th percentiles): the two savers taking turns a put
  at a time; ours through a timing subclass of the store's kept cursor (``BEGIN IMMEDIATE``,
  ``PRAGMA data_version``, the entry's ``INSERT``, the session row's ``UPDATE``, ``COMMIT``),
  ``SqliteSaver`` through a timing cursor and ``Connection.commit`` around its ``cursor()``.

``bench_langgraph``'s checkpoints (messages + 2 KB settings).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import shutil
import sqlite3
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_langgraph as bench  # noqa: E402

import session_manager  # noqa: E402
from session_manager.adapters.langgraph import SessionManagerSaver  # noqa: E402

_TIMES: dict[str, list[float]] = collections.defaultdict(list)


class _TimedCursor(sqlite3.Cursor):
    """A cursor whose every ``execute`` is timed under the statement's first words."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        start = time.perf_counter()
        try:
            return super().execute(sql, *args)
        finally:
            _TIMES[" ".join(sql.split()[:2])].append(time.perf_counter() - start)


def savers(where: Path, durability: str) -> tuple[Any, Any, sqlite3.Connection, sqlite3.Connection]:
    """(ours over sqlite, SqliteSaver, each one's connection): one file each under ``where``."""
    where.mkdir()
    sm = session_manager.open(f"sqlite:///{where.resolve()}/sm.db", durability=durability)  # type: ignore[arg-type]
    ours = SessionManagerSaver(sm)
    theirs = bench.sqlite_saver(where / "x.db", "NORMAL" if durability == "flush" else "FULL")
    bench.Thread(ours, "warm", bench.SETTINGS).put(1)  # (the store's connection on this thread)
    return ours, theirs, sm.service.store.db.local.state.conn, theirs.conn


def frames(path: Path, conn: sqlite3.Connection, thread: bench.Thread, puts: int) -> tuple[int, dict[str, int]]:
    """(commits, frames by b-tree:page type) of ``puts`` puts written into a restarted WAL."""
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    thread.put(puts)
    wal = Path(f"{path}-wal").read_bytes()
    page = struct.unpack(">I", wal[8:12])[0]
    pages: list[tuple[int, int]] = []
    at = 32
    while at + 24 <= len(wal):
        number, commit = struct.unpack(">II", wal[at:at + 8])
        if number == 0:
            break
        pages.append((number, commit))
        at += 24 + page
    copy = path.with_name(path.name + ".copy")
    shutil.copy(path, copy)
    shutil.copy(f"{path}-wal", f"{copy}-wal")
    with contextlib.closing(sqlite3.connect(copy)) as c:
        names = dict(c.execute("SELECT pageno, name || ':' || pagetype FROM dbstat"))
    names[1] = names.get(1, "sqlite_schema") + " (page 1: the file's size)"
    by = collections.Counter(names.get(number, f"page {number}") for number, _ in pages)
    return sum(1 for _, commit in pages if commit), dict(by)


@contextlib.contextmanager
def _timed_saver_cursor(saver: Any) -> Iterator[None]:
    """SqliteSaver's ``cursor()`` with its statements and its ``commit`` timed."""
    conn = saver.conn

    @contextlib.contextmanager
    def cursor(transaction: bool = True) -> Iterator[sqlite3.Cursor]:
        with saver.lock:
            cur = conn.cursor(_TimedCursor)
            try:
                yield cur
            finally:
                if transaction:
                    start = time.perf_counter()
                    conn.commit()
                    _TIMES["(commit)"].append(time.perf_counter() - start)
                cur.close()

    saver.cursor = cursor
    yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=300)
    parser.add_argument("--durability", choices=("flush", "fsync"), default="flush")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        ours, theirs, our_conn, their_conn = savers(where / "frames", args.durability)
        print(f"WAL frames per put ({args.puts} puts after 100, durability={args.durability}; "
              "each frame is one page of 4 KiB)")
        for name, saver, conn, path in (("ours over sqlite", ours, our_conn, where / "frames" / "sm.db"),
                                        ("SqliteSaver", theirs, their_conn, where / "frames" / "x.db")):
            thread = bench.Thread(saver, "t", bench.SETTINGS)
            thread.put(100)
            commits, by = frames(path, conn, thread, args.puts)
            print(f"  {name}: {sum(by.values()) / commits:.2f}")
            for part, n in sorted(by.items(), key=lambda kv: -kv[1]):
                print(f"    {part:<48} {n / commits:.2f}")
        their_conn.close()

        ours, theirs, our_conn, their_conn = savers(where / "turns", args.durability)
        ours.sm.service.store.db.local.state.cur = our_conn.cursor(_TimedCursor)  # (the put's statements')
        threads = {"ours": bench.Thread(ours, "t", bench.SETTINGS),
                   "SqliteSaver": bench.Thread(theirs, "t", bench.SETTINGS)}
        for thread in threads.values():
            thread.put(50)
        _TIMES.clear()
        puts: dict[str, list[float]] = {name: [] for name in threads}
        with _timed_saver_cursor(theirs):
            for _ in range(args.puts):
                for name, thread in threads.items():
                    puts[name] += thread.put(1)
        their_conn.close()
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"\nper statement, {args.puts} puts each taking turns (load {load}): median (10th percentile)")
    rows = [*_TIMES.items(), *((f"put, {name}", took) for name, took in puts.items())]
    for label, took in rows:
        print(f"  {label:<24} {statistics.median(took) * 1e6:7.1f} us ({sorted(took)[len(took) // 10] * 1e6:.1f})")


if __name__ == "__main__":
    main()
