"""The facade both SQL stores build on: a :class:`SessionStore` that holds its
parts (reads, writes, the outbox) and passes each call on to the part that
serves it. Each adapter's store adds what it routes differently (postgres
sends a mutation's reads and commit through its optimistic part)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from ..base import AttachmentMeta, Entry, EventSink, Meta, SessionStore
from ..path import EntryPath

__all__ = ["SqlStore"]


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


class SqlStore(SessionStore):
    """A store several processes share, assembled from its parts."""

    shared = True
    reads: Reads
    writes: Writes
    outbox: Follower

    def subscribe(self, sink: EventSink, wants: Callable[[str], bool] | None = None) -> Callable[[], None]:
        return self.outbox.subscribe(sink, wants)

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
        self.writes.put_attachment(meta, chunks)

    def delete_attachment(self, session_id: str, attachment_id: str) -> bool:
        return self.writes.delete_attachment(session_id, attachment_id)
