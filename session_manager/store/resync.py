"""A store's state as events (a resync): what an observer that may have missed
events is sent instead, one session at a time, so a large store is never held
as one list of events. The worker sends it after an adapter swap, the bridge
after a lost link, an outbox follower after it was away too long.

:class:`KnownSessions`: The sessions an event listener's observers know of, for its resyncs.

A listener that may have missed events (a postgres listener whose outbox
rows were pruned while it was away, a bridge whose link to its main went
down) resyncs: it replays the store's current state as events. The current
state cannot say which sessions were deleted meanwhile, so the listener
remembers every session its observers were told about, with the metadata
they last saw: a session in that record and no longer in the store gets
one ``session::on-deleted`` (timestamp: the resync's, as the deletion's own
is not known; ``session_metadata``: the last one seen, so tenant-filtered
observers still match it), and leaves the record, so a later resync never
announces it again.

Memory: one entry (id and metadata) per live session, for as long as the
listener runs.

:func:`session_events`: the events that take a session from the state a
read-only follower saw last to the one it sees now (the fs watch and the
sqlite one compare states, as neither reads the writers' calls)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .._wire import events as ev
from .._wire.events import Event
from .base import Meta

if TYPE_CHECKING:
    from .base import Entry

__all__ = ["KnownSessions", "SeenSession", "StateSource", "resync_batches", "session_events"]

_META_FIELDS = ("title", "description", "metadata")


class StateSource(Protocol):
    """What a resync reads: every session's meta, and a session's entries."""

    def list_metas(self) -> list[Meta]: ...

    def entries(self, session_id: str) -> list[Entry]: ...


def resync_batches(store: StateSource, old_metas: list[Meta], now_ms: int) -> Iterator[list[Event]]:
    """The store's state as events, one list per session (deletes first): one
    ``on-deleted`` per session of ``old_metas`` that is gone, then each session
    as created, with its entries added (and their current revisions)."""
    metas = store.list_metas()
    current = {m["session_id"] for m in metas}
    gone = [ev.deleted(m["session_id"], now_ms, m.get("metadata")) for m in old_metas
            if m["session_id"] not in current]
    if gone:
        yield gone
    for meta in metas:
        sid = meta["session_id"]
        metadata = meta.get("metadata")
        batch = [ev.created(meta)]
        for entry in store.entries(sid):
            # Added for every entry (an observer may never have seen it), then
            # the current revision for streamed ones, so highest-revision wins.
            batch.append(ev.message_added(sid, entry, metadata))
            if entry.get("kind") == "message" and entry.get("revision", 0) > 0:
                batch.append(ev.message_updated(sid, entry, entry.get("origin"), entry["timestamp"], metadata))
        yield batch


class KnownSessions:
    """Session id -> the metadata observers last saw; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._metadata: dict[str, Any] = {}

    def load(self, metas: Iterable[Meta]) -> None:
        """Sessions that exist as the listener starts (its observers can list them)."""
        fresh = {str(meta["session_id"]): meta.get("metadata") for meta in metas}  # parsed outside the lock
        with self._lock:
            self._metadata.update(fresh)

    def note(self, events: Iterable[Event]) -> None:
        """Follow the events handed to observers: created adds, deleted removes,
        every other one refreshes the metadata of a session already known (a
        late event of a deleted session must not bring it back)."""
        with self._lock:
            for event in events:
                sid, metadata = event.about()  # a deferred payload (an append's) is not built for this
                if not isinstance(sid, str):
                    continue
                if event.function_id == ev.ON_DELETED:
                    self._metadata.pop(sid, None)
                elif event.function_id == ev.ON_CREATED or sid in self._metadata:
                    self._metadata[sid] = metadata

    def snapshot(self) -> list[Meta]:
        """The known sessions as the ``old_metas`` a resync compares with.

        Take it *before* the resync lists the store: every session in it was
        committed before the listing began, so one missing from the listing
        was deleted (never merely created too late to be listed)."""
        with self._lock:  # only the copy under the lock: mutations note their events through it
            known = dict(self._metadata)
        return [{"session_id": sid, "metadata": md} for sid, md in known.items()]

    def __contains__(self, session_id: object) -> bool:
        with self._lock:
            return session_id in self._metadata

    def __len__(self) -> int:
        with self._lock:
            return len(self._metadata)


@dataclass
class SeenSession:
    """What a state-comparing follower last saw of a session: a change key of its own (the fs
    watch: the log's stat), the meta, each entry's revision."""


    key: tuple[int, ...]
    meta: Meta
    revisions: dict[str, int]


def session_events(session_id: str, before: SeenSession | None, meta: Meta | None,
                   entries: list[dict[str, Any]], now_ms: int) -> list[Event]:
    """The events that take a session from ``before`` (``None``: unknown) to
    ``meta`` and ``entries`` (``meta`` ``None``: it is gone)."""
    if meta is None:
        return [] if before is None else [ev.deleted(session_id, now_ms, before.meta.get("metadata"))]
    out: list[Event] = []
    if before is not None and before.meta.get("created_at") != meta.get("created_at"):
        # Deleted and made again between two polls: the old one went first.
        out.append(ev.deleted(session_id, now_ms, before.meta.get("metadata")))
        before = None
    metadata = meta.get("metadata")
    if before is None:
        out.append(ev.created(meta))
    known = {} if before is None else before.revisions
    for entry in entries:
        revision = known.get(entry["id"])
        if revision is None:
            out.append(ev.message_added(session_id, entry, metadata))
        elif entry.get("revision", 0) > revision and entry.get("kind") == "message":
            out.append(ev.message_updated(session_id, entry, None, meta["updated_at"], metadata))
    if before is not None:
        if before.meta.get("status") != meta.get("status"):
            out.append(ev.status_changed(meta, before.meta["status"], meta["updated_at"]))
        if any(before.meta.get(f) != meta.get(f) for f in _META_FIELDS):
            out.append(ev.meta_updated(meta, meta["updated_at"]))
    return out
