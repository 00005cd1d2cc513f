"""The facade both SQL stores build on: a :class:`SessionStore` that holds its
parts and passes each call on to the part that serves it. The reads a
mutation makes, its commit and the calls' seams go to the parts the adapter
names (sqlite: its reads, writes and call runner; postgres: its optimistic
part, which falls back on those); the rest to the reads, writes and outbox."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

from ..._wire.events import Event
from ...errors import ReadOnlyStore
from ..base import AttachmentMeta, Commit, Entry, EventSink, Meta, SessionStore
from ..path import EntryPath

__all__ = ["SqlStore"]

R = TypeVar("R")


class Calls(Protocol):
    def mutation(self, session_ids: Collection[str]) -> AbstractContextManager[None]: ...

    def run_call(self, call: Callable[[], tuple[R, list[Event]]]) -> tuple[R, list[Event]]: ...


class SessionReads(Protocol):
    """The reads a mutation makes before it commits."""

    def get_meta(self, session_id: str) -> Meta | None: ...

    def get_leaf(self, session_id: str) -> str | None: ...

    def get_entry(self, session_id: str, entry_id: str) -> Entry | None: ...

    def meta_and_leaf_to_commit(self, session_id: str) -> tuple[Meta | None, str | None]: ...


class SessionWrites(Protocol):
    def commit(self, session_id: str, commit: Commit) -> Commit: ...

    def delete_session(self, session_id: str) -> bool: ...


class Reads(Protocol):
    """The queries every SQL adapter answers the same way."""

    def list_metas(self) -> list[Meta]: ...

    def ordered_metas(self, order: str, after: tuple[int, str] | None, status: str | None,
                      metadata: Meta | None) -> Iterator[Meta]: ...

    def meta_and_leaf(self, session_id: str) -> tuple[Meta | None, str | None]: ...

    def path(self, session_id: str, leaf: str | None) -> EntryPath: ...

    def entries(self, session_id: str) -> list[Entry]: ...

    def get_attachment_meta(self, session_id: str, attachment_id: str) -> AttachmentMeta | None: ...

    def read_attachment(self, session_id: str, attachment_id: str) -> bytes | None: ...

    def list_attachments(self, session_id: str) -> list[AttachmentMeta]: ...


class Writes(Protocol):
    def put_attachment(self, meta: AttachmentMeta, chunks: Iterable[bytes]) -> None: ...

    def delete_attachment(self, session_id: str, attachment_id: str) -> bool: ...


class Follower(Protocol):
    def subscribe(self, sink: EventSink, wants: Callable[[str], bool] | None = None) -> Callable[[], None]: ...

    def ready(self) -> None: ...

    def idle(self) -> None: ...

    def close(self) -> None: ...


class Datastore(Protocol):
    @property
    def closed(self) -> bool: ...

    def close(self) -> None:
        """Refuse new connections."""

    def release(self) -> None:
        """Close the connections (and whatever else the datastore runs)."""


class SqlStore(SessionStore):
    """A store several processes share, assembled from its parts.

    ``read_only`` (an adapter opened read-only): every mutating seam below refuses
    with :class:`ReadOnlyStore` before it touches a connection (the one rule; the
    parts never see a write of such a store)."""

    shared = True
    read_only = False
    db: Datastore
    reads: Reads
    writes: Writes
    outbox: Follower
    calls_part: Calls  # mutation and run_call
    session_reads: SessionReads
    session_writes: SessionWrites

    def writable(self) -> None:
        """Refuse a write of a store opened read-only (the fs store's error, as the service answers it)."""
        if self.read_only:
            raise ReadOnlyStore()

    def mutation(self, session_ids: Collection[str]) -> AbstractContextManager[None]:
        self.writable()
        return self.calls_part.mutation(session_ids)

    def run_call(self, call: Callable[[], tuple[R, list[Event]]]) -> tuple[R, list[Event]]:
        return self.calls_part.run_call(call)

    def get_meta(self, session_id: str) -> Meta | None:
        return self.session_reads.get_meta(session_id)

    def get_leaf(self, session_id: str) -> str | None:
        return self.session_reads.get_leaf(session_id)

    def get_entry(self, session_id: str, entry_id: str) -> Entry | None:
        return self.session_reads.get_entry(session_id, entry_id)

    def meta_and_leaf_to_commit(self, session_id: str) -> tuple[Meta | None, str | None]:
        return self.session_reads.meta_and_leaf_to_commit(session_id)

    def commit(self, session_id: str, commit: Commit) -> Commit:
        self.writable()
        return self.session_writes.commit(session_id, commit)

    def delete_session(self, session_id: str) -> bool:
        self.writable()
        return self.session_writes.delete_session(session_id)

    def subscribe(self, sink: EventSink, wants: Callable[[str], bool] | None = None) -> Callable[[], None]:
        return self.outbox.subscribe(sink, wants)

    def events_ready(self) -> None:
        self.outbox.ready()

    def events_idle(self) -> None:
        self.outbox.idle()

    def list_metas(self) -> list[Meta]:
        return self.reads.list_metas()

    def ordered_metas(
        self, order: str, after: tuple[int, str] | None, status: str | None, metadata: Meta | None
    ) -> Iterator[Meta]:
        return self.reads.ordered_metas(order, after, status, metadata)

    def meta_and_leaf(self, session_id: str) -> tuple[Meta | None, str | None]:
        return self.reads.meta_and_leaf(session_id)

    def path(self, session_id: str, leaf: str | None) -> EntryPath:
        return self.reads.path(session_id, leaf)

    def entries(self, session_id: str) -> list[Entry]:
        return self.reads.entries(session_id)

    def get_attachment_meta(self, session_id: str, attachment_id: str) -> AttachmentMeta | None:
        return self.reads.get_attachment_meta(session_id, attachment_id)

    def read_attachment(self, session_id: str, attachment_id: str) -> bytes | None:
        return self.reads.read_attachment(session_id, attachment_id)

    def list_attachments(self, session_id: str) -> list[AttachmentMeta]:
        return self.reads.list_attachments(session_id)

    def put_attachment(self, meta: AttachmentMeta, chunks: Iterable[bytes]) -> None:
        self.writable()
        self.writes.put_attachment(meta, chunks)

    def delete_attachment(self, session_id: str, attachment_id: str) -> bool:
        self.writable()
        return self.writes.delete_attachment(session_id, attachment_id)

    def close(self) -> None:
        if self.db.closed:
            return
        self.db.close()  # first: a part still running (a resync) fails fast instead of reconnecting
        self.outbox.close()
        self.db.release()
