"""Bounded re-decision of mutations refused by compare-and-set.

A mutation reads, decides and commits; when its commit is refused as stale
(:class:`~session_manager.errors.Conflict`, another writer got there
first) the whole function runs again on fresh state, so the caller gets the
answer a single instance would have given. After :data:`MAX_ATTEMPTS` the
call answers ``session/storage`` naming the contention.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from ..errors import STORAGE, Conflict, SessionError
from .stats import Stats

log = logging.getLogger("session_manager.contention")

MAX_ATTEMPTS = 20
BACKOFF_CAP_S = 0.01  # jitter between attempts grows to this, so two writers stop colliding in lockstep


class HasStats(Protocol):
    stats: Stats


S = TypeVar("S", bound=HasStats)
Q = TypeVar("Q")
R = TypeVar("R")


def retry_conflicts(mutation: Callable[[S, Q], R]) -> Callable[[S, Q], R]:
    """Re-run ``mutation(core, request)`` on a conflict, at most MAX_ATTEMPTS times."""

    @functools.wraps(mutation)
    def run(core: S, request: Q) -> R:
        try:
            return mutation(core, request)
        except Conflict as e:
            return retry_after(mutation, core, request, e)

    return run


def retry_after(mutation: Callable[[S, Q], R], core: S, request: Q, conflict: Conflict) -> R:
    """:func:`retry_conflicts`' attempts after the first, which raised ``conflict`` (a caller
    that makes the first attempt itself, without the wrapper's frame: ``SessionService.append``)."""
    e = conflict
    attempt = 1
    while True:
        total = core.stats.add("cas_retries")
        if attempt == MAX_ATTEMPTS:
            log.warning("%s gave up after %d conflicting attempts (%d retries so far): %s",
                        mutation.__name__, attempt, total, e)
            raise SessionError(STORAGE, f"contention: {MAX_ATTEMPTS} attempts conflicted with other "
                                        f"writers of this session (last: {e})") from None
        log.debug("%s conflicted (attempt %d): %s", mutation.__name__, attempt, e)
        time.sleep(random.uniform(0, min(BACKOFF_CAP_S, 0.0005 * attempt)))
        attempt += 1
        try:
            return mutation(core, request)
        except Conflict as again:
            e = again
