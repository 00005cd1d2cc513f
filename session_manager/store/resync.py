"""A store's state as events (a resync): what an observer that may have missed
events is sent instead, one session at a time, so a large store is never held
as one list of events. The worker sends it after an adapter swap, the bridge
after a lost link, an outbox follower after it was away too long."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from ..._wire import events as ev
from ..._wire.events import Event

if TYPE_CHECKING:
    from ..base import Entry, Meta

__all__ = ["StateSource", "resync_batches"]


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
