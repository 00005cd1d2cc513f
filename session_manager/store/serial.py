"""Event delivery one batch at a time, in the order handed over, without ever waiting on an observer.

Observers are user code: one may call back into the store (a bot appending a
reply to the message it sees) or wait for another thread that does. A
delivery lock held while observers run turns either into a deadlock (the
other thread's call waits for the lock the observer's thread holds) or into
a reordering (a nested call delivering its events inside the delivery of the
event that caused it, so a later observer sees the reply before the prompt).

:class:`Serial` is the usual emitter loop instead: :meth:`Serial.submit`
queues a delivery; the thread that finds nobody delivering runs it, then
every delivery queued meanwhile (by any thread, its own observers' calls
too), in order; a thread that finds someone delivering (itself included)
leaves its delivery queued and returns at once. So deliveries never overlap,
keep the order they were handed over in, and nobody waits for an observer
but the thread running it. The price: a call whose events arrive while
another delivery runs returns before its observers have run (they run right
after, on the delivering thread).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

__all__ = ["Serial"]

log = logging.getLogger("session_manager.store.serial")


class Serial:
    """Deliveries run one at a time, in submission order, by whichever thread is free to."""

    def __init__(self, name: str = "session-manager-delivery") -> None:
        self._lock = threading.Lock()
        self._queue: deque[Callable[[], None]] = deque()
        self._running = False
        self._name = name
        self._wake = threading.Condition(self._lock)
        self._background: threading.Thread | None = None
        self._stopped = False
        self._turn = False  # hand_off gave the background thread a drain to run

    def submit(self, delivery: Callable[[], None]) -> None:
        """Queue ``delivery``; run it (and what queues meanwhile) here unless a delivery runs."""
        with self._lock:
            self._queue.append(delivery)
            if self._running:
                return
            self._running = True
        self._drain()

    def put(self, delivery: Callable[[], None]) -> None:
        """Queue ``delivery`` without running it (its place in the order taken now):
        :meth:`drain` or :meth:`hand_off` runs it."""
        with self._lock:
            self._queue.append(delivery)

    def drain(self) -> None:
        """Run what is queued here, unless a delivery runs (it runs them)."""
        with self._lock:
            if self._running or not self._queue:
                return
            self._running = True
        self._drain()

    def hand_off(self, delivery: Callable[[], None]) -> None:
        """Queue ``delivery`` to be run by a background thread of this serial unless a delivery
        runs: for a thread that must never run observers itself (a listener calls wait on)."""
        with self._lock:
            self._queue.append(delivery)
            if self._running or self._stopped:
                return
            self._running = self._turn = True  # the background thread's to drain
            if self._background is None:
                self._background = threading.Thread(target=self._serve, name=self._name, daemon=True)
                self._background.start()
            self._wake.notify()

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._turn and not self._stopped:
                    self._wake.wait()
                if self._stopped:
                    return
                self._turn = False
            self._drain(background=True)

    def _drain(self, background: bool = False) -> None:
        """Run queued deliveries until none is left (the caller set ``_running``)."""
        failure: BaseException | None = None
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    break
                delivery = self._queue.popleft()
            try:
                delivery()
            except BaseException as e:  # the rest still delivered; the first failure raised after
                if failure is None:
                    failure = e
                else:
                    log.exception("an event delivery failed")
        if failure is not None and not background:
            raise failure
        if failure is not None:
            log.error("an event delivery failed", exc_info=failure)

    def close(self) -> None:
        """Stop the background thread (what is queued is dropped)."""
        with self._lock:
            self._stopped = True
            self._wake.notify_all()
