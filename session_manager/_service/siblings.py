"""Sibling entries: the versions of one turn (an edited message and its
original, a regenerated reply and the earlier ones).

No wire function lists an entry's children, so the typed helpers
(``sm.alternatives``) read them here, through the store interface every
adapter implements. A read: no lock, no write, no event.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..store.base import Entry
from .core import ServiceCore
from .storage_errors import storage_errors


@dataclass(frozen=True)
class Siblings:
    """Every entry sharing one parent, in creation order, and which of them are on the active path."""

    entries: list[Entry]
    active: frozenset[str]


def siblings(service: ServiceCore, session_id: str, entry_id: str) -> Siblings:
    """The entries whose parent is ``entry_id``'s (``entry_id`` included; the
    roots when it is a root), in the order they were appended.

    Raises ``session/not_found`` or ``session/entry_not_found`` for unknown ids.
    """
    with storage_errors():
        service._meta_or_raise(session_id)
        entry = service._entry_or_raise(session_id, entry_id)
        parent = entry.get("parent_id")
        # entries() is in append order on every adapter (fs and memory: insertion order of the
        # session's entry map, a revision keeping its place; postgres: ORDER BY seq).
        found = [e for e in service.store.entries(session_id) if e.get("parent_id") == parent]
        path = service._path(session_id, service.store.get_leaf(session_id))
        active = frozenset(e["id"] for e in found if path.index_of(e["id"]) is not None)
    return Siblings(found, active)
