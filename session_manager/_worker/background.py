"""One background thread that runs jobs in the order they were submitted.

Bridge publishing uses it so that a slow or failing remote call never
delays (or fails) the mutation that produced it; event delivery uses the
same thread discipline through :class:`~.event_queue.EventQueue`. A worker
may be bounded: :meth:`SerialWorker.submit` then waits for room at most
``timeout_s`` (backpressure) and reports whether the job was taken.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("session_manager.background")

Job = Callable[[], None]


class SerialWorker:
    """Runs submitted jobs one at a time, in order, on a daemon thread;
    ``bound`` (if set) caps the jobs waiting to run."""

    def __init__(self, name: str, bound: int | None = None) -> None:
        self.bound = bound
        self._jobs: collections.deque[Job | None] = collections.deque()
        self._unfinished = 0
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Job, *, timeout_s: float | None = None) -> bool:
        """Queue ``job``; when bounded and full, wait for room up to
        ``timeout_s`` (``None``: as long as it takes). False: not queued."""
        with self._cond:
            if self.bound is not None and not self._cond.wait_for(
                    lambda: len(self._jobs) < (self.bound or 0), timeout=timeout_s):
                return False
            self._jobs.append(job)
            self._unfinished += 1
            self._cond.notify_all()
            return True

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._jobs))
                job = self._jobs.popleft()
                self._cond.notify_all()  # room for a waiting submit
            try:
                if job is None:
                    return
                job()
            except Exception:  # a job reports its own failures; this is the last guard
                log.warning("background job failed", exc_info=True)
            finally:
                with self._cond:
                    self._unfinished -= 1
                    self._cond.notify_all()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every job submitted so far has run; False if
        ``timeout_s`` passed first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self._unfinished:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def close(self, timeout_s: float = 10.0) -> None:
        """Run what is queued, then stop the thread."""
        if self._thread.is_alive():
            with self._cond:
                self._jobs.append(None)  # past the bound: closing never waits for room
                self._unfinished += 1
                self._cond.notify_all()
            self._thread.join(timeout=timeout_s)
