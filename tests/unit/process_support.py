"""Child processes for the multi-process attack tests."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any


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
