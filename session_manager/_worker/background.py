"""One background thread that runs jobs in the order they were submitted.

Event delivery and bridge publishing use it so that a slow or failing
remote call never delays (or fails) the mutation that produced it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger("session_manager.background")

Job = Callable[[], None]


class SerialWorker:
    """Runs submitted jobs one at a time, in order, on a daemon thread."""

    def __init__(self, name: str) -> None:
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        self._queue.put(job)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                job()
            except Exception:  # a job reports its own failures; this is the last guard
                log.warning("background job failed", exc_info=True)
            finally:
                self._queue.task_done()

    def flush(self) -> None:
        """Wait until every job submitted so far has run."""
        self._queue.join()

    def close(self, timeout_s: float = 10.0) -> None:
        """Run what is queued, then stop the thread."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout=timeout_s)
