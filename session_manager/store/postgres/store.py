"""The postgres adapter: any number of instances over one database.

Values are stored as their exact JSON text (the same encoder as the fs
store's lines), so they round-trip byte for byte; the only jsonb column is a
derived copy of the session metadata that serves list filters.

:class:`PostgresStore` is a facade over its parts, each handed the datastore
(:mod:`.core`: settings, pool, deadline, failure mapping):
:mod:`.transactions` (one transaction per mutation, under advisory locks),
the call runner (:mod:`..sql.transactions`: a call's events committed with
it), :mod:`.reads` (the queries), :mod:`.writes` (commits, deletions,
attachments), :mod:`.outbox` (events across instances), and
:mod:`.optimistic` (a call in one round trip when what this instance knows
of the session still holds), which serves the mutations and the reads they
make.

Reads outside a mutation run in autocommit on a pooled connection. Every
database failure becomes a :class:`StoreError` (``session/storage``) with the
password masked; a broken connection is discarded by the pool, so the next
call reconnects by itself.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from typing import TypeVar

from ..._wire.events import Event
from ...errors import SessionError
from ..base import Commit, Entry, Meta
from ..sql.store import SqlStore
from ..sql.transactions import CallRunner
from .core import PgDatastore, Tx
from .optimistic import Optimistic
from .outbox import Outbox
from .reads import PgReads
from .settings import PostgresSettings
from .transactions import PgTransactions
from .writes import PgWrites

__all__ = ["PostgresSettings", "PostgresStore"]

R = TypeVar("R")


class PostgresStore(SqlStore):
    """Sessions, entries and attachments in one PostgreSQL schema."""

    reads: PgReads
    writes: PgWrites
    outbox: Outbox

    def __init__(self, settings: PostgresSettings) -> None:
        self.db = PgDatastore(settings)  # checks the schema, migrates it, opens the pool
        self.settings = settings
        self.txs = PgTransactions(self.db)
        self.reads = PgReads(self.db)
        self.outbox = Outbox(self.db, settings.outbox_retention_s, self.reads)
        self.calls: CallRunner[Tx] = CallRunner(self.txs, self.outbox)
        self.writes = PgWrites(self.db, front=self)
        self.optimistic = Optimistic(self.db, self.txs, self.calls, self.reads, self.writes, self.outbox)

    @property
    def instance(self) -> str:
        """This instance's id (its outbox rows carry it)."""
        return self.db.instance

    # -- mutations, and the reads they make: the optimistic part first ---------------

    def mutation(self, session_ids: Collection[str]) -> AbstractContextManager[None]:
        return self.optimistic.mutation(session_ids)

    def run_call(self, call: Callable[[], tuple[R, list[Event]]]) -> tuple[R, list[Event]]:
        return self.optimistic.run_call(call)

    def get_meta(self, session_id: str) -> Meta | None:
        return self.optimistic.get_meta(session_id)

    def get_leaf(self, session_id: str) -> str | None:
        return self.optimistic.get_leaf(session_id)

    def get_entry(self, session_id: str, entry_id: str) -> Entry | None:
        return self.optimistic.get_entry(session_id, entry_id)

    def meta_and_leaf_to_commit(self, session_id: str) -> tuple[Meta | None, str | None]:
        return self.optimistic.meta_and_leaf_to_commit(session_id)

    def meta_and_entry_to_commit(self, session_id: str, entry_id: str) -> tuple[Meta | None, Entry | None]:
        return self.optimistic.meta_and_entry_to_commit(session_id, entry_id)

    def commit(self, session_id: str, commit: Commit) -> Commit:
        return self.optimistic.commit(session_id, commit)

    def delete_session(self, session_id: str) -> bool:
        return self.optimistic.delete_session(session_id)

    def forget(self, session_id: str) -> None:
        """Drop what this instance remembers of a session (it was written some other way)."""
        self.optimistic.forget(session_id)

    # -- the rest ---------------------------------------------------------------------

    def meta_and_leaf_from_root(self, session_id: str) -> tuple[Meta | None, str | None]:
        return self.reads.meta_and_leaf_from_root(session_id)

    def storage_error(self, e: BaseException) -> SessionError:
        """A lazy read's failure, as callers see it (it happens outside the service's mapping)."""
        return self.db.storage_error(e)

    def close(self) -> None:
        if self.db.closed:
            return
        self.db.close()
        self.outbox.close()
        self.db.release()
