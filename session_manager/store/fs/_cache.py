"""The loaded sessions of a store, least recently used first, within a byte budget.

Each loaded session is charged an estimate of the memory it holds (see
:func:`footprint`); once the total passes ``budget`` the least recently used
sessions that no one is writing are dropped. Dropping loses nothing: the log
is the truth, and a dropped session is read again (through its index) when
next touched. The store calls every method under its own lock.

A read decodes bodies after the store handed the state out, so a session is
re-charged on the next touch of any session (:meth:`StateCache.touch`): the
estimate lags only by what the calls in flight decoded. A commit does not
touch the state it writes: it charges it, settling the others with it, once
written (:meth:`StateCache.committed`), then evicts; the read that decides a
commit leaves its session's charge to that commit (:meth:`StateCache.reserve`),
so a mutation charges it once. Eviction walks from
the oldest end and stops as soon as the total fits, so a touch costs
O(sessions dropped), never O(sessions cached).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from .._core.state import SessionState
from ._lazy import LazyEntries

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024
# What a loaded session holds beyond its entries, measured with tracemalloc
# (tests/unit/test_memory_bound.py): the state and its lock, the lazy
# mapping's arrays and dicts, the meta dict, the cache's own slots.
SESSION_OVERHEAD = 3072
_PLAIN_ENTRY = 1024
# The stated bound (README, tests/unit/test_memory_bound.py, bench/bench_memory.py):
# after touching any number of sessions, what a writable store holds is at most
#   cache_bytes + FIXED_OVERHEAD + sessions * CATALOG_PER_META_BYTE * (a meta's JSON bytes)
# plus the sessions in use right then. FIXED_OVERHEAD covers what does not grow with
# the sessions: the descriptor LRU (256 kept files, ~1.4 KiB each), the service's lock
# stripes, the budget's own bookkeeping. The catalog (every session's last meta, for
# ``list``) is outside the budget: measured 4.2-4.5x the meta's JSON, sort keys included,
# ~5x with the sessions index's per-log keys the cold list keeps.
FIXED_OVERHEAD = 4 * 1024 * 1024
CATALOG_PER_META_BYTE = 6
# Held for a moment, per log, by the first list of a data_dir without a sessions index (one
# the reference wrote): its stat result, its meta decoded and the index row about to be written.
# Measured ~2.7 KiB beside the catalog (tests/unit/test_memory_bound.py); gone once it is written.
SCAN_PER_LOG = 4096

Drop = Callable[[str, SessionState], None]


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
        self._pending: dict[str, SessionState] = {}

    def charge(self, session_id: str, state: SessionState) -> None:
        """Re-estimate ``session_id`` (just used) and mark it most recent."""
        if self.get(session_id) is not state:
            return
        new = footprint(state)
        self.total += new - self._charges.get(session_id, 0)
        self._charges[session_id] = new
        self.move_to_end(session_id)

    def committed(self, session_id: str, state: SessionState, drop: Drop) -> None:
        """A commit wrote to ``session_id`` (just used): settle every session
        handed out since its last charge, this one with them (the bodies just
        written count), mark it most recent, and evict. It stays pending, as a
        touch leaves it: a reader handed it before the write may still be decoding."""
        if self.get(session_id) is state:
            pending = self._pending  # (:meth:`_settle_others` and :meth:`charge`, inline: every commit)
            pending.pop(session_id, None)
            if pending:
                self.settle()  # the others; it is charged here, once
            new = footprint(state)
            charges = self._charges
            self.total += new - charges.get(session_id, 0)
            charges[session_id] = new
            self.move_to_end(session_id)
            pending[session_id] = state
        if self.total > self.budget:
            self.evict(session_id, drop)

    def reserve(self, session_id: str, state: SessionState, drop: Drop) -> None:
        """``state`` (cached, loaded) is handed to the read a commit follows:
        :meth:`touch`, but its own charge is left to that commit
        (:meth:`committed`), so a mutation pays one. It stays pending, so a read
        that ends without a commit is charged at the next touch, as any other."""
        pending = self._pending  # (:meth:`_settle_others`, inline: every commit's read)
        pending.pop(session_id, None)
        if pending:
            self.settle()
        self.move_to_end(session_id)
        pending[session_id] = state
        if self.total > self.budget:
            self.evict(session_id, drop)

    def touch(self, session_id: str, state: SessionState, drop: Drop) -> None:
        """``state`` (cached, loaded) is handed out again: charge what the
        reads since the last touch decoded, mark it most recent, and evict."""
        self.settle()
        if self.get(session_id) is not state:
            return  # dropped meanwhile by another thread's eviction
        self.move_to_end(session_id)
        self._pending[session_id] = state  # charged at the next touch (its reads are done by then)
        if self.total > self.budget:
            self.evict(session_id, drop)

    def settle(self) -> None:
        """Charge every session handed out since its last charge."""
        pending = self._pending
        if not pending:
            return
        for session_id, state in pending.items():
            if self.get(session_id) is state:
                new = footprint(state)
                self.total += new - self._charges.get(session_id, 0)
                self._charges[session_id] = new
        pending.clear()

    def __delitem__(self, session_id: str) -> None:
        super().__delitem__(session_id)
        self.total -= self._charges.pop(session_id, 0)
        self._pending.pop(session_id, None)

    def pop(self, session_id: str, default: SessionState | None = None) -> SessionState | None:  # type: ignore[override]
        if session_id in self:
            state = self[session_id]
            del self[session_id]
            return state
        return default

    def evict(self, keep: str, drop: Drop) -> None:
        """Drop least recently used sessions until within budget; never ``keep``
        nor a session whose lock is held (a write in progress)."""
        if self.total <= self.budget:
            return
        victims: list[tuple[str, SessionState]] = []
        excess = self.total - self.budget
        # Only the oldest few are looked at: enough to cover the excess, plus
        # any skipped because they are in use.
        for session_id, state in self.items():
            if excess <= 0:
                break
            if session_id != keep:
                victims.append((session_id, state))
                excess -= self._charges.get(session_id, 0)
        for session_id, state in victims:
            if self.total <= self.budget:
                return
            if not state.lock.acquire(blocking=False):
                continue
            try:
                drop(session_id, state)
                if self.get(session_id) is state:
                    del self[session_id]
            finally:
                state.lock.release()
