"""One call committed together with its events: the seam both adapters share.

The service enters ``mutation`` around each mutation and ``run_call`` around
each call. The adapter's transactions (:class:`Transactions`: postgres takes a
pooled connection and advisory locks, sqlite ``BEGIN IMMEDIATE``) keep the
mutation's transaction open while ``run_call`` defers its commit:
:class:`CallRunner` then records the call's events in the outbox inside that
transaction and commits both at once, so a rolled-back mutation leaves no
event and a committed one never loses its events. Failures past the
service's error mapping become the caller's ``session/storage``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from typing import Any, Generic, Protocol, TypeVar

from ..._wire.events import Event
from ...errors import SessionError, StoreError

__all__ = ["CallRunner", "CallState", "EventLog", "Transactions"]

R = TypeVar("R")
H = TypeVar("H")  # the adapter's handle on an open transaction (a Tx, a sqlite3 connection)
H_contra = TypeVar("H_contra", contravariant=True)


class CallState(Protocol):
    """The calling thread's state: whether a call defers its mutation's commit."""

    deferring: bool


class Transactions(Protocol[H]):
    """What an adapter's transactions offer the call runner."""

    @property
    def driver_error(self) -> type[Exception]: ...

    def mutation(self, session_ids: Collection[str]) -> AbstractContextManager[None]:
        """One mutation's transaction (its commit deferred while a call runs)."""

    def open_tx(self) -> H | None:
        """The mutation's transaction open on this thread, if any."""

    def begin(self, session_ids: Collection[str] = ()) -> H:
        """A transaction of its own (events without a mutation)."""

    def end(self, tx: H, *, commit: bool) -> None:
        """COMMIT (or ROLLBACK) ``tx``; a failed COMMIT raises :class:`StoreError`."""

    def call_scope(self) -> AbstractContextManager[None] | None:
        """Entered around a whole call (postgres: its deadline); ``None``: none (sqlite)."""

    def storage_error(self, e: BaseException) -> SessionError: ...


class EventLog(Protocol[H_contra]):
    """An outbox's writing side: rows in the call's transaction, then what follows its commit
    (the call's events handed to ``deliver``, ``None``: nobody observes them), or, when the
    commit failed, what follows that (``token``: what :meth:`record` returned)."""

    def record(self, tx: H_contra, events: list[Event]) -> Any: ...

    def committed(self, tx: H_contra, events: list[Event], token: Any,
                  deliver: Callable[[list[Event]], None] | None = None) -> None: ...

    def abandoned(self, token: Any) -> None: ...


class CallRunner(Generic[H]):
    """Runs calls so that each commits together with its outbox rows."""

    def __init__(self, transactions: Transactions[H], outbox: EventLog[H], local: CallState) -> None:
        self.transactions = transactions
        self.outbox = outbox
        self.local = local  # the calling thread's state (thread-local)

    def mutation(self, session_ids: Collection[str]) -> AbstractContextManager[None]:
        """The adapter's mutation (so a store may serve both seams from this runner)."""
        return self.transactions.mutation(session_ids)

    def run_call(self, call: Callable[[], tuple[R, list[Event]]]) -> tuple[R, list[Event]]:
        """Run one call; its mutation commits together with its outbox rows."""
        if self.local.deferring:  # re-entrant: the outer call commits
            return call()
        scope = self.transactions.call_scope()
        if scope is None:  # (sqlite: one context manager fewer per call)
            return self.run_deferred(call)
        with scope:
            return self.run_deferred(call)

    def run_deferred(self, call: Callable[[], tuple[R, list[Event]]],
                     deliver: Callable[[list[Event]], None] | None = None) -> tuple[R, list[Event]]:
        """Run ``call`` with its mutation's commit deferred, then :meth:`finish` it."""
        txs, local = self.transactions, self.local
        local.deferring = True
        try:
            response, events = call()
        except BaseException:
            local.deferring = False
            tx = txs.open_tx()
            if tx is not None:
                txs.end(tx, commit=False)
            raise
        local.deferring = False
        return self.finish(response, events, deliver)

    def finish(self, response: R, events: list[Event],
               deliver: Callable[[list[Event]], None] | None = None) -> tuple[R, list[Event]]:
        """Commit the call's transaction (if any) with its events in the outbox; the
        outbox hands them to ``deliver`` once committed (:meth:`EventLog.committed`)."""
        txs = self.transactions
        tx = txs.open_tx()
        if tx is None:
            if not events:
                return response, events
            try:
                tx = txs.begin()  # events without a mutation (none today): a transaction of their own
            except StoreError as e:
                raise txs.storage_error(e) from None
        # Past the service's error mapping: failures here are the caller's session/storage.
        try:
            token = self.outbox.record(tx, events)
        except txs.driver_error as e:
            txs.end(tx, commit=False)
            raise txs.storage_error(e) from None
        except BaseException:
            txs.end(tx, commit=False)
            raise
        try:
            txs.end(tx, commit=True)
        except BaseException as e:
            self.outbox.abandoned(token)
            if isinstance(e, StoreError):
                raise txs.storage_error(e) from None
            raise
        self.outbox.committed(tx, events, token, deliver)
        return response, events
