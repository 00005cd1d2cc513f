"""The versions of sessions the cache dropped (:meth:`SessionState.version`), kept so a session
loaded again continues its own: an adapter's index derived at it (the LangGraph saver's token)
stays current across an eviction instead of being derived again from every entry. Exact for a
writable store: every write of a session in this process goes through its cached state (loaded
first), and a deleted session's is forgotten. A read-only store keeps none (another process
writes the logs meanwhile)."""

from __future__ import annotations

import threading

from .._core.state import SessionState

__all__ = ["EvictedVersions"]

KEPT = 65_536  # sessions whose version is kept once dropped (past it, the oldest: derived again once)


class EvictedVersions:
    def __init__(self) -> None:
        self._kept: dict[str, tuple[int, int]] = {}  # (insertion order: the oldest first)
        self._guard = threading.Lock()

    def dropped(self, session_id: str, state: SessionState) -> None:
        with self._guard:
            kept = self._kept
            kept.pop(session_id, None)
            kept[session_id] = state.version()
            if len(kept) > KEPT:
                del kept[next(iter(kept))]

    def loaded(self, session_id: str, state: SessionState) -> None:
        """``state`` was just filled from the log: it continues the version it was dropped at."""
        with self._guard:
            found = self._kept.pop(session_id, None)
        if found is not None:
            state.born, state.writes = found

    def forget(self, session_id: str) -> None:
        with self._guard:
            self._kept.pop(session_id, None)
