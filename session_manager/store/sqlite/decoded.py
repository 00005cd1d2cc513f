"""Entries decoded from their stored JSON text, cached by that text (the
datastore holds one cache; the path windows and reads share it)."""

from __future__ import annotations

import threading

from .._core.codec import loads
from ..base import Entry

__all__ = ["DECODED_BYTES", "Decoded"]

DECODED_BYTES = 8 << 20  # body text the decoded cache holds before it starts over


class Decoded:
    """Entries decoded from their stored JSON text, keyed by that text: a transcript
    read again (a chat view polling its tail) is not decoded again. Keyed by the
    text itself, so a new revision written by any process is a miss, never stale.
    The entries are shared, as the fs and memory stores share theirs: the service
    never changes an entry it reads, and every response is a copy."""

    def __init__(self, budget: int = DECODED_BYTES) -> None:
        self._budget = budget
        self._held = 0
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}

    def __call__(self, body: str) -> Entry:
        entry = self._entries.get(body)
        if entry is None:
            entry = loads(body.encode("utf-8"))
            with self._lock:
                if self._held + len(body) > self._budget:  # start over: O(1) a read, no LRU upkeep
                    self._entries, self._held = {}, 0
                self._entries[body] = entry
                self._held += len(body)
        return entry

    def rows(self, rows: list[tuple[str]]) -> list[Entry]:
        """The entries of ``rows`` (each a body), in order: a window's read, the hits
        looked up here rather than one call each."""
        get, entries = self._entries.get, []
        for (body,) in rows:
            entry = get(body)
            entries.append(entry if entry is not None else self(body))
        return entries
