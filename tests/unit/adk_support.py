"""The stores the ADK session service's tests run over: fs, fs through the aio
manager, sqlite, and postgres (skipped, or failed on CI, when no server answers).

``Backend.run(scenario)`` opens the store, builds the service, awaits
``scenario(service)`` and closes the store: two ``run`` calls are a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests import pg_support

T = TypeVar("T")
# The postgres runs carry the postgres marker: CI's fresh lane (no server) leaves them to the lane with one.
BACKENDS = ["fs", "aio", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


class Backend:
    """One store kind, reopened by every :meth:`run`."""

    def __init__(self, kind: str, data_dir: Path, schema: str | None) -> None:
        self.kind = kind
        self.data_dir = data_dir
        self.schema = schema

    def open_sync(self) -> Any:
        """An open synchronous manager on this backend's data (the caller closes it)."""
        import session_manager

        if self.schema is not None:
            return session_manager.open(store=pg_support.open_store(self.schema))
        if self.kind == "sqlite":
            return session_manager.open(f"sqlite:///{self.data_dir.resolve()}.db")
        return session_manager.open(self.data_dir)

    @contextlib.asynccontextmanager
    async def manager(self) -> AsyncIterator[Any]:
        if self.kind == "aio":
            from session_manager import aio

            async with aio.open(self.data_dir) as asm:
                yield asm
            return
        sm = self.open_sync()
        try:
            yield sm
        finally:
            sm.close()

    def run(self, scenario: Callable[[Any], Awaitable[T]]) -> T:
        from session_manager.adapters.adk import SessionManagerSessionService

        async def main() -> T:
            async with self.manager() as sm:
                return await scenario(SessionManagerSessionService(sm))

        return asyncio.run(main())


@contextlib.contextmanager
def backend(kind: str, tmp_path: Path) -> Iterator[Backend]:
    if kind == "postgres":
        with pg_support.schema() as name:
            yield Backend(kind, tmp_path / "data", name)
        return
    yield Backend(kind, tmp_path / "data", None)


def append_from_process(schema: str, worker: int, count: int, start: Any) -> None:
    """A separate process's writer: ``count`` events on the shared session, each with a
    session, a ``user:`` and an ``app:`` key of its own (the concurrency test's child)."""
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.genai import types

    from session_manager.adapters.adk import SessionManagerSessionService

    async def main(svc: Any) -> None:
        session = await svc.get_session(app_name="race", user_id="u", session_id="shared")
        start.wait()
        for j in range(count):
            state = {f"k{worker}_{j}": j, f"user:u{worker}_{j}": j, f"app:a{worker}_{j}": j}
            await svc.append_event(session, Event(
                invocation_id=f"w{worker}", author="user", actions=EventActions(state_delta=state),
                content=types.Content(role="user", parts=[types.Part(text=f"w{worker} #{j}")])))

    sm = session_manager_open(schema)
    try:
        asyncio.run(main(SessionManagerSessionService(sm)))
    finally:
        sm.close()


def session_manager_open(schema: str) -> Any:
    import session_manager

    return session_manager.open(store=pg_support.open_store(schema))


@pytest.fixture(name="store", params=BACKENDS)
def store_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each ADK test over every backend (a test module imports this to use ``store``)."""
    with backend(request.param, tmp_path) as b:
        yield b
