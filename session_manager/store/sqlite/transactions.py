"""The sqlite adapter's transaction seam, as the postgres adapter's.

:meth:`Transactions.mutation` (entered by the service around one mutation)
opens ``BEGIN IMMEDIATE`` on the calling thread's connection: the database's
write lock, taken before the mutation reads, so its read-check-write is
serialized against every writer of every process (SQLite has one writer at
a time; ``busy_timeout_ms`` is how long a writer waits for it). Inside
:meth:`Transactions.run_call` the commit waits until the call's events are
in the outbox, so writes and events commit together.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import TypeVar

from ..._wire.events import Event
from ...errors import StoreError
from ..base import EventSink
from .core import SqliteCore

R = TypeVar("R")
log = logging.getLogger("session_manager.store.sqlite")


class Transactions(SqliteCore):
    @contextmanager
    def mutation(self, session_ids: Collection[str]) -> Iterator[None]:
        if self._local.in_tx:  # nested (fork's new session inside the source's): one transaction
            yield
            return
        conn = self._begin()
        try:
            yield
        except BaseException:
            self._end(conn, commit=False)
            raise
        if self._local.deferring:
            return  # run_call commits with the call's events
        self._end(conn, commit=True)

    def run_call(self, call: Callable[[], tuple[R, list[Event]]]) -> tuple[R, list[Event]]:
        """Run one call; its mutation commits together with its outbox rows."""
        local = self._local
        if local.deferring:  # re-entrant: the outer call commits
            return call()
        local.deferring = True
        try:
            response, events = call()
        except BaseException:
            local.deferring = False
            if local.in_tx:
                self._end(self._conn(), commit=False)
            raise
        local.deferring = False
        if not local.in_tx:
            if not events:
                return response, events
            try:
                self._begin()  # events without a mutation (none today): a transaction of their own
            except StoreError as e:
                raise self.storage_error(e) from None
        conn = self._conn()
        # Past the service's error mapping: failures here are the caller's session/storage.
        try:
            before = self.outbox.record(conn, events)
        except sqlite3.Error as e:
            self._end(conn, commit=False)
            raise self.storage_error(e) from None
        except BaseException:
            self._end(conn, commit=False)
            raise
        try:
            self._end(conn, commit=True)
        except StoreError as e:
            raise self.storage_error(e) from None
        try:
            self.outbox.committed(conn, events, before)
        except sqlite3.Error as e:  # the mutation stands; the follower hands those rows on instead
            log.warning("sqlite: catching up before a call's own events failed: %s", e)
        return response, events

    def subscribe(self, sink: EventSink, wants: Callable[[str], bool] | None = None) -> Callable[[], None]:
        return self.outbox.subscribe(sink, wants)
