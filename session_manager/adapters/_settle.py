"""Cancellation that waits for the write: an adapter's async mutation runs its
synchronous half on a worker thread, which cancelling the awaiting task
cannot stop. Re-raising ``CancelledError`` at once would tell the caller the
write did not happen while it lands a moment later; :func:`settled` waits
until the thread has finished (written or failed), then re-raises the
cancellation, as the Agents SDK's own sessions do."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["settled"]

T = TypeVar("T")


async def settled(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` to its end even when the caller is cancelled (once or
    repeatedly); then raise the first cancellation, or return its outcome."""
    task = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as e:
            cancelled = cancelled or e
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what the caller asked to see
        raise cancelled
    return task.result()
