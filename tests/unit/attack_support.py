"""Set-ups shared by the adapters' attack tests (ADK, LangGraph, transcripts): holding one
function's store calls while a task is cancelled twice, and writers in spawned processes."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections.abc import Callable
from typing import Any

import pytest


class Held:
    """Holds the calls of one function through ``owner.<attr>`` (a ``call(fid, payload)``: the
    manager's ``call``, the ADK service's ``_call``) until released; records, in ``landed``,
    that a held call returned. ``real`` is the call it replaced; :meth:`restore` puts it back."""

    def __init__(self, owner: Any, function_id: str, attr: str = "call") -> None:
        self.entered, self.release, self.landed = threading.Event(), threading.Event(), threading.Event()
        self.real = real = getattr(owner, attr)

        def call(fid: str, payload: Any = None) -> Any:
            if fid != function_id or self.release.is_set():
                return real(fid, payload)
            self.entered.set()
            self.release.wait(30)
            out = real(fid, payload)
            self.landed.set()
            return out

        setattr(owner, attr, call)
        self._owner, self._attr = owner, attr

    def restore(self) -> None:
        self.release.set()
        setattr(self._owner, self._attr, self.real)


async def cancel_twice_while_held(held: Any, start: Callable[[], Any], called: str | None = None) -> list[bool]:
    """Start the call, cancel it twice while its write is held (``held``: a :class:`Held` or
    anything with its ``entered`` / ``release`` / ``landed`` events), then release the write;
    fails unless the task ends with CancelledError. Gives, once per time the task finished,
    whether the held write had landed by then. With ``called``: fails first when the held
    function (so named) is not called within 30 s."""
    task = asyncio.ensure_future(start())
    landed_at_end: list[bool] = []
    task.add_done_callback(lambda _: landed_at_end.append(held.landed.is_set()))
    entered = await asyncio.to_thread(held.entered.wait, 30)
    if called is not None:
        assert entered, f"{called} was never called"
    for _ in range(2):
        task.cancel()
        for _ in range(20):  # the first cancellation is taken in; the task now waits for the write
            await asyncio.sleep(0)
    held.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    return landed_at_end


def run_spawned(target: Callable[..., None], args: list[tuple[Any, ...]]) -> list[int | None]:
    """Starts one spawned process per ``args`` tuple, running ``target(*args, start)`` with one
    shared ``start`` Event, sets the Event once all have started (so their work overlaps), joins
    each for 180 s at most and returns their exit codes (``None``: still running)."""
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    procs = [context.Process(target=target, args=(*a, start)) for a in args]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(180)
    return [p.exitcode for p in procs]
