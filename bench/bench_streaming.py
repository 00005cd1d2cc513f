"""A streamed reply, and what exact JSON costs (figures, not a test).

Run: ``python bench/bench_streaming.py [--updates N] [--fsync]``.

1. Streaming: one assistant message updated N times (default 3,000, a reply
   streamed token by token, ~30 KB final text) through the embedded API.
   Prints updates/s and bytes on disk / final message size, the worst seen
   during the stream (sampled after every update) and after it (and after a
   reopen) -- with online compaction, and without it for comparison.
2. Exact JSON: the per-request admission walk (NaN/Infinity/surrogates and
   the request size) beside a whole append call, and the replay decoder
   (orjson with the long-digit check that sends big integers to the exact
   decoder) beside bare ``orjson.loads``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

import session_manager
from session_manager._service.admission import admit
from session_manager._service.limits import Limits
from session_manager.ids import SequentialIds
from session_manager.store.fs import _rewrite
from session_manager.store.fs._records import loads

TOKEN = "token 789 "  # 10 characters per update: 3,000 updates make a 30,000-character reply


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def stream(where: Path, updates: int, durability: str) -> dict[str, float]:
    sm = session_manager.open(where, ids=SequentialIds(), durability=durability)  # type: ignore[arg-type]
    sm.call("session::create", {})
    sm.call("session::append", {"session_id": "s_001", "message": _user("question")})
    reply = sm.call("session::append", {"session_id": "s_001", "message": {
        "role": "assistant", "content": [], "stop_reason": "end", "model": "m", "provider": "p",
        "timestamp": 1}})["entry_id"]
    log = where / "s_001.jsonl"
    text, worst_bytes = "", 0
    elapsed = 0.0
    for _ in range(updates):
        text += TOKEN
        payload = {"session_id": "s_001", "entry_id": reply, "content": [{"type": "text", "text": text}]}
        start = time.perf_counter()
        sm.call("session::update-message", payload)
        elapsed += time.perf_counter() - start
        worst_bytes = max(worst_bytes, log.stat().st_size)
    final_message = len(orjson.dumps(sm.call("session::get-message", {"session_id": "s_001", "entry_id": reply})))
    after = log.stat().st_size
    sm.close()
    with session_manager.open(where) as again:
        again.call("session::get", {"session_id": "s_001"})
    reopened = log.stat().st_size
    return {"updates_per_s": updates / elapsed, "worst_ratio": worst_bytes / final_message,
            "worst_bytes": worst_bytes, "bound": 3 * final_message + 64 * 1024,
            "final_ratio": after / final_message, "reopened_ratio": reopened / final_message,
            "final_message": final_message, "text": len(text)}


def per_call_us(fn: Any, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def exactness(tmp: Path) -> list[tuple[str, float]]:
    limits = Limits()
    small = {"session_id": "s_001", "message": _user("hello " * 20)}
    batch = {"session_id": "s_001", "messages": [_user(f"m{i}") for i in range(10_000)]}
    big_text = {"session_id": "s_001", "message": _user("x" * 1_000_000)}
    rows = [
        ("admit(): one append payload", per_call_us(lambda: admit("session::append", small, limits,
                                                                     mutates=True), 20_000)),
        ("admit(): 1 MB text message", per_call_us(lambda: admit("session::append", big_text, limits,
                                                                    mutates=True), 2_000)),
        ("admit(): append-many of 10,000", per_call_us(lambda: admit("session::append-many", batch, limits,
                                                                        mutates=True), 20)),
    ]
    with session_manager.open(tmp / "calls", ids=SequentialIds()) as sm:
        sm.call("session::create", {})
        rows.append(("whole session::append call", per_call_us(lambda: sm.call("session::append", small), 3_000)))
        rows.append(("whole append-many of 10,000", per_call_us(
            lambda: sm.call("session::append-many", batch), 3)))
    line = orjson.dumps({"type": "append", "entry": {"kind": "message", "id": "e_1", "parent_id": None,
                                                     "timestamp": 1, "message": _user("hello " * 20)}})
    rows.append(("orjson.loads of a record line", per_call_us(lambda: orjson.loads(line), 100_000)))
    rows.append(("records.loads (exact) of it", per_call_us(lambda: loads(line), 100_000)))
    big = orjson.dumps({"n": 1}).replace(b"1", str(2**70 + 1).encode())
    rows.append(("records.loads of a 2**70 line", per_call_us(lambda: loads(big), 100_000)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=3000)
    parser.add_argument("--fsync", action="store_true", help="durability fsync instead of flush")
    args = parser.parse_args()
    durability = "fsync" if args.fsync else "flush"
    tmp = Path(tempfile.mkdtemp(prefix="bench-streaming-"))
    try:
        print(f"streaming: {args.updates} updates of one message ({durability})")
        runs = [("online compaction", stream(tmp / "on", args.updates, durability))]
        real = _rewrite.RATIO
        _rewrite.RATIO = 10**9  # never
        try:
            runs.append(("no compaction", stream(tmp / "off", args.updates, durability)))
        finally:
            _rewrite.RATIO = real
        print(f"{'':20} {'updates/s':>10} {'max ratio':>10} {'max bytes':>12} {'bound':>10} "
              f"{'final ratio':>12} {'after reopen':>13}")
        for name, r in runs:
            print(f"{name:20} {r['updates_per_s']:10.0f} {r['worst_ratio']:10.2f} {r['worst_bytes']:12.0f} "
                  f"{r['bound']:10.0f} {r['final_ratio']:12.2f} {r['reopened_ratio']:13.2f}")
        print(f"(final message {runs[0][1]['final_message']} bytes of JSON, text {runs[0][1]['text']} "
              "characters; ratios are bytes on disk / final message, sampled after every update; "
              "bound = 3 x final message + 64 KiB)")
        print("\nexact JSON:")
        for name, us in exactness(tmp):
            print(f"  {name:34} {us:12.2f} us")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
