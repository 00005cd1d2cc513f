"""The active-path type every store hands out: the root -> leaf chain of a session.

A store type (returned by :meth:`SessionStore.path`), not a read model: the
service pages over it, the stores build and extend it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

Entry = dict[str, Any]

log = logging.getLogger("session_manager.transcript")


class EntryPath:
    """The root -> leaf chain of one session, oldest first.

    Backed by an id list plus a position map, so looking an entry up on the
    path is O(1) and a page costs O(page). The view is bounded to the length
    it had when taken: a store may extend the same list as appends arrive.
    """

    __slots__ = ("_entries", "_ids", "_len", "_pos")

    def __init__(
        self,
        ids: list[str],
        entries: Mapping[str, Entry],
        pos: Mapping[str, int] | None = None,
        length: int | None = None,
    ):
        self._ids = ids
        self._len = len(ids) if length is None else length
        self._entries = entries
        self._pos: Mapping[str, int] = pos if pos is not None else {eid: i for i, eid in enumerate(ids)}

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> Entry:
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(index)
        return self._entries[self._ids[index]]

    def __iter__(self) -> Iterator[Entry]:
        for i in range(self._len):
            yield self._entries[self._ids[i]]

    def index_of(self, entry_id: str) -> int | None:
        i = self._pos.get(entry_id)
        if i is None or i >= self._len or self._ids[i] != entry_id:
            return None
        return i

    def holds(self, entry_id: str) -> bool:
        """Whether ``entry_id`` is on this path. (A view that reads its entries lazily may
        answer without reading those around it, as :meth:`index_of` does to serve the
        reads of the path that usually follow.)"""
        return self.index_of(entry_id) is not None

    @property
    def leaf(self) -> str | None:
        return self._ids[self._len - 1] if self._len else None


def parent_of(entries: Mapping[str, Entry], entry_id: str) -> str | None:
    """The parent id of a stored entry, without decoding a lazily held body."""
    link = getattr(entries, "parent_of", None)
    if link is not None:
        parent: Any = link(entry_id)
    else:
        parent = entries[entry_id].get("parent_id")
    return parent if isinstance(parent, str) else None


def walk_to_root(entries: Mapping[str, Entry], leaf: str) -> list[str]:
    """Ids from the root to ``leaf``, following parent links.

    A missing link (an entry lost to a corrupt line) or a cycle ends the walk
    there with a warning: the reachable part of the transcript stays readable
    instead of the whole session failing.
    """
    fast = getattr(entries, "walk", None)
    walked: list[str] | None = fast(leaf) if fast is not None else None
    if walked is not None:
        return walked
    ids: list[str] = []
    seen: set[str] = set()
    cursor: str | None = leaf
    while cursor is not None:
        if cursor not in entries:
            if ids:
                log.warning("entry %s is missing; the path is read from its child on", cursor)
            break
        if cursor in seen:
            log.warning("parent chain loops at entry %s; the path is cut there", cursor)
            break
        seen.add(cursor)
        ids.append(cursor)
        cursor = parent_of(entries, cursor)
    ids.reverse()
    return ids
