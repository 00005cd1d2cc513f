"""One rule for both hosts' shutdown: a store is released only once no call runs on it.

A host counts each call in flight here; :meth:`CallGate.close` refuses calls
from then on and releases the store (its fs data_dir lock) once the calls
in flight have ended. A bounded close may stop *waiting* (stop answering),
never release early: the release then runs when the last call leaves, so a
commit still in flight never lands in a data_dir another owner has opened.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["CallGate"]


class CallGate:
    """Calls in flight and the one release that follows them."""

    def __init__(self) -> None:
        # One item per call in flight (list append and pop are atomic: cheaper than taking a
        # lock twice a call). A call counts itself before it reads ``closed``; close() sets
        # ``closed`` before it counts, so either the call sees the gate closed or close() sees it.
        self._calls: list[None] = []
        self._idle = threading.Condition(threading.Lock())
        self.closed = False
        self._released = False
        self._pending: Callable[[], None] | None = None  # the release, once close() stopped waiting

    def __len__(self) -> int:
        return len(self._calls)

    def enter(self) -> bool:
        """Count a call in; False (and not counted) once the gate is closed."""
        self._calls.append(None)
        if self.closed:
            self.leave()
            return False
        return True

    def leave(self) -> None:
        """Count a call out; the last one out of a closed gate runs a release close() left behind."""
        self._calls.pop()
        if self.closed:
            self.left()

    def left(self) -> None:
        """:meth:`leave`'s part once the gate is closed (a caller that counts itself out
        inline calls it when it sees ``closed``)."""
        calls = self._calls
        release = None
        with self._idle:
            if not calls and self._pending is not None:
                release, self._pending = self._pending, None
            self._idle.notify_all()
        if release is not None:
            self._release(release)

    def close(self, release: Callable[[], None], *, own: int = 0, timeout_s: float | None = None) -> bool:
        """Refuse new calls, wait (at most ``timeout_s``) until no more than ``own`` calls run
        (the closer's own, when it closes from inside a call), then run ``release`` once.

        True once released. False when the wait gave up: ``release`` then runs when the last
        call in flight leaves, never before. A second closer waits (up to ``timeout_s``) for the
        first one's release, unless it closes from inside a call."""
        with self._idle:
            if self.closed:
                if own == 0:
                    self._idle.wait_for(lambda: self._released, timeout=timeout_s)
                return self._released
            self.closed = True
            drained = self._idle.wait_for(lambda: len(self._calls) <= own, timeout=timeout_s)
            if not drained and self._calls:
                self._pending = release  # the last call out releases (checked under this lock)
                return False
        self._release(release)
        return True

    def _release(self, release: Callable[[], None]) -> None:
        try:
            release()
        finally:
            with self._idle:
                self._released = True
                self._idle.notify_all()
