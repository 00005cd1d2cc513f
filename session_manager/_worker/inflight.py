"""The worker's calls in flight, per runtime: who may still use a swapped-out store.

Every call takes the live :class:`~session_manager._worker.runtime.Runtime`
through :meth:`InFlight.call` (read per call, so a configuration reload needs no
re-registration). A reload swaps the runtime (:meth:`InFlight.swap`); the old
store (an fs data_dir's lock, a database's pool, a bridge's link) is closed only
once the calls that took it have ended (:meth:`InFlight.retire`): closing it
under them would lose or fail them. Shutdown (:meth:`InFlight.close`) refuses
new calls and releases the live store once the last one ends, the rule the
embedded host's :class:`~session_manager._hosts.gate.CallGate` shares.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from .._hosts.gate import CallGate
from ..errors import STORAGE, SessionError
from ..store.base import SessionStore
from .runtime import Runtime

log = logging.getLogger("session_manager.iii")


class InFlight:
    """The live runtime and the calls holding each store."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._gate = CallGate()
        # Calls in flight per store: a swapped-out runtime's link is closed
        # only once the calls that took it have finished with it.
        self._users: dict[int, int] = {}
        # Swapped-out stores whose drain gave up: each closes when its last call ends.
        self._retired: dict[int, Callable[[], None]] = {}
        self._idle = threading.Condition()

    def __len__(self) -> int:
        return len(self._gate)

    @contextlib.contextmanager
    def call(self) -> Iterator[Runtime]:
        """The live runtime, held for the call's length; ``session/storage`` once shut down."""
        if not self._gate.enter():
            raise SessionError(STORAGE, "session-manager is shutting down")
        try:
            with self._idle:
                runtime = self.runtime
                key = id(runtime.store)
                self._users[key] = self._users.get(key, 0) + 1
            try:
                yield runtime
            finally:
                retired = None
                with self._idle:
                    self._users[key] -= 1
                    if not self._users[key]:
                        del self._users[key]
                        retired = self._retired.pop(key, None)
                    self._idle.notify_all()
                if retired is not None:
                    retired()  # the last call on a store swapped out under it: now nothing uses it
        finally:
            self._gate.leave()  # the last call out after a shutdown that stopped waiting releases the store

    def swap(self, runtime: Runtime, also: Callable[[], None] = lambda: None) -> None:
        """Make ``runtime`` the live one (``also`` runs under the same lock, so no call
        sees one without the other)."""
        with self._idle:
            also()
            self.runtime = runtime

    def drain(self, store: SessionStore, timeout_s: float) -> None:
        """Wait until no call holds ``store`` (it has just been swapped out)."""
        key = id(store)
        with self._idle:
            if not self._idle.wait_for(lambda: key not in self._users, timeout=timeout_s):
                log.warning("%d calls still use the previous store after %.0f s; it is closed when they end",
                            self._users.get(key, 0), timeout_s)

    def retire(self, runtime: Runtime) -> None:
        """Close a swapped-out runtime's store (or bridge link) once no call uses it.
        Closing it under a call would release an fs data_dir while that call still
        writes there (another owner could hold it by then), or cut a bridge call."""
        end = runtime.bridge.close if runtime.bridge is not None else runtime.store.close
        key = id(runtime.store)
        with self._idle:
            if key in self._users:
                self._retired[key] = end
                return
        end()

    def close(self, release: Callable[[], None], timeout_s: float) -> bool:
        """Refuse new calls; ``release`` runs once the last one ends. False if
        ``timeout_s`` passed first (``release`` then runs when the last call leaves)."""
        return self._gate.close(release, timeout_s=timeout_s)
