"""Counters of contention and background work, one set per host.

``session::config-status`` reports them beside the reload outcome and the
background paths log when they move, so an operator sees compare-and-set
retries, coalesced or dropped events and publish backpressure.
"""

from __future__ import annotations

import threading

FIELDS = ("cas_retries", "events_coalesced", "events_dropped", "publish_timeouts")


class Stats:
    """Thread-safe monotonic counters named by :data:`FIELDS`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(FIELDS, 0)

    def add(self, name: str, n: int = 1) -> int:
        """Add ``n`` to counter ``name``; returns the new total."""
        with self._lock:
            self._counts[name] += n
            return self._counts[name]

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)
