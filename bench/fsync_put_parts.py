"""Where an fsync-mode LangGraph ``put`` goes, beside the raw file calls it cannot do without.

Run: ``python bench/fsync_put_parts.py [--puts 1000]`` (~1-2 minutes on a quiet disk).

One process, the steps below taking turns one put at a time (so a busy moment of a shared
machine falls on all of them), ``bench_langgraph``'s checkpoints (messages + 2 KB settings):

- ``SessionManagerSaver`` over ``durability="fsync"``: the whole put, and within it the
  ``fsync`` of the log (``os.fsync`` as ``_descriptors`` calls it), the ``write`` of its bytes
  (``os.write`` as ``_fileops.write_all`` calls it) and the rest (CPU: the saver, the store);
- ``SessionManagerSaver`` over our sqlite store with ``durability="fsync"`` (WAL,
  ``synchronous=FULL``, its WAL sized once: each commit's sync overwrites), the whole put;
- ``SqliteSaver`` as it comes (WAL, ``synchronous=FULL``), the whole put;
- ``SessionManagerSaver`` over ``durability="flush"`` (no sync: CPU and one ``write``), right
  after the SqliteSaver put (it starts as an fsync-mode put does, on a CPU the process just
  slept on while its sync ran), and again back to back with another flush put (warm);
- the bytes the fsync-mode put appended, appended again to plain files of the same directory:
  ``write`` + ``fsync``, ``write`` + ``fdatasync``; and written over bytes already there (a file
  written once and synced, as SQLite overwrites its WAL once it wraps) + ``fdatasync``, + ``fsync``
  (these four in a rotating order: whichever syncs first after the savers' puts fares differently).

Prints medians, 10th and 25th percentiles, the load average and how the temp directory's file
system is mounted (on ext4, whether it has a journal: what an append's sync must write besides
the data differs). Speed is machine-bound: compare figures from one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_langgraph as bench  # noqa: E402

import session_manager  # noqa: E402
from session_manager.adapters.langgraph import SessionManagerSaver  # noqa: E402
from session_manager.store.fs import _descriptors, _fileops  # noqa: E402

_fsync, _write = os.fsync, os.write


class Clocked:
    """A module's ``os`` with ``fsync`` and ``write`` timed (everything else is os's own)."""

    def __init__(self) -> None:
        self.fsync_s = 0.0
        self.write_s = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def fsync(self, fd: int) -> None:
        start = time.perf_counter()
        try:
            _fsync(fd)
        finally:
            self.fsync_s += time.perf_counter() - start

    def write(self, fd: int, data: Any) -> int:
        start = time.perf_counter()
        try:
            return _write(fd, data)
        finally:
            self.write_s += time.perf_counter() - start


def mounted(path: Path) -> str:
    """The file system ``path`` is on, as /proc/mounts has it, and (ext4) whether it journals."""
    best = ("", "?", "?", "")
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                dev, point, kind, options = line.split()[:4]
                if str(path).startswith(point.rstrip("/") + "/") and len(point) >= len(best[1]):
                    best = (dev, point, kind, options)
    except OSError:
        return "unknown file system"
    dev, point, kind, options = best
    shown = f"{kind} on {dev} ({point}; {options})"
    task = Path("/sys/fs/ext4") / os.path.basename(dev) / "journal_task"
    if kind == "ext4" and task.exists():
        journal = task.read_text().strip()
        shown += "; no journal" if journal in ("", "<none>") else f"; journal task {journal}"
    return shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=1000)
    args = parser.parse_args()
    clock = Clocked()
    _descriptors.os = clock  # type: ignore[assignment]
    _fileops.os = clock  # type: ignore[assignment]
    rows: dict[str, list[float]] = {name: [] for name in (
        "ours fsync put", "  its fsync", "  its write", "  the rest (CPU)",
        "ours over sqlite, fsync put", "SqliteSaver FULL put",
        "ours flush put, after SqliteSaver's", "ours flush put, back to back",
        "raw append + fsync", "raw append + fdatasync", "raw overwrite + fdatasync", "raw overwrite + fsync")}
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        stores = [session_manager.open(where / name, durability=durability)  # type: ignore[arg-type]
                  for name, durability in (("fsync", "fsync"), ("flush", "flush"), ("warm", "flush"))]
        fsync_put, after_put, warm_put = (bench.Thread(SessionManagerSaver(sm), "bench", bench.SETTINGS)
                                          for sm in stores)
        on_sqlite = session_manager.open(f"sqlite:///{where.resolve()}/sm.db", durability="fsync")
        sqlite_put = bench.Thread(SessionManagerSaver(on_sqlite), "bench", bench.SETTINGS)
        baseline = bench.Thread(bench.sqlite_saver(where / "sqlite.db", None), "bench", bench.SETTINGS)
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND
        append_fsync, append_fdatasync = (os.open(where / name, flags, 0o644) for name in ("a.jsonl", "b.jsonl"))
        over_fdatasync, over_fsync = (os.open(where / name, os.O_RDWR | os.O_CREAT, 0o644) for name in ("c", "d"))
        room = 16 << 20
        for fd in (over_fdatasync, over_fsync):
            os.write(fd, bytes(room))
            os.fsync(fd)
        log, seen, at = where / "fsync" / "bench.jsonl", 0, 0
        for i in range(args.puts):
            clock.fsync_s = clock.write_s = 0.0
            took = fsync_put.put(1)[0]
            rows["ours fsync put"].append(took)
            rows["  its fsync"].append(clock.fsync_s)
            rows["  its write"].append(clock.write_s)
            rows["  the rest (CPU)"].append(took - clock.fsync_s - clock.write_s)
            rows["ours over sqlite, fsync put"].extend(sqlite_put.put(1))
            rows["SqliteSaver FULL put"].extend(baseline.put(1))
            rows["ours flush put, after SqliteSaver's"].extend(after_put.put(1))
            warm_put.put(1)
            rows["ours flush put, back to back"].extend(warm_put.put(1))
            with log.open("rb") as f:
                f.seek(seen)
                data = f.read()
            seen += len(data)
            if at + len(data) > room:
                at = 0
            raw = [("raw append + fsync", append_fsync, _fsync, None),
                   ("raw append + fdatasync", append_fdatasync, os.fdatasync, None),
                   ("raw overwrite + fdatasync", over_fdatasync, os.fdatasync, at),
                   ("raw overwrite + fsync", over_fsync, _fsync, at)]
            turn = i % len(raw)  # each first in turn: the first sync after the savers' puts fares differently
            for name, fd, sync, offset in raw[turn:] + raw[:turn]:
                start = time.perf_counter()
                if offset is None:
                    _write(fd, data)
                else:
                    os.pwrite(fd, data, offset)
                sync(fd)
                rows[name].append(time.perf_counter() - start)
            at += len(data)
        for sm in (*stores, on_sqlite):
            sm.close()
        baseline.saver.conn.close()  # type: ignore[attr-defined]
        for fd in (append_fsync, append_fdatasync, over_fdatasync, over_fsync):
            os.close(fd)
        size = seen / args.puts
        fs = mounted(where)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"fsync-mode put by part: {args.puts} puts of each, one at a time in turn, ~{size:.0f} bytes appended "
          f"per put; load average {load}\n  {fs}")
    print(f"{'':<38} {'median':>9} {'p10':>9} {'p25':>9}")
    for name, values in rows.items():
        tenths, quarters = statistics.quantiles(values, n=10), statistics.quantiles(values, n=4)
        print(f"{name:<38} {statistics.median(values) * 1e6:>6.0f} us {tenths[0] * 1e6:>6.0f} us"
              f" {quarters[0] * 1e6:>6.0f} us")


if __name__ == "__main__":
    main()
