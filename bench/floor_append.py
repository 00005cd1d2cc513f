"""The floor of a flush-mode append: what the contract makes every append do, and nothing else.

    python bench/floor_append.py [--appends 3000] [--rounds 7] [--top 15]

Side by side, interleaved in one process, on the same message (CPU time per
append, so a busy neighbour on the 2-core box inflates everyone alike):

* **ours**: ``session_manager.open(dir).call("session::append", ...)``, as a user calls it;
* **floor**: the irreducible steps written out inline (``bench/floor.py`` says which);
* **sqlite3 NORMAL** and **raw os.write**: the baselines of ``bench/run.py`` (``bench/baselines.py``).

Then the cost of each floor step alone, and a cProfile top of our call.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

import orjson  # noqa: E402
from baselines import RawLog, Sqlite  # noqa: E402
from fixtures import message  # noqa: E402
from floor import Floor  # noqa: E402

import session_manager  # noqa: E402
from session_manager._service.admission import admit  # noqa: E402
from session_manager._wire import api  # noqa: E402
from session_manager._wire.dumping import fast_dump  # noqa: E402
from session_manager._wire.validation import json_payload, parse_request  # noqa: E402


def per_call(fn: Callable[[], Any], n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--appends", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    n = args.appends
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sm = session_manager.open(root / "ours")
        sid = sm.call("session::create", {"title": "floor"})["session_id"]
        body = {"session_id": sid, "message": message()}
        floor = Floor(root / "floor.jsonl", sid)
        db = Sqlite(root / "db.sqlite", "NORMAL")
        raw = RawLog(root / "raw.jsonl")
        msg = message()
        contenders: dict[str, Callable[[], Any]] = {
            "ours (call)": lambda: sm.call("session::append", body),
            "floor": lambda: floor.append(body),
            "sqlite3 WAL NORMAL": lambda: db.append("s_1", msg),
            "raw os.write": lambda: raw.append(msg),
        }
        samples: dict[str, list[float]] = {k: [] for k in contenders}
        for fn in contenders.values():  # warm-up round, not recorded
            per_call(fn, n // 10)
        for r in range(args.rounds):
            names = list(contenders)
            names = names[r % len(names):] + names[:r % len(names)]  # rotate who goes first
            for name in names:
                samples[name].append(per_call(contenders[name], n))
        med = {k: statistics.median(v) for k, v in samples.items()}
        sqlite = med["sqlite3 WAL NORMAL"]
        print(f"flush-mode appends of a {len(orjson.dumps(msg))}-byte message, {n} per round, {args.rounds} rounds, "
              f"CPU time per append; load average {os.getloadavg()[0]:.1f}")
        print(f"{'contender':22s} {'median':>9s} {'min':>9s} {'max':>9s} {'rate vs sqlite3':>16s}")
        for name, values in samples.items():
            print(f"{name:22s} {med[name] * 1e6:7.1f}us {min(values) * 1e6:7.1f}us {max(values) * 1e6:7.1f}us "
                  f"{sqlite / med[name]:15.2f}x")
        print(f"ours / floor: {med['ours (call)'] / med['floor']:.2f}x the floor's cost; "
              f"the 2x-sqlite3 target needs <= {sqlite / 2 * 1e6:.1f}us")

        req = parse_request(api.AppendRequest, json_payload(body))
        assert req.message is not None
        entry = {"kind": "message", "id": "e_" + "0" * 32, "parent_id": None, "timestamp": 1, "revision": 0,
                 "message": fast_dump(req.message)}
        copy = json_payload(body)
        steps: dict[str, Callable[[], Any]] = {
            "admit (orjson size + NaN check)": lambda: admit("session::append", body, floor.limits, mutates=True),
            "json_payload (private copy)": lambda: json_payload(body),
            "pydantic strict validation": lambda: parse_request(api.AppendRequest, copy),
            "fast_dump of the message": lambda: fast_dump(req.message),  # type: ignore[arg-type]
            "uuid4 entry id": floor.ids.entry_id,
            "encode the append line": lambda: orjson.dumps(entry) + orjson.dumps(floor.meta),
            "os.write": lambda: os.write(floor.fd, b"{}\n"),
        }
        print("\nfloor steps alone (CPU time, best of 5):")
        for name, fn in steps.items():
            best = min(timeit.repeat(fn, number=n, repeat=5, timer=time.process_time)) / n
            print(f"  {name:34s} {best * 1e6:6.2f}us")

        profile = cProfile.Profile()
        profile.enable()
        for _ in range(n):
            sm.call("session::append", body)
        profile.disable()
        print(f"\ncProfile of {n} calls of ours (tottime, top {args.top}):")
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)
        floor.close()
        db.close()
        raw.close()
        sm.close()


if __name__ == "__main__":
    main()
