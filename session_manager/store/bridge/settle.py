"""Settling a bridged mutation whose answer was lost, in bounded time.

A call to the main that times out (or whose link drops) may have been
applied there: only the answer is missing. Answering ``session/storage``
then would be wrong (the mutation happened, and its events would never fire
anywhere: the caller's retry is an idempotent replay that fires nothing).
Every bridged mutation (a commit: append, append-many, create, fork,
update-message, meta-only writes; a session delete; an attachment put or
delete) settles it here, the same way:

1. **Replay** the call once: the main never applies a mutation twice (a
   commit's entries or compare-and-set refuse the repeat; a delete carries
   the caller's ``op``, which the main remembers), and the replay is
   serialized with the first one under the main's session lock. Applied (by
   either) means applied.
2. If the replay is refused or its answer is lost too, **read back** what the
   main holds: the mutation found there means applied.
3. Otherwise the outcome is still unknown: the first failure stands
   (``session/storage``), never a conflict (whose re-decision could apply
   the mutation a second time).

Bounded: the whole settle takes at most :data:`SETTLE_BUDGET` x the bridge's
``timeout_ms`` (every call in it is sent with what is left of that budget,
the replay with at most :data:`REPLAY_SHARE` of it, so the read-back always
has time), so a call whose first answer timed out ends within 2.25x
``timeout_ms`` plus its own reads.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from ...errors import StoreError, Unavailable

__all__ = ["REPLAY_SHARE", "SETTLE_BUDGET", "Deadlines", "settle"]

SETTLE_BUDGET = 1.25  # x timeout_ms, after the lost answer
REPLAY_SHARE = 0.6  # of the budget, at most, for the replay; the rest is the read-back's

T = TypeVar("T")


class Deadlines:
    """The deadline, per thread, that a settle puts on the calls it makes."""

    def __init__(self) -> None:
        self._local = threading.local()

    def timeout_ms(self, default_ms: int, function_id: str) -> int:
        """The timeout of the next call: ``default_ms``, or less when a deadline is set."""
        deadline: float | None = getattr(self._local, "deadline", None)
        if deadline is None:
            return default_ms
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            raise Unavailable(f"bridge {function_id} not sent: the time to settle a lost answer is spent",
                              code="timeout")
        return min(default_ms, left)

    @contextlib.contextmanager
    def within(self, seconds: float) -> Iterator[None]:
        """Calls made inside end within ``seconds`` (and within any outer deadline)."""
        outer: float | None = getattr(self._local, "deadline", None)
        deadline = time.monotonic() + seconds
        self._local.deadline = deadline if outer is None else min(deadline, outer)
        try:
            yield
        finally:
            self._local.deadline = outer


def settle(deadlines: Deadlines, timeout_ms: int, lost: Unavailable, replay: Callable[[], T | None],
           read_back: Callable[[], T | None]) -> T:
    """The outcome of a mutation whose first answer was ``lost`` (see the
    module doc). ``replay`` sends it again: its outcome, or ``None`` when the
    main refused the repeat; ``read_back`` reads the main: the outcome if
    the mutation is there, else ``None``."""
    budget = SETTLE_BUDGET * timeout_ms / 1000
    with deadlines.within(budget):
        try:
            with deadlines.within(budget * REPLAY_SHARE):
                outcome = replay()
        except StoreError:
            outcome = None  # its answer lost too, or an error: what the main holds decides
        if outcome is None:
            try:
                outcome = read_back()
            except StoreError:
                raise lost from None
    if outcome is None:
        raise lost
    return outcome
