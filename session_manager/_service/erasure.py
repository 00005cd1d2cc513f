"""Deleting many sessions: ``session::purge`` (a tenant, by metadata subset),
``session::delete-tree`` (a session and its sub-agent sessions) and the
retention sweep (sessions idle for too long).

Each session goes whole, under its own lock, through the same deletion as
``session::delete`` (:func:`.lifecycle.erase`), and fires its own
``session::on-deleted``; what the store does to erase the bytes is the
store's (see docs/purge.md).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable
from typing import Any

from .._wire import api
from .._wire import events as ev
from .._wire.shape import build
from ..errors import STORAGE, SessionError
from ..store.base import Meta, SessionStore
from .core import Result, ServiceCore, stripe
from .lifecycle import erase
from .listing import metadata_matches
from .storage_errors import storage_errors

__all__ = ["DAY_MS", "PARENT_KEY", "Selection", "delete_tree", "erase_selected", "expire", "idle", "purge", "select"]

# The metadata key naming a sub-agent session's parent (set by the harness).
PARENT_KEY = "parent_session_id"
DAY_MS = 86_400_000
# A child created while a tree is being deleted is found by the next pass.
_TREE_PASSES = 8


class Selection:
    """Which sessions a purge or a retention sweep deletes; checked again,
    under the session's lock, right before each delete."""

    def __init__(self, metadata: dict[str, Any] | None, statuses: Collection[str] | None,
                 updated_before: int | None) -> None:
        self.metadata = metadata
        self.statuses = frozenset(statuses) if statuses is not None else None
        self.updated_before = updated_before

    def __call__(self, meta: Meta) -> bool:
        if self.statuses is not None and meta.get("status") not in self.statuses:
            return False
        if self.updated_before is not None and not meta["updated_at"] < self.updated_before:
            return False
        return self.metadata is None or metadata_matches(self.metadata, meta.get("metadata"))


def purge(core: ServiceCore, req: api.PurgeRequest) -> Result:
    limit = req.limit if req.limit is not None else api.PURGE_DEFAULT_LIMIT
    statuses = (req.status,) if req.status is not None else None
    selection = Selection(req.metadata, statuses, req.updated_before)
    if req.dry_run:
        found = select(core, selection, limit + 1)
        ids = [m["session_id"] for m in found[:limit]]
        return build[api.PurgeResponse](session_ids=ids, more=len(found) > limit), []
    ids, events, more = erase_selected(core, selection, limit)
    return build[api.PurgeResponse](session_ids=ids, more=more), events


def idle(core: ServiceCore, idle_days: int, statuses: Collection[str] | None,
         metadata: dict[str, Any] | None = None) -> Selection:
    """Sessions not updated for ``idle_days`` days by this service's clock (with a
    status in ``statuses`` and the ``metadata`` subset, when given)."""
    before = core.clock.now_ms() - idle_days * DAY_MS + 1  # idle exactly idle_days: due
    return Selection(metadata, statuses, before)


def expire(core: ServiceCore, idle_days: int, statuses: Collection[str] | None,
           limit: int) -> tuple[list[str], list[ev.Event], bool]:
    """One batch of the retention sweep: sessions not updated for ``idle_days``
    (with a status in ``statuses`` when given), their events, whether more remain."""
    return erase_selected(core, idle(core, idle_days, statuses), limit)


def erase_selected(core: ServiceCore, selection: Selection, limit: int) -> tuple[list[str], list[ev.Event], bool]:
    """Delete up to ``limit`` sessions ``selection`` takes: their ids, their
    events, and whether more match. A storage failure after some were
    deleted ends the batch there (``more`` true, so the caller's next call
    meets it): the deleted ones' events must not be lost with the error."""
    _bulk_delete_allowed(core)
    found = select(core, selection, limit + 1)
    ids: list[str] = []
    events: list[ev.Event] = []
    held = _Held(core)
    held.take((m["session_id"] for m in found[:limit]), wait=True)
    with held, core.store.erasing():
        for meta in found[:limit]:
            try:
                event = erase(core, meta["session_id"], selection)
            except SessionError:
                if not events:
                    raise
                return ids, events, True
            if event is not None:
                ids.append(meta["session_id"])
                events.append(event)
            if core.order is not None:  # each session's event at its own delete's place in commit order
                core.order.hand(events)
    return ids, events, len(found) > limit


def select(core: ServiceCore, selection: Selection, count: int) -> list[Meta]:
    """Up to ``count`` sessions ``selection`` takes, oldest first (nothing deleted)."""
    one_status = next(iter(selection.statuses)) if selection.statuses and len(selection.statuses) == 1 else None
    out: list[Meta] = []
    with storage_errors():
        for meta in core.store.ordered_metas("created_asc", None, one_status, selection.metadata):
            if selection(meta):
                out.append(meta)
                if len(out) == count:
                    break
    return out


