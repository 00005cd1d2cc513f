"""The loaded sessions of a store, least recently used first, within a byte budget.

Each loaded session is charged an estimate of the memory it holds (see
:meth:`~._lazy.LazyEntries.footprint`; plain-dict states a flat estimate per
entry); once the total passes ``budget`` the least recently used sessions
that no one is writing are dropped. Dropping loses nothing: the log is the
truth, and a dropped session is read again (through its index) when next
touched. The store calls every method under its own lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator

from ._lazy import LazyEntries
from ._state import SessionState

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024
# What a session costs beyond its entries: the state object, meta, paths, locks.
SESSION_OVERHEAD = 2048
_PLAIN_ENTRY = 1024


def footprint(state: SessionState) -> int:
    entries = state.entries
    if isinstance(entries, LazyEntries):
        return SESSION_OVERHEAD + entries.footprint()
    return SESSION_OVERHEAD + _PLAIN_ENTRY * len(entries)


class StateCache(OrderedDict[str, SessionState]):
    def __init__(self, budget: int = DEFAULT_CACHE_BYTES) -> None:
        super().__init__()
        self.budget = budget
        self.total = 0
        self._charges: dict[str, int] = {}

    def charge(self, session_id: str, state: SessionState) -> None:
        """Re-estimate ``session_id`` (just used) and mark it most recent."""
        if self.get(session_id) is not state:
            return
        new = footprint(state)
        self.total += new - self._charges.get(session_id, 0)
        self._charges[session_id] = new
        self.move_to_end(session_id)

    def __delitem__(self, session_id: str) -> None:
        super().__delitem__(session_id)
        self.total -= self._charges.pop(session_id, 0)

    def pop(self, session_id: str, default: SessionState | None = None) -> SessionState | None:  # type: ignore[override]
        if session_id in self:
            state = self[session_id]
            del self[session_id]
            return state
        return default

    def over_budget(self) -> Iterator[str]:
        """Session ids to try dropping, oldest first, while over budget."""
        for session_id in list(self):
            if self.total <= self.budget:
                return
            yield session_id

    def evict(self, keep: str, drop: Callable[[str, SessionState], None]) -> None:
        """Drop least recently used sessions until within budget; never ``keep``
        nor a session whose lock is held (a write in progress)."""
        for session_id in self.over_budget():
            if session_id == keep:
                continue
            state = self[session_id]
            if not state.lock.acquire(blocking=False):
                continue
            try:
                drop(session_id, state)
                del self[session_id]
            finally:
                state.lock.release()
