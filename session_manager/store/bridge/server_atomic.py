"""The server side of the atomic ``session::store::*`` calls (ids and wire
models: :mod:`session_manager.store.bridge.protocol_cas`).

Each runs under the main's own session lock, shared with its domain calls,
so a commit's compare-and-set check and its write are one critical section;
the store's :func:`~session_manager.store._cas.resolve` chains and counts
appends inside the adapter's own.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from ..._wire.shape import build
from ...errors import Conflict, not_found
from .._core.cas import meta_version
from ..base import Commit, SessionStore
from .protocol_cas import (
    CommitRequest,
    CommitResponse,
    DeleteSessionRequest,
    DeleteSessionResponse,
    ReadPathRequest,
    ReadPathResponse,
)


def commit(store: SessionStore, lock: Any, req: CommitRequest, raw: dict[str, Any]) -> Any:
    sid = req.session_id
    with lock(sid):
        if "expect_meta_version" in req.model_fields_set:
            current = store.get_meta(sid)
            if meta_version(current) != req.expect_meta_version:
                why = "the session meta changed since the commit was decided" if current is not None else (
                    "the session does not exist")
                return build[CommitResponse](committed=False, conflict=why)
        # What is written is the payload as sent (a model re-dump would drop the explicit nulls).
        change = Commit(entries=tuple(raw.get("entries") or ()), leaf=req.leaf, meta=raw.get("meta"),
                        expect_revisions=tuple(req.expect_revisions.items()), append=req.append,
                        chain=req.chain)
        try:
            applied = store.commit(sid, change)
        except Conflict as e:
            return build[CommitResponse](committed=False, conflict=str(e))
        meta = applied.meta if applied.meta is not None else store.get_meta(sid)
    return build[CommitResponse](committed=True, entries=list(applied.entries), leaf=applied.leaf, meta=meta)


class RecentDeletes:
    """The deletes this process carried out lately, by the caller's ``op``: a
    repeat of one (the bridge settling a lost answer) answers ``deleted:
    true`` again, while any other caller that found nothing hears ``false``,
    so of two bridges racing, one answers deleted and fires ``on-deleted``.
    Bounded: a repeat comes within ~1.25x the bridge's ``timeout_ms``. Ops
    are random ids, so one record serves every store of the process; a
    restart forgets them (the bridge then answers ``session/storage``)."""

    def __init__(self, size: int = 4096) -> None:
        self._done: OrderedDict[Hashable, None] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def once(self, key: Hashable | None, delete: Callable[[], bool]) -> bool:
        """``delete()`` unless ``key`` already did it (then ``True``). Call it
        under the lock that serializes the deletes of that session."""
        with self._lock:
            if key is not None and key in self._done:
                return True
        removed = delete()
        if removed and key is not None:
            with self._lock:
                self._done[key] = None
                while len(self._done) > self._size:
                    self._done.popitem(last=False)
        return removed


RECENT_DELETES = RecentDeletes()


def delete_session(store: SessionStore, lock: Any, req: DeleteSessionRequest, raw: dict[str, Any]) -> Any:
    key = None if req.op is None else ("session", req.session_id, req.op)
    with lock(req.session_id):
        existed = RECENT_DELETES.once(key, lambda: store.delete_session(req.session_id))
    return build[DeleteSessionResponse](deleted=existed)


def read_path(store: SessionStore, lock: Any, req: ReadPathRequest, raw: dict[str, Any]) -> Any:
    path = store.path(req.session_id, req.leaf)
    length = len(path)
    if not length and store.get_meta(req.session_id) is None:
        raise not_found(req.session_id)  # deleted (a bridge reading it window by window hears so)
    index = None
    if req.around is not None:
        index = path.index_of(req.around)
        if index is None:
            return build[ReadPathResponse](length=length, start=0, index=None, entries=[])
        start = index + req.start
    else:
        start = req.start if req.start >= 0 else length + req.start
    start = max(0, min(start, length))
    end = min(length, start + req.count)
    return build[ReadPathResponse](length=length, start=start, index=index,
                                   entries=[path[i] for i in range(start, end)])
