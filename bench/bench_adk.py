"""ADK's session service through our adapter beside ADK's own DatabaseSessionService (not a test).

Run: ``python bench/bench_adk.py [--events N] [--reads M] [--rounds R]``.
Each round, on a fresh store of each kind: ``append_event`` of N text events
(each with a one-key state delta) to one session, then ``get_session`` of a
session of 100 events M times. Ours: ``SessionManagerSessionService`` over
``session_manager.open(dir)`` (fs, ``durability: flush``). Theirs: ADK's
``DatabaseSessionService("sqlite+aiosqlite:///file")`` (needs sqlalchemy,
in the ``test`` extra). Both in this process and event loop, rounds
interleaved (the first contender alternating); figures are medians with min
and max. The target (issue 29): append >= 5x ADK's service.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.genai import types

import session_manager
from session_manager.adapters.adk import SessionManagerSessionService

Opener = Callable[[Path], AbstractAsyncContextManager[Any]]
TEXT = "Will it rain in Paris tomorrow afternoon? " * 3  # ~130 characters, a short chat turn


def event(i: int) -> Event:
    return Event(invocation_id=f"inv-{i}", author="user" if i % 2 == 0 else "forecaster",
                 content=types.Content(role="user", parts=[types.Part(text=f"{TEXT}#{i}")]),
                 actions=EventActions(state_delta={"turn": i}))


@asynccontextmanager
async def ours(where: Path) -> AsyncIterator[Any]:
    with session_manager.open(where / "ours") as sm:
        yield SessionManagerSessionService(sm)


@asynccontextmanager
async def adk_database(where: Path) -> AsyncIterator[Any]:
    from google.adk.sessions.database_session_service import DatabaseSessionService

    service = DatabaseSessionService(f"sqlite+aiosqlite:///{where / 'adk.db'}")
    try:
        yield service
    finally:
        await service.close()


async def one_round(open_service: Opener, where: Path, events: int, reads: int) -> tuple[float, float]:
    """(appends/s, get_session/s) of one fresh store."""
    async with open_service(where) as svc:
        session = await svc.create_session(app_name="bench", user_id="u", session_id="append")
        start = time.perf_counter()
        for i in range(events):
            await svc.append_event(session, event(i))
        appends = events / (time.perf_counter() - start)
        read = await svc.create_session(app_name="bench", user_id="u", session_id="read")
        for i in range(100):
            await svc.append_event(read, event(i))
        start = time.perf_counter()
        for _ in range(reads):
            got = await svc.get_session(app_name="bench", user_id="u", session_id="read")
            assert got is not None and len(got.events) == 100
        gets = reads / (time.perf_counter() - start)
    return appends, gets


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):>9,.0f}/s  (min {min(values):,.0f}, max {max(values):,.0f})"


async def main(events: int, reads: int, rounds: int) -> None:
    contenders: dict[str, Opener] = {"ours (fs)": ours, "ADK DatabaseSessionService (sqlite)": adk_database}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
    for r in range(rounds):
        order = list(contenders) if r % 2 == 0 else list(reversed(contenders))
        for name in order:
            with tempfile.TemporaryDirectory() as tmp:
                results[name].append(await one_round(contenders[name], Path(tmp), events, reads))
    print(f"ADK session service: {events} append_event, {reads} get_session of 100 events, {rounds} rounds")
    for name, rows in results.items():
        print(f"  {name:<38} append_event {summary([a for a, _ in rows])}")
        print(f"  {'':<38} get_session  {summary([g for _, g in rows])}")
    ours_append = statistics.median(a for a, _ in results["ours (fs)"])
    theirs_append = statistics.median(a for a, _ in results["ADK DatabaseSessionService (sqlite)"])
    ours_get = statistics.median(g for _, g in results["ours (fs)"])
    theirs_get = statistics.median(g for _, g in results["ADK DatabaseSessionService (sqlite)"])
    ratio = ours_append / theirs_append
    print(f"  append_event: {ratio:.1f}x ADK's service (target >= 5x: {'met' if ratio >= 5 else 'MISSED'})")
    print(f"  get_session:  {ours_get / theirs_get:.1f}x ADK's service (no target)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--reads", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.reads, args.rounds))
