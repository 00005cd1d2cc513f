"""The I/O of an fsync-mode put with a write-ahead journal, beside today's and SqliteSaver's.

Run: ``python bench/journal_put_io.py [--puts 1500]``.

Each round takes one ``SessionManagerSaver`` put in flush mode (``bench_langgraph``'s
checkpoints, messages + 2 KB settings) to get the bytes an fsync-mode put appends, then, in a
rotating order (whichever syncs first after the others fares differently):

- ``append + fsync``: today's fsync mode (the line appended to the session's log, ``fsync``);
- ``append + journal fdatasync``: the line appended WITHOUT a sync, and the same bytes with a
  32-byte header (sequence, file name, offset, length, crc32) ``pwrite``-n into a journal file
  laid with zeros once, ``fdatasync``-ed (no size to commit: the file never grows); packed records;
- the same with each record starting on a 4 KiB boundary;
- ``overwrite + fdatasync``: the bytes alone written over a file laid with zeros (SQLite's WAL
  once it has wrapped: the floor of the journal's pattern);
- ``SqliteSaver FULL put``: SqliteSaver as it comes (WAL, ``synchronous=FULL``), the whole put;
- ``ours flush put``: the whole flush-mode put (CPU + one write): ours with the journal costs about
  this + (journal row - a bare append).

Prints medians, 10th and 25th percentiles and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_langgraph as bench  # noqa: E402

import session_manager  # noqa: E402
from session_manager.adapters.langgraph import SessionManagerSaver  # noqa: E402

HEADER = struct.Struct("<4sQHQII")  # magic, sequence, name length, offset, length, crc32 (+ name, bytes)
RING = 16 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=1500)
    parser.add_argument("--dir", default=None, help="where the files go (default: a temp dir)")
    args = parser.parse_args()
    names = ("append + fsync", "append + journal fdatasync", "append + journal fdatasync (4K-aligned)",
             "overwrite + fdatasync", "SqliteSaver FULL put", "ours flush put")
    rows: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        where = Path(tmp)
        sm = session_manager.open(where / "flush", durability="flush")
        ours = bench.Thread(SessionManagerSaver(sm), "bench", bench.SETTINGS)
        baseline = bench.Thread(bench.sqlite_saver(where / "sqlite.db", None), "bench", bench.SETTINGS)
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND
        today, packed_log, aligned_log = (os.open(where / n, flags, 0o644) for n in ("a.jsonl", "b.jsonl", "c.jsonl"))
        packed, aligned, over = (os.open(where / n, os.O_RDWR | os.O_CREAT, 0o644) for n in ("j1", "j2", "w"))
        for fd in (packed, aligned, over):
            os.write(fd, bytes(RING))
            os.fsync(fd)
        os.fsync(os.open(where, os.O_RDONLY))
        log, seen = where / "flush" / "bench.jsonl", 0
        at = {packed: 0, aligned: 0, over: 0}
        ends = {packed_log: 0, aligned_log: 0}
        seq = 0
        name = b"bench.jsonl"

        def journaled(log_fd: int, jfd: int, data: bytes, align: int) -> None:
            nonlocal seq
            seq += 1
            os.write(log_fd, data)
            offset = ends[log_fd]
            ends[log_fd] += len(data)
            record = HEADER.pack(b"SMJ1", seq, len(name), offset, len(data), zlib.crc32(data)) + name + data
            pos = at[jfd]
            if pos + len(record) > RING:
                pos = 0
            os.pwrite(jfd, record, pos)
            os.fdatasync(jfd)
            pos += len(record)
            at[jfd] = -(-pos // align) * align

        def overwrite(data: bytes) -> None:
            pos = at[over]
            if pos + len(data) > RING:
                pos = 0
            os.pwrite(over, data, pos)
            os.fdatasync(over)
            at[over] = pos + len(data)

        for i in range(args.puts):
            rows["ours flush put"].extend(ours.put(1))
            with log.open("rb") as f:
                f.seek(seen)
                data = f.read()
            seen += len(data)
            steps = [("append + fsync", lambda data=data: (os.write(today, data), os.fsync(today))),
                     ("append + journal fdatasync", lambda data=data: journaled(packed_log, packed, data, 1)),
                     ("append + journal fdatasync (4K-aligned)",
                      lambda data=data: journaled(aligned_log, aligned, data, 4096)),
                     ("overwrite + fdatasync", lambda data=data: overwrite(data)),
                     ("SqliteSaver FULL put", None)]
            turn = i % len(steps)
            for step_name, step in steps[turn:] + steps[:turn]:
                if step is None:
                    rows[step_name].extend(baseline.put(1))
                    continue
                start = time.perf_counter()
                step()
                rows[step_name].append(time.perf_counter() - start)
        sm.close()
        baseline.saver.conn.close()  # type: ignore[attr-defined]
        size = seen / args.puts
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"journal put I/O: {args.puts} rounds, ~{size:.0f} bytes appended per put, steps rotating; "
          f"load average {load}")
    print(f"{'':<42} {'median':>9} {'p10':>9} {'p25':>9} {'mean':>9}")
    for row_name, values in rows.items():
        tenths, quarters = statistics.quantiles(values, n=10), statistics.quantiles(values, n=4)
        print(f"{row_name:<42} {statistics.median(values) * 1e6:>6.0f} us {tenths[0] * 1e6:>6.0f} us"
              f" {quarters[0] * 1e6:>6.0f} us {statistics.fmean(values) * 1e6:>6.0f} us")


if __name__ == "__main__":
    main()
