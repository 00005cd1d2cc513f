"""Sibling entries: the versions of one turn (an edited message and its
original, a regenerated reply and the earlier ones).

No wire function lists an entry's children, so the typed helpers
(``sm.alternatives``) read them here, through the store interface every
adapter implements. A read: no lock, no write, no event.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..store.base import Entry
from .service import SessionService
from .storage_errors import storage_errors


@dataclass(frozen=True)
class Siblings:
    """Every entry sharing one parent, in creation order, and which of them are on the active path."""

    entries: list[Entry]
    active: frozenset[str]


def siblings(service: SessionService, session_id: str, entry_id: str) -> Siblings:
    """The entries whose parent is ``entry_id``'s (``entry_id`` included; the
    roots when it is a root), in the order they were appended.

    Raises ``session/not_found`` or ``session/entry_not_found`` for unknown ids.
    """
    core = service.core
    with storage_errors():
        core.meta_or_raise(session_id)
        entry = core.entry_or_raise(session_id, entry_id)
        parent = entry.get("parent_id")
        # entries() is in append order on every adapter (fs and memory: insertion order of the
        # session's entry map, a revision keeping its place; postgres: ORDER BY seq).
        found = [e for e in core.store.entries_held(session_id) if e.get("parent_id") == parent]
        path = core.path(session_id, core.store.get_leaf(session_id))
        active = frozenset(e["id"] for e in found if path.index_of(e["id"]) is not None)
    return Siblings(found, active)
