"""The sqlite adapter: any number of processes and threads over one file.

Values are stored as their exact JSON text (the fs store's encoder, as in
the postgres adapter), so big integers round-trip exactly and NaN never
gets in. :class:`SqliteStore` is a facade over its parts, each handed the
datastore (:mod:`.core`: connections, failure mapping, opening checks):
:mod:`.transactions` (one ``BEGIN IMMEDIATE`` transaction per mutation),
the call runner (:mod:`..sql.transactions`: a call's events committed with
it), :mod:`.reads`, :mod:`.writes`, and :mod:`.outbox` (events across
processes).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from typing import TypeVar

from ..._wire.events import Event
from ..base import Commit, Entry, Meta
from ..sql.store import SqlStore
from ..sql.transactions import CallRunner
from .core import SqliteDatastore
from .outbox import Outbox
from .reads import SqliteReads
from .settings import Durability, SqliteSettings
from .transactions import SqliteTransactions
from .writes import SqliteWrites

__all__ = ["SqliteSettings", "SqliteStore"]

R = TypeVar("R")


class SqliteStore(SqlStore):
    """Sessions, entries and attachments in one SQLite database file (WAL mode)."""

    reads: SqliteReads
    writes: SqliteWrites
    outbox: Outbox

    def __init__(self, settings: SqliteSettings) -> None:
        self.db = SqliteDatastore(settings)  # opens (and checks) the file
        self.settings = settings
        self.txs = SqliteTransactions(self.db)
        self.reads = SqliteReads(self.db)
        self.writes = SqliteWrites(self.db, self.txs, self.reads)
        self.outbox = Outbox(self.db, self.reads)
        self.calls: CallRunner[sqlite3.Connection] = CallRunner(self.txs, self.outbox)

    @property
    def durability(self) -> Durability:
        """``flush`` (``synchronous=NORMAL``) or ``fsync`` (``FULL``); settable
        (a worker's reload): each connection takes it before its next write."""
        return self.db.durability

    @durability.setter
    def durability(self, value: Durability) -> None:
        self.db.durability = value

    def mutation(self, session_ids: Collection[str]) -> AbstractContextManager[None]:
        return self.txs.mutation(session_ids)

    def run_call(self, call: Callable[[], tuple[R, list[Event]]]) -> tuple[R, list[Event]]:
        return self.calls.run_call(call)

    def get_meta(self, session_id: str) -> Meta | None:
        return self.reads.get_meta(session_id)

    def get_leaf(self, session_id: str) -> str | None:
        return self.reads.get_leaf(session_id)

    def get_entry(self, session_id: str, entry_id: str) -> Entry | None:
        return self.reads.get_entry(session_id, entry_id)

    def meta_and_leaf_to_commit(self, session_id: str) -> tuple[Meta | None, str | None]:
        return self.reads.meta_and_leaf_to_commit(session_id)

    def commit(self, session_id: str, commit: Commit) -> Commit:
        return self.writes.commit(session_id, commit)

    def delete_session(self, session_id: str) -> bool:
        return self.writes.delete_session(session_id)

    def integrity_check(self) -> list[str]:
        """What ``PRAGMA integrity_check`` finds wrong (empty: the file is sound)."""
        return self.reads.integrity_check()

    def sessions_without_meta(self) -> list[str]:
        """Sessions holding entries but no meta (the contract allows it mid-way; fsck reports it)."""
        return self.reads.sessions_without_meta()

    def close(self) -> None:
        if self.db.closed:
            return
        self.db.close()
        self.outbox.close()
        self.db.close_connections()
