"""Bridge read figures: a bridged instance reading a main over the fake engine (not a test).

Run: ``python bench/bench_bridge.py [--quick]``. Builds one main (fs, temp
dir) and one bridged instance on the project's fake engine, fills one
session per size, then times ``messages`` / ``messages-tail`` /
``messages-range`` (a page of 50) and ``get-message`` through the bridged
instance and counts what each read moves between the instances: store
calls, entries and JSON bytes. The fake engine has no network, so the time
is the bridge's own cost (validation, copying); on a real engine the
entries moved also cost transfer. Runs on any revision of the package (it
uses only the host, the fake engine and the public surface), so a before /
after comparison is the same script on two checkouts.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from session_manager._worker.config_value import parse_config
from session_manager._worker.iii_host import IIIHost

try:  # where the fake engine lives depends on the revision
    from session_manager.testing import FakeEngine as FakeIII
except ImportError:
    from tests.unit.fake_iii import FakeIII  # type: ignore[no-redef, unused-ignore]

URL = "ws://bench-main:1"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


class Meter:
    """Wraps the bridge's connection: counts calls, entries and bytes of answers."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.calls = 0
        self.bytes = 0
        self.entries = 0
        self._trigger = conn.trigger
        conn.trigger = self.trigger

    def trigger(self, request: dict[str, Any]) -> Any:
        answer = self._trigger(request)
        self.calls += 1
        self.bytes += len(json.dumps(answer, separators=(",", ":")))
        if isinstance(answer, dict):
            for key in ("entries",):
                if isinstance(answer.get(key), list):
                    self.entries += len(answer[key])
        return answer

    def reset(self) -> None:
        self.calls = self.bytes = self.entries = 0


def build(tmp: Path) -> tuple[IIIHost, IIIHost, Any, Meter]:
    main_fake = FakeIII()
    main = IIIHost(main_fake, parse_config({"adapter": {"name": "fs", "config": {"data_dir": str(tmp / "m")}}}),
                   local_url=URL)
    main.register()
    meters: list[Meter] = []

    def connect(config: Any) -> Any:
        conn = main_fake.connection()
        meters.append(Meter(conn))
        return conn

    local = FakeIII()
    bridged = IIIHost(local, parse_config({"adapter": {"name": "bridge", "config": {"url": URL,
                                                                                   "timeout_ms": 5000}}}),
                      local_url="ws://bench-local:1", bridge_connector=connect)
    bridged.register()
    return main, bridged, local, meters[0]


def fill(local: Any, size: int) -> str:
    sid: str = local.invoke("session::create", {"title": f"{size}"})["session_id"]
    done = 0
    while done < size:
        batch = min(100, size - done)
        local.invoke("session::append-many", {"session_id": sid,
                                              "messages": [user(f"m{done + i}") for i in range(batch)]})
        done += batch
    return sid


def measure(local: Any, meter: Meter, fid: str, payload: dict[str, Any], repeat: int) -> tuple[float, int, int, int]:
    local.invoke(fid, payload)  # warm
    meter.reset()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        local.invoke(fid, payload)
        samples.append(time.perf_counter() - start)
    return (statistics.median(samples), meter.calls // repeat, meter.entries // repeat, meter.bytes // repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes 100 and 1000 only, fewer repeats")
    args = parser.parse_args()
    sizes = [100, 1000] if args.quick else [100, 1000, 10_000]
    repeat = 5 if args.quick else 20
    tmp = Path(tempfile.mkdtemp(prefix="bench-bridge-"))
    main_host, bridged, local, meter = build(tmp)
    try:
        print(f"{'read':<34} {'session':>8} {'median':>11} {'calls':>6} {'entries':>8} {'bytes':>10}")
        for size in sizes:
            sid = fill(local, size)
            page = local.invoke("session::messages", {"session_id": sid, "limit": 500})["messages"]
            mid = page[min(len(page) - 1, 40)]["entry_id"]
            to = page[min(len(page) - 1, 89)]["entry_id"]
            reads: list[tuple[str, str, dict[str, Any]]] = [
                ("messages (limit 50)", "session::messages", {"limit": 50}),
                ("messages-tail (limit 50)", "session::messages-tail", {"limit": 50}),
                ("messages-range (50 entries)", "session::messages-range", {"from_entry_id": mid, "to_entry_id": to}),
                ("get-message", "session::get-message", {"entry_id": mid}),
            ]
            for name, fid, extra in reads:
                t, calls, entries, size_b = measure(local, meter, fid, {"session_id": sid, **extra}, repeat)
                print(f"{name:<34} {size:>8} {t * 1000:>8.3f} ms {calls:>6} {entries:>8} {size_b:>10}")
    finally:
        bridged.close()
        main_host.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
