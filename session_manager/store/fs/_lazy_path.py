"""The active path of a lazily held session, by entry position.

:class:`~._lazy.LazyEntries` hands out the root -> leaf chain as positions
(a ``range`` when the session never branched), so taking the path of a
20k-entry session builds no id list and no id -> index map: ``path[i]``
decodes one id and one body, ``index_of`` looks one id up.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping
from typing import Any, Protocol, TypeAlias

from ..path import EntryPath

Entry = dict[str, Any]
NO_PARENT = -1
ORPHAN = -2  # a parent id that names no stored entry (the mapping keeps it aside)
Positions: TypeAlias = "range | array[int]"  # an active path as entry positions, root first


class PositionedEntries(Protocol):
    """What a :class:`LazyPath` reads of its entries (:class:`~._lazy.LazyEntries`
    provides it): ids and bodies by position."""

    def id_at(self, p: int) -> str: ...

    def body_of(self, p: int, entry_id: str) -> Entry: ...

    def body_at(self, p: int) -> Entry: ...

    def position(self, entry_id: str) -> int | None: ...


def walk_up(parents: array[int], p: int) -> array[int] | None:
    """Positions from the root to ``p`` through ``parents``; ``None`` when a
    link names no stored entry or the links loop."""
    out = array("i")
    limit = len(parents)
    i = p
    while i >= 0:
        if len(out) > limit:
            return None
        out.append(i)
        i = parents[i]
    if i == ORPHAN:
        return None
    out.reverse()
    return out


class LazyPath(EntryPath):
    """An :class:`EntryPath` over entry positions, bounded to the length it
    had when taken (the positions may be extended in place by later appends)."""

    __slots__ = ("_at", "_id_at", "_lazy")

    def __init__(self, entries: Mapping[str, Entry], reads: PositionedEntries, positions: Positions) -> None:
        """``entries`` and ``reads``: the same lazy mapping, as a mapping and by position."""
        super().__init__([], entries, {}, length=len(positions))
        self._lazy = reads
        self._at = positions
        # Readers ask for the same few indexes several times (is it kept? a run member?):
        # their ids are decoded once per view (positions are stable: only ``del``, which
        # no store path uses, renumbers them).
        self._id_at: dict[int, str] = {}

    def __getitem__(self, index: int) -> Entry:
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(index)
        p = self._at[index]
        entry_id = self._id_at.get(p)
        if entry_id is None:
            entry_id = self._id_at[p] = self._lazy.id_at(p)
        return self._lazy.body_of(p, entry_id)

    def __iter__(self) -> Iterator[Entry]:
        body_at, at = self._lazy.body_at, self._at
        for i in range(self._len):
            yield body_at(at[i])

    def index_of(self, entry_id: str) -> int | None:
        p = self._lazy.position(entry_id)
        if p is None:
            return None
        at = self._at
        if isinstance(at, range):
            return p if p < self._len else None  # a path that is a range starts at 0
        try:
            return at.index(p, 0, self._len)
        except ValueError:
            return None

    @property
    def leaf(self) -> str | None:
        return self._lazy.id_at(self._at[self._len - 1]) if self._len else None
