"""Per-call tunables (list limits, attachment and request caps) behind an atomic swap.

Handlers read the current snapshot on every call, so a configuration reload
applies to the next call without re-registering anything.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 500
MAX_ATTACHMENT_BYTES = 50 * 1024 * 1024
# An upload's base64 data up to max_attachment_bytes is not counted against it (see admission.admit).
MAX_REQUEST_BYTES = 64 * 1024 * 1024
MAX_BATCH_ENTRIES = 10_000


@dataclass(frozen=True)
class Limits:
    default_list_limit: int = DEFAULT_LIST_LIMIT
    max_list_limit: int = MAX_LIST_LIMIT
    max_attachment_bytes: int = MAX_ATTACHMENT_BYTES
    max_request_bytes: int = MAX_REQUEST_BYTES  # UTF-8 bytes of one mutating request's JSON
    max_batch_entries: int = MAX_BATCH_ENTRIES  # entries of one batch (append-many, ...)

    def clamp(self, limit: int | None) -> int:
        """A requested page size clamped to ``[1, max_list_limit]``."""
        chosen = self.default_list_limit if limit is None else limit
        return max(1, min(chosen, self.max_list_limit))


class LimitsCell:
    """Holds the live :class:`Limits`; ``get`` is lock-free, ``set`` swaps whole."""

    def __init__(self, limits: Limits | None = None) -> None:
        # ``current`` is what get() returns, read as an attribute on the call path (no call).
        self.current = limits or Limits()
        self._lock = threading.Lock()

    def get(self) -> Limits:
        return self.current

    def set(self, limits: Limits) -> None:
        with self._lock:
            self.current = limits
