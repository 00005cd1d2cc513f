"""The retention sweep both hosts run: sessions not updated for ``idle_days``
(restricted to ``statuses`` when given) are deleted, each firing
``session::on-deleted``, at most once a minute of the host's clock.

The sweeper is host-agnostic: the host hands it ``run_batch``, which deletes
one batch through the service and delivers its events the host's way (the
embedded host to its observers, the worker through its emitter or its
main). A daemon thread looks every ``poll_s`` seconds whether a sweep is
due; tests call :meth:`RetentionSweeper.tick` with a
:class:`~session_manager.clock.ManualClock` instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._wire.models import SessionStatus
from .._wire.validation import describe
from ..clock import Clock
from ..errors import SessionError, StoreError

__all__ = ["BATCH", "INTERVAL_MS", "RetentionConfig", "RetentionPolicy", "RetentionSweeper", "retention_policy"]

log = logging.getLogger("session_manager.retention")

INTERVAL_MS = 60_000  # a sweep at most once a minute
BATCH = 1000  # sessions per batch (one purge call's maximum)
POLL_S = 5.0


@dataclass(frozen=True)
class RetentionPolicy:
    """Delete sessions idle for ``idle_days`` days (only those in ``statuses`` when given)."""

    idle_days: int
    statuses: tuple[str, ...] | None = None


class RetentionConfig(BaseModel):
    """The ``retention`` configuration value (the worker's key and ``open(retention=...)``)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    idle_days: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        description="Delete sessions not updated for this many days.")
    statuses: Annotated[list[SessionStatus], Field(min_length=1)] | None = Field(
        default=None, description="Only sessions in one of these statuses (default: any status).")

    def policy(self) -> RetentionPolicy:
        return RetentionPolicy(self.idle_days, tuple(self.statuses) if self.statuses is not None else None)


def retention_policy(value: Any) -> RetentionPolicy | None:
    """The policy of a ``retention`` value given in Python (None: off); ``ValueError`` names what is wrong."""
    if value is None:
        return None
    try:
        return RetentionConfig.model_validate(value).policy()
    except ValidationError as e:
        raise ValueError(f"retention: {describe(e)}") from None


# Deletes one batch under ``policy`` (at most ``limit`` sessions) and delivers
# its events; returns how many it deleted and whether more remain.
BatchRunner = Callable[[RetentionPolicy, int], tuple[int, bool]]


class RetentionSweeper:
    """Runs the sweep when due; ``policy`` None turns it off (the default)."""

    def __init__(self, run_batch: BatchRunner, clock: Clock, policy: RetentionPolicy | None = None,
                 *, poll_s: float | None = None, thread: bool = True) -> None:
        self._run_batch = run_batch
        self._clock = clock
        self._policy = policy
        self._poll_s = poll_s if poll_s is not None else POLL_S  # read now: tests set the module's
        self._sweeping = threading.Lock()  # one sweep at a time
        self._lock = threading.Lock()  # the status (read while a sweep runs)
        self._last_at: int | None = None
        self._last_count = 0
        self._last_error: str | None = None
        self._stop = threading.Event()
        self._want_thread = thread
        self._thread: threading.Thread | None = None
        if policy is not None:
            self._start()

    @property
    def policy(self) -> RetentionPolicy | None:
        return self._policy

    def set_policy(self, policy: RetentionPolicy | None) -> None:
        """Hot reload: the next due tick sweeps under ``policy`` (None: off)."""
        self._policy = policy
        if policy is not None:
            self._start()

    def _start(self) -> None:
        if not self._want_thread or self._thread is not None or self._stop.is_set():
            return
        self._thread = threading.Thread(target=self._loop, name="session-manager-retention", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._poll_s):
            self.tick()

    def tick(self) -> int | None:
        """Sweep if a policy is set and a minute has passed since the last sweep
        began (by the clock); the number deleted, or None when nothing ran."""
        with self._sweeping:
            policy = self._policy
            now = self._clock.now_ms()
            if policy is None or self._stop.is_set():
                return None
            if self._last_at is not None and now - self._last_at < INTERVAL_MS:
                return None
            count, error = 0, None
            try:
                while True:
                    deleted, more = self._run_batch(policy, BATCH)
                    count += deleted
                    if not more or not deleted:  # nothing deleted: what is left is not ours to take now
                        break
            except (SessionError, StoreError) as e:
                error = str(e)
                log.warning("retention sweep stopped after %d sessions: %s", count, e)
            with self._lock:
                self._last_at, self._last_count, self._last_error = now, count, error
            if count:
                log.info("retention sweep: %d sessions idle for %d days deleted", count, policy.idle_days)
            return count

    def status(self) -> dict[str, Any]:
        """What ``session::config-status`` reports about the sweep."""
        with self._lock:
            out: dict[str, Any] = {"retention_last_sweep_at": self._last_at,
                                   "retention_last_swept": self._last_count}
            if self._last_error is not None:
                out["retention_last_error"] = self._last_error
            return out

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the thread (a sweep in progress finishes its batch first)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        with self._sweeping:  # a tick run on another thread (tests) ends before the store closes
            pass
