"""A call's events handed to its host's delivery in the order of its commit.

Calls of one session commit one at a time under its lock, but they used to hand
their events on once they returned, outside the lock, in whatever order their
threads got there: an append committed first could reach the observers after the
one chained onto it. Here a call that delivers takes a number as it lets the
session's lock go (:meth:`CommitOrder.note`, from the mutation's entry point; its
last mutation's, when it makes several: an earlier number is given up, unless the
call handed that mutation's events on at it (:meth:`CommitOrder.hand`: a purge's
deletes, one session each)), so the
numbers follow each session's commit order; its delivery is handed on once every
lower number's was (or was given up: a call that failed, had no events, or
committed nothing), by whichever thread completes the run. So nobody waits: a call
that finds a lower number pending leaves its delivery to the thread holding it and
returns (before its observers ran, as when it finds a delivery running: see
:mod:`session_manager.store.serial`); a lone call's number is the next one, and it
delivers its events itself before it returns.

The numbers are store-wide (simpler than per session), which costs nothing but
that early return. Only the stores that leave ordering to the default
:meth:`~session_manager.store.base.SessionStore.run_and_deliver` (fs, memory) use
it; a call nobody observes takes no number.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .._wire.events import Event
from ..store.base import EventSink

__all__ = ["CommitOrder"]

log = logging.getLogger("session_manager.commit_order")

R = TypeVar("R")

_Delivery = tuple[EventSink, list[Event]]
# This thread's call: [its number (0: none yet), its deliver, how many of its events hand()
# handed on already]; one thread-local attribute, as a call in flight costs one look-up.
_Call = list[Any]


class CommitOrder:
    """Numbers the delivering calls as they commit; hands their deliveries on in that order."""

    __slots__ = ("_given", "_local", "_lock", "_next", "_running", "_waiting", "calls")

    def __init__(self) -> None:
        # Calls in flight that take a number: read unlocked by the mutation's entry point
        # (0: nobody observes, and note() is not even called). A thread's own increment is
        # seen by that thread, which is all note() needs.
        self.calls = 0
        # .call: this thread's _Call (no attribute / None: it takes no number).
        self._local = threading.local()
        self._lock = threading.Lock()
        self._given = 0  # the last number given
        self._next = 1  # the number whose delivery goes next
        self._waiting: dict[int, _Delivery | None] = {}  # handed, not yet run (None: given up)
        self._running = False  # a thread is running the deliveries in order

    def run(self, call: Callable[[], tuple[R, list[Event]]], deliver: EventSink) -> tuple[R, list[Event]]:
        """``call`` (``(response, events)``), its events then handed to ``deliver`` in
        commit order; its number given up whatever the call does."""
        local = self._local
        outer: _Call | None = getattr(local, "call", None)  # (a call inside a call on this thread)
        mine = local.call = [0, deliver, 0]
        with self._lock:
            self.calls += 1
        try:
            response, events = call()
        except BaseException:
            self._finish(mine, outer, None)
            raise
        handed: int = mine[2]  # (the events :meth:`hand` handed on already)
        rest = events[handed:] if handed else events
        self._finish(mine, outer, (deliver, rest) if rest else None)
        return response, events

    def _finish(self, mine: _Call, outer: _Call | None, delivery: _Delivery | None) -> None:
        """This thread's call is over (the outer call's state restored): ``delivery``
        (``None``: none) handed in for its number; then the deliveries now next in line
        run here, unless a thread runs them."""
        self._local.call = outer
        ticket: int = mine[0]
        with self._lock:  # (one acquisition: a lone call's hand-in and its own delivery taken)
            self.calls -= 1
            if ticket:
                self._waiting[ticket] = delivery
            elif delivery is not None:
                self._given += 1  # events of a call that let no session's lock go: next in line now
                self._waiting[self._given] = delivery
            # (else nothing of its own, but parts it handed on may be next in line: see hand())
            if self._running:
                return
            ready = self._ready()
            if ready is None:
                return
            self._running = True
        failure: BaseException | None = None
        while True:
            try:
                ready[0](ready[1])
            except BaseException as e:  # the rest still delivered; the first failure raised after
                if failure is None:
                    failure = e
                else:
                    log.exception("an event delivery failed")
            with self._lock:
                ready = self._ready()
                if ready is None:
                    self._running = False
                    break
        if failure is not None:
            raise failure

    def _ready(self) -> _Delivery | None:
        """(Holding the lock) the next delivery in line, past the numbers given up."""
        waiting = self._waiting
        while self._next in waiting:
            ready = waiting.pop(self._next)
            self._next += 1
            if ready is not None:
                return ready
        return None

    def hand(self, events: list[Event]) -> None:
        """From a call making several mutations, each of its own sessions (a purge, a
        tree's delete), right after one: the call's ``events`` it has not handed on yet
        (this mutation's, its list so far) go at this mutation's number, not its last one's.
        Held to the last, the events of a session it deleted first went out after those of
        a call that re-created that session before its last delete. Run by whichever thread
        completes the run (at the latest, this call's own as it returns)."""
        mine: _Call | None = getattr(self._local, "call", None)
        if mine is None:
            return  # (not a call that takes a number)
        new = events[mine[2]:]
        mine[2] = len(events)
        with self._lock:
            ticket: int = mine[0]
            if not ticket:
                if not new:
                    return
                self._given += 1
                ticket = self._given
            self._waiting[ticket] = (mine[1], new) if new else None
            mine[0] = 0  # (its next mutation takes a number of its own, giving none up)

    def note(self) -> None:
        """Under a session's lock, after its mutation: this thread's call (if it takes one)
        gets the next number; the number of its earlier mutation, if any, is given up (not
        run here: observers never run under a session's lock; the call's own hand runs it)."""
        mine: _Call | None = getattr(self._local, "call", None)
        if mine is None:
            return
        with self._lock:
            held: int = mine[0]
            self._given += 1
            mine[0] = self._given
            if held:
                self._waiting[held] = None
