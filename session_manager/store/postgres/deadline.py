"""A deadline on every exchange with the database, whatever the network does.

libpq waits on its socket with no deadline of its own, and neither
``statement_timeout`` (the server's: it never starts when the query does not
arrive) nor TCP keepalives (a relay's kernel answers them) end a call
behind a peer that accepts bytes and never answers. So a connection in use
is *armed* with its call's deadline: one watchdog thread per store shuts the
socket down (both directions) when the deadline passes, which wakes libpq
from any wait, read or write, with a connection error. The armed token then
says the failure was the deadline's (:attr:`Armed.fired`), and the caller
discards the connection (it is never returned to the pool).

Arming costs a lock and a dict insert, no system call: the watchdog sleeps
until the earliest armed deadline and is woken only when an earlier one is
armed.
"""

from __future__ import annotations

import itertools
import math
import socket
import threading
import time
from typing import Any

import psycopg

__all__ = ["Armed", "Watchdog"]


class Armed:
    """One connection's use, armed with a deadline (``time.monotonic()`` seconds)."""

    __slots__ = ("deadline", "fd", "fired", "held", "key", "outer")

    def __init__(self, key: int, deadline: float, fd: int) -> None:
        self.key = key
        self.deadline = deadline
        self.fd = fd
        self.fired = False
        # In use by its thread (taken, not yet handed back: the adapter's PgDatastore sets it),
        # and the thread's use it was taken inside (a store call made while another waits).
        self.held = False
        self.outer: Armed | None = None


class Watchdog:
    """Ends armed connections whose deadline passed (one daemon thread, started on first use or by :meth:`start`)."""

    def __init__(self, name: str) -> None:
        self._name = name
        # arm() and disarm() take the lock itself (a C call): the Condition's own
        # __enter__/__exit__ are Python methods, four calls a statement more. Reentrant: a
        # store call made inside another on its thread (a signal handler, a finalizer) may land
        # where that one holds it (notifying the thread, making an Armed) and arms its own.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._armed: dict[int, Armed] = {}
        self._keys = itertools.count()
        self._wake_at = math.inf  # when the thread wakes next (it is woken early only for an earlier deadline)
        self._thread: threading.Thread | None = None
        self._closed = False

    def arm(self, conn: psycopg.Connection[Any], deadline: float) -> Armed:
        """Arm ``conn`` (in use by the calling thread) until :meth:`disarm`."""
        armed = Armed(next(self._keys), deadline, conn.pgconn.socket)
        with self._lock:
            self._armed[armed.key] = armed
            if self._thread is None:
                self._start()
            if deadline < self._wake_at:
                self._cond.notify()
        return armed

    def start(self) -> None:
        """Start the thread now (a store does while its pool connects: its first call's
        first arm then does not wait for a thread to start)."""
        with self._cond:
            if self._thread is None:
                self._start()

    def _start(self) -> None:
        if not self._closed:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def disarm(self, armed: Armed) -> bool:
        """Stop watching; whether the deadline had fired (the connection is then dead)."""
        with self._lock:  # after this, the watchdog never touches the socket again
            self._armed.pop(armed.key, None)
        return armed.fired

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=5.0)

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                for armed in [a for a in self._armed.values() if a.deadline <= now]:
                    del self._armed[armed.key]
                    armed.fired = True
                    _shut_down(armed.fd)
                self._wake_at = min((a.deadline for a in self._armed.values()), default=math.inf)
                self._cond.wait(None if self._wake_at == math.inf else max(0.0, self._wake_at - now))


def _shut_down(fd: int) -> None:
    # On a duplicate of the descriptor: shutdown acts on the socket itself
    # (libpq's wait wakes with EOF or EPIPE) while libpq keeps its descriptor
    # to close as usual, so no descriptor number is ever reused under it.
    try:
        dup = socket.socket(fileno=socket.dup(fd))
    except OSError:
        return
    try:
        dup.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by the peer
    finally:
        dup.close()
