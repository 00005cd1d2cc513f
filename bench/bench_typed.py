"""What the typed and async APIs cost over dict calls (not a test).

Run: ``python bench/bench_typed.py [--n N]``. Appends N user messages to one
session and reads a 50-message page N/10 times, through ``sm.call`` with
dicts, through the typed methods, and through ``aio`` (sequential awaits,
then 8 concurrent coroutines). A temp dir on the local disk, ``durability:
flush``; compare runs on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import session_manager
from session_manager import aio
from session_manager.messages import user_message


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def per_second(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s"


def sync_rows(where: Path, n: int) -> list[tuple[str, str, str]]:
    with session_manager.open(where / "sync") as sm:
        sid = sm.call("session::create", {})["session_id"]
        start = time.perf_counter()
        for i in range(n):
            sm.call("session::append", {"session_id": sid, "message": user(str(i))})
        dict_append = time.perf_counter() - start
        start = time.perf_counter()
        for i in range(n):
            sm.append(sid, message=user_message(str(i), timestamp=1))
        typed_append = time.perf_counter() - start
        reads = max(1, n // 10)
        start = time.perf_counter()
        for _ in range(reads):
            sm.call("session::messages", {"session_id": sid, "limit": 50})
        dict_read = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(reads):
            sm.messages(sid, limit=50)
        typed_read = time.perf_counter() - start
    return [
        ("append", per_second(n, dict_append), per_second(n, typed_append)),
        ("messages (page of 50)", per_second(reads, dict_read), per_second(reads, typed_read)),
    ]


async def async_rows(where: Path, n: int) -> list[tuple[str, str]]:
    async with aio.open(where / "async") as asm:
        sid = (await asm.create()).session_id
        start = time.perf_counter()
        for i in range(n):
            await asm.append(sid, message=user_message(str(i), timestamp=1))
        sequential = time.perf_counter() - start
        start = time.perf_counter()
        per_task = n // 8

        async def worker() -> None:
            for i in range(per_task):
                await asm.append(sid, message=user_message(str(i), timestamp=1))

        await asyncio.gather(*(worker() for _ in range(8)))
        concurrent = time.perf_counter() - start
    return [("aio append, sequential awaits", per_second(n, sequential)),
            ("aio append, 8 coroutines", per_second(per_task * 8, concurrent))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        print(f"| measure (n={args.n}) | dict call() | typed method |")
        print("| --- | --- | --- |")
        for name, a, b in sync_rows(where, args.n):
            print(f"| {name} | {a} | {b} |")
        for name, rate in asyncio.run(async_rows(where, args.n)):
            print(f"| {name} | | {rate} |")


if __name__ == "__main__":
    main()
