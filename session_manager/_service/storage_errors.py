"""Storage failures as the bus reports them: the one mapping from the
:mod:`session_manager.errors` tree to ``session/*`` codes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING

from ..errors import (
    STORAGE,
    Conflict,
    SessionError,
    StoreError,
    UnstorableValue,
    Vanished,
    invalid_request,
    not_found,
)
from ..store.base import NO_TRANSACTION

if TYPE_CHECKING:
    from .commit_order import CommitOrder


def mapped(e: BaseException) -> SessionError | None:
    """The ``session/*`` error a store failure is reported as (``None``: not one)."""
    if isinstance(e, Conflict):
        return None  # re-decided by contention.retry_conflicts, which reports exhaustion as session/storage
    if isinstance(e, UnstorableValue):
        return invalid_request(str(e))
    if isinstance(e, Vanished):
        return not_found(e.session_id)
    if isinstance(e, StoreError):
        return SessionError(STORAGE, str(e))
    if isinstance(e, OSError):
        return SessionError(STORAGE, e.strerror or type(e).__name__)  # never the path
    return None


def at_edge(e: StoreError) -> SessionError:
    """A store failure that reached a host's edge unmapped: a reader iterating a
    path after its handler's mapped block (lazy bodies are read from the log as
    they are iterated) is answered as the block would have answered it."""
    return mapped(e) or SessionError(STORAGE, str(e))


class storage_errors:
    """Store failures as the bus reports them: bad values are the caller's
    ``session/invalid_request``, everything else ``session/storage``.

    A class, not a generator context manager: it wraps every call, and the
    generator machinery cost more than the mapping."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if e is not None:
            error = mapped(e)
            if error is not None:
                raise error from None


class Unshared:
    """The lock of a session id no other call can know yet (a fork's new
    session): nothing to wait for, so nothing to take."""

    __slots__ = ()

    def acquire(self) -> bool:
        return True

    def release(self) -> None:
        return None


UNSHARED = Unshared()


class locked_storage_errors(storage_errors):
    """``with lock, storage_errors(), inner:`` as one object (a mutation's
    entry point): the lock held around the store's transaction ``inner``,
    failures of either mapped. ``order``: where a call whose events are delivered
    in commit order takes its number, as the lock is let go."""

    __slots__ = ("_inner", "_lock", "_order", "_settle")
    _inner: AbstractContextManager[None] | None

    def __init__(self, lock: threading.Lock | threading.RLock | Unshared, inner: AbstractContextManager[None],
                 settle: Callable[[], None] | None, order: CommitOrder | None = None) -> None:
        self._lock = lock
        self._order = order
        # A store with no transactions (the fs one) hands out a shared no-op: not entered at all.
        self._inner = None if inner is NO_TRANSACTION else inner
        self._settle = settle  # the store's wait for durability, once the lock is let go (None: none)

    def __enter__(self) -> None:
        self._lock.acquire()
        if self._inner is None:
            return
        inner = self._inner
        try:
            inner.__enter__()
        except BaseException as e:
            self._lock.release()
            error = mapped(e)
            if error is not None:
                raise error from None
            raise
        if getattr(inner, "exit_needed", True) is False:
            # (a store's context that says its exit does nothing, e.g. a planned postgres mutation:
            # not called; this object is the one call's own, see ServiceCore.mutating)
            self._inner = None

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        raised = e
        try:
            if self._inner is not None:
                self._inner.__exit__(kind, e, tb)
        except BaseException as inner_error:
            raised = inner_error  # the transaction's own failure (a commit that did not hold)
        finally:
            order = self._order
            try:
                if order is not None and order.calls:  # (0: no call in flight delivers events)
                    order.note()  # under the lock: numbers in this session's commit order
            finally:
                self._lock.release()
        settle = self._settle
        if settle is not None:
            try:
                # Outside the lock, so the writers queued on it can share the wait (group
                # commit); before the answer, which must only tell of durable writes.
                settle()
            except BaseException as settle_error:
                if raised is None:
                    raised = settle_error
        if raised is None:
            return
        super().__exit__(kind, raised, tb)
        if raised is not e:
            raise raised