def _bulk_delete_allowed(core: ServiceCore) -> None:
    with storage_errors():
        problem = core.store.bulk_delete_problem()
    if problem is not None:
        raise SessionError(STORAGE, problem)


def delete_tree(core: ServiceCore, req: api.DeleteTreeRequest) -> Result:
    _bulk_delete_allowed(core)
    deleted: list[str] = []
    events: list[ev.Event] = []
    with _Held(core) as held:
        for n in range(_TREE_PASSES):
            order = _tree_order(core, req.session_id)
            # A later pass runs inside the call's transaction: a lock it cannot take at once is
            # held by a writer waiting for that transaction (the re-run finishes the tree).
            if not order or not held.take(order, wait=n == 0):
                break
            _erase_in_order(core, order, deleted, events)
    return build[api.DeleteTreeResponse](deleted=deleted), events


def _erase_in_order(core: ServiceCore, order: list[str], deleted: list[str], events: list[ev.Event]) -> None:
    """One pass of a tree delete: each session of ``order`` erased, its id and event noted."""
    with core.store.erasing():
        for session_id in order:
            event = erase(core, session_id)
            if event is not None:
                deleted.append(session_id)
                events.append(event)
            if core.order is not None:  # (as erase_selected's)
                core.order.hand(events)


class _Held:
    """The session locks a purge or a tree delete holds from before its first delete to its
    end, over a store whose call is one transaction committed at the call's end (sqlite: the
    database's write lock from the first delete on; postgres: each deleted session's rows).
    Taken one delete at a time, a session's lock was waited for inside that transaction while
    a writer of the session held it, waiting for the transaction: both stalled until the
    writer's timeout (sqlite's busy timeout, 30 s), which failed the write. Taken in stripe
    order, so two of these never wait for each other. Over another store (fs, memory: each
    delete commits on its own) nothing is held: each delete takes its session's lock."""

    __slots__ = ("_core", "_locks", "_stripes")

    def __init__(self, core: ServiceCore) -> None:
        self._core = core
        self._stripes: set[int] = set()
        self._locks: list[threading.RLock] = []

    def take(self, session_ids: Iterable[str], *, wait: bool) -> bool:
        """Hold the locks of ``session_ids`` (waiting for each when ``wait``); False, holding
        none of these, when one is not free at once (``wait`` false)."""
        if type(self._core.store).run_call is SessionStore.run_call:  # (each delete its own commit)
            return True
        wanted = sorted({stripe(sid) for sid in session_ids} - self._stripes)
        got: list[threading.RLock] = []
        for i in wanted:
            lock = self._core.stripe_lock(i)
            if not lock.acquire(blocking=wait):
                for taken in reversed(got):
                    taken.release()
                return False
            got.append(lock)
        self._stripes.update(wanted)
        self._locks.extend(got)
        return True

    def __enter__(self) -> _Held:
        return self

    def __exit__(self, *_: object) -> None:
        locks, self._locks = self._locks, []
        self._stripes.clear()
        for lock in reversed(locks):
            lock.release()


def _tree_order(core: ServiceCore, root: str) -> list[str]:
    """The stored sessions of ``root``'s tree, every child before its parent.
    Deleting in this order, a crash leaves no child without its parent;
    descendants of an already deleted root are still found (by the id)."""
    with storage_errors():
        metas = core.store.list_metas()
    children: dict[str, list[Meta]] = {}
    stored: set[str] = set()
    for meta in metas:
        stored.add(meta["session_id"])
        parent = _parent_of(meta)
        if parent is not None:
            children.setdefault(parent, []).append(meta)
    order: list[str] = []
    seen = {root}
    # Iterative post-order (a deep chain of sub-agents must not hit the recursion limit).
    stack: list[tuple[str, bool]] = [(root, False)]
    while stack:
        session_id, expanded = stack.pop()
        if expanded:
            if session_id in stored:
                order.append(session_id)
            continue
        stack.append((session_id, True))
        kids = sorted(children.get(session_id, ()), key=lambda m: (m["created_at"], m["session_id"]))
        for kid in reversed(kids):
            if kid["session_id"] not in seen:  # a cycle of parents is cut here
                seen.add(kid["session_id"])
                stack.append((kid["session_id"], False))
    return order


def _parent_of(meta: Meta) -> str | None:
    metadata = meta.get("metadata")
    parent = metadata.get(PARENT_KEY) if isinstance(metadata, dict) else None
    return parent if isinstance(parent, str) else None

