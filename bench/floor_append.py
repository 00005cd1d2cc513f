"""The floor of a flush-mode append: what the contract makes every append do, and nothing else.

    python bench/floor_append.py [--appends 3000] [--rounds 7] [--top 15]

Side by side, interleaved in one process, on the same message (CPU time per
append, so a busy neighbour on the 2-core box inflates everyone alike):

* **ours**: ``session_manager.open(dir).call("session::append", ...)``, as a user calls it;
* **floor**: the irreducible steps written out inline, with ours' own pieces where the
  contract names them: refuse what JSON cannot hold and measure it (``admit``), take a
  private copy and validate it strictly (``json_payload`` + the pydantic request model:
  bad input must become ``session/invalid_request`` naming the field), draw a random
  UUIDv4 id and the time, build the entry and the meta in the field order the bytes on
  disk pin, encode the ``append`` line (orjson), one ``os.write`` on a descriptor kept
  open, remember the entry, the leaf and the meta in memory, build the response and the
  ``on-message-added`` event payload, copy the response for the caller. No lock, no
  compare-and-set, no index, no compaction accounting, no catalog: a single-threaded
  store that cannot fail would need none of them, ours needs all of them;
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

import session_manager  # noqa: E402
from session_manager._service.admission import admit  # noqa: E402
from session_manager._service.limits import Limits  # noqa: E402
from session_manager._wire import api  # noqa: E402
from session_manager._wire.dumping import fast_dump  # noqa: E402
from session_manager._wire.validation import json_payload, parse_request  # noqa: E402
from session_manager.clock import SystemClock  # noqa: E402
from session_manager.ids import UuidIds  # noqa: E402


class Floor:
    """The minimum an append must do, for one session, on one kept descriptor."""

    def __init__(self, path: Path, session_id: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.limits, self.ids, self.clock = Limits(), UuidIds(), SystemClock()
        self.entries: dict[str, dict[str, Any]] = {}
        self.leaf: str | None = None
        self.meta: dict[str, Any] = {"session_id": session_id, "title": "floor", "description": "",
                                     "status": "idle", "created_at": 0, "updated_at": 0, "message_count": 0}

    def append(self, payload: dict[str, Any]) -> dict[str, Any]:
        admit("session::append", payload, self.limits, mutates=True)
        req = parse_request(api.AppendRequest, json_payload(payload))
        assert req.message is not None
        entry_id, now, parent = self.ids.entry_id(), self.clock.now_ms(), self.leaf
        entry = {"kind": "message", "id": entry_id, "parent_id": parent, "timestamp": now, "revision": 0,
                 "message": fast_dump(req.message)}
        meta = dict(self.meta)
        meta["updated_at"], meta["message_count"] = now, meta["message_count"] + 1
        os.write(self.fd, b'{"type":"append","entry":' + orjson.dumps(entry) + b',"meta":' + orjson.dumps(meta)
                 + b"}\n")
        self.entries[entry_id], self.leaf, self.meta = entry, entry_id, meta
        response = {"entry_id": entry_id, "parent_id": parent, "timestamp": now}
        _event = {"session_id": req.session_id, "entry_id": entry_id, "parent_id": parent,
                  "message": entry["message"], "timestamp": now}
        return dict(response)

    def close(self) -> None:
        os.close(self.fd)


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
