"""Lazy entry bodies: a session's entries as ids, parents and log locations,
each body decoded from its log line the first time it is read.

Replay (and the index sidecar) already validated every line fully, so a
body read here only re-parses bytes known to be a valid record. The mapping
behaves like the ``dict`` :class:`~._state.SessionState` used before:
insertion order is first-put order, ``entries[id] = entry`` replaces a
body (and forgets its old location until the writer notes the new one).
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

from ..errors import StoreError
from ._records import decode_record

Entry = dict[str, Any]
# Reads ``length`` bytes at ``offset`` of the session's current log.
ReadAt = Callable[[int, int], bytes]


def pread_file(path: str) -> ReadAt:
    """A :data:`ReadAt` that opens ``path`` for each read (the fallback
    when no descriptor cache is wired in)."""

    def read(offset: int, length: int) -> bytes:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            return os.pread(fd, length, offset)
        finally:
            os.close(fd)

    return read


NO_PARENT = -1
ORPHAN = -2  # a parent id that names no stored entry (kept in ``orphans``)


class LazyEntries(MutableMapping[str, Entry]):
    """``id -> entry`` with bodies decoded on demand.

    In first-put order: every live id, the position of its parent
    (:data:`NO_PARENT`, or :data:`ORPHAN` with the id kept aside), and the
    (offset, length) of its newest line (offset ``-1``: not yet noted), in
    compact arrays, so path walks never decode a body and an index is written
    by dumping the arrays as they are. ``_bodies`` holds the decoded (or
    freshly written) bodies. Callers hold the session's lock, as they did
    over the plain dict.
    """

    __slots__ = ("_bodies", "_ids", "_lens", "_offs", "_orphans", "_parents", "_pos", "_read", "_session_id",
                 "_unlocated", "body_bytes")

    def __init__(self, session_id: str, read: ReadAt | None = None) -> None:
        self._session_id = session_id
        self._read = read
        self._pos: dict[str, int] = {}
        self._ids: list[str] = []
        self._parents = array("i")
        self._orphans: dict[int, str] = {}
        self._offs = array("q")
        self._lens = array("i")
        self._unlocated = 0
        self._bodies: dict[str, Entry] = {}
        # Log bytes behind the decoded bodies: the cache budget's estimate.
        self.body_bytes = 0

    # -- building ----------------------------------------------------------------

    def load_arrays(self, ids: list[str], parents: array[int], orphans: dict[int, str], offsets: array[int],
                    lengths: array[int]) -> None:
        """Start from an index's arrays (which this mapping then owns)."""
        self._ids, self._parents, self._orphans, self._offs, self._lens = ids, parents, orphans, offsets, lengths
        self._pos = dict(zip(ids, range(len(ids)), strict=True))
        self._unlocated = 0
        self._bodies = {}
        self.body_bytes = 0

    def arrays(self) -> tuple[list[str], array[int], dict[int, str], array[int], array[int]]:
        """ids, parent positions, orphaned parents, offsets, lengths (every
        entry located: see :meth:`fully_located`)."""
        return self._ids, self._parents, self._orphans, self._offs, self._lens

    def rebase(self, read: ReadAt, locations: dict[str, tuple[int, int]]) -> None:
        """Point at a rewritten log (compaction): new locations, same bodies."""
        self._read = read
        for eid, i in self._pos.items():
            self._offs[i], self._lens[i] = locations[eid]
        self._unlocated = 0

    def note_location(self, entry_id: str, offset: int, length: int) -> None:
        """Where the body just written for ``entry_id`` now lives in the log."""
        i = self._pos.get(entry_id)
        if i is not None:
            if self._offs[i] < 0:
                self._unlocated -= 1
            self._offs[i], self._lens[i] = offset, length

    def location(self, entry_id: str) -> tuple[int, int] | None:
        i = self._pos.get(entry_id)
        return None if i is None or self._offs[i] < 0 else (self._offs[i], self._lens[i])

    def _parent_at(self, i: int) -> str | None:
        j = self._parents[i]
        if j >= 0:
            return self._ids[j]
        return self._orphans.get(i) if j == ORPHAN else None

    def parent_of(self, entry_id: str) -> str | None:
        i = self._pos.get(entry_id)
        return None if i is None else self._parent_at(i)

    def linear_path(self, leaf: str) -> tuple[list[str], dict[str, int]] | None:
        """The active path when it is every entry in put order (an unbranched
        session, the common case): copies of the id list and position map,
        no walk. ``None`` when the session has branched."""
        ids, parents = self._ids, self._parents
        if not ids or ids[-1] != leaf or parents != array("i", range(-1, len(ids) - 1)):
            return None
        return list(ids), dict(self._pos)

    def walk(self, leaf: str) -> list[str] | None:
        """Ids from the root to ``leaf`` along parent links; ``None`` when a
        link is missing or loops (the caller's generic walk says where)."""
        i = self._pos.get(leaf)
        if i is None:
            return None
        ids, parents = self._ids, self._parents
        out: list[str] = []
        limit = len(ids)
        while i >= 0:
            if len(out) > limit:
                return None
            out.append(ids[i])
            i = parents[i]
        if i == ORPHAN:
            return None
        out.reverse()
        return out

    def fully_located(self) -> bool:
        """Every live entry has a known log line (an index can be written)."""
        return self._unlocated == 0

    def live_bytes(self) -> int:
        """The log bytes the live entries' newest lines take."""
        return sum(self._lens) + len(self._lens)

    def footprint(self) -> int:
        """Approximate bytes this mapping holds in memory (the cache budget)."""
        ids = len(self._ids)
        return ids * 120 + 3 * self.body_bytes + 64 * len(self._bodies)

    def drop_bodies(self) -> int:
        """Forget every decoded body that can be read back; the bytes freed."""
        freed = self.body_bytes
        offs, pos = self._offs, self._pos
        self._bodies = {eid: b for eid, b in self._bodies.items() if offs[pos[eid]] < 0}
        self.body_bytes = 0
        return freed

    # -- the mapping -------------------------------------------------------------

    def __getitem__(self, entry_id: str) -> Entry:
        body = self.get(entry_id)
        if body is None:
            raise KeyError(entry_id)
        return body  # type: ignore[no-any-return]

    def get(self, entry_id: str, default: Any = None) -> Any:
        body = self._bodies.get(entry_id)
        if body is not None:
            return body
        i = self._pos.get(entry_id)
        if i is None or self._offs[i] < 0:
            return default
        return self._decode(entry_id, self._offs[i], self._lens[i])

    def _decode(self, entry_id: str, offset: int, length: int) -> Entry:
        if self._read is None:
            raise StoreError(f"entry {entry_id} of session {self._session_id} has no readable log")
        try:
            line = self._read(offset, length)
        except OSError as e:
            raise StoreError(f"read entry {entry_id} of session {self._session_id}: {e}") from e
        record = decode_record(line, self._session_id)
        entry = record.get("entry") if record is not None else None
        if not isinstance(entry, dict) or entry.get("id") != entry_id:
            # The log changed under an index that matched it when loaded: not
            # ours to guess, so say so instead of handing out a wrong entry.
            raise StoreError(f"log of session {self._session_id} changed under its index (entry {entry_id})")
        self._bodies[entry_id] = entry
        self.body_bytes += length
        return entry

    def _link(self, i: int, parent: Any) -> None:
        """Set entry ``i``'s parent link (``parents[i]`` exists)."""
        self._orphans.pop(i, None)
        if not isinstance(parent, str):
            self._parents[i] = NO_PARENT
            return
        j = self._pos.get(parent)
        if j is None:
            self._parents[i] = ORPHAN
            self._orphans[i] = parent
        else:
            self._parents[i] = j

    def __setitem__(self, entry_id: str, entry: Entry) -> None:
        i = self._pos.get(entry_id)
        if i is None:
            i = self._pos[entry_id] = len(self._ids)
            self._ids.append(entry_id)
            self._parents.append(NO_PARENT)
            self._offs.append(-1)
            self._lens.append(0)
            self._unlocated += 1
        elif self._offs[i] >= 0:
            self._unlocated += 1
            self._offs[i] = -1  # the new body's line is noted by the writer
        self._link(i, entry.get("parent_id"))
        # An entry that was some earlier entry's missing parent is one no more.
        if self._orphans and entry_id in self._orphans.values():
            for k in [k for k, p in self._orphans.items() if p == entry_id]:
                del self._orphans[k]
                self._parents[k] = i
        self._bodies[entry_id] = entry

    def __delitem__(self, entry_id: str) -> None:
        # Rare (no store path deletes one entry): rebuild from what stays.
        keep = [(eid, self.parent_of(eid), self.location(eid), self._bodies.get(eid))
                for eid in self._ids if eid != entry_id]
        if len(keep) == len(self._ids):
            raise KeyError(entry_id)
        self.__init__(self._session_id, self._read)  # type: ignore[misc]
        for eid, parent, loc, body in keep:
            self[eid] = body if body is not None else {"id": eid, "parent_id": parent}
            if body is None:
                self._bodies.pop(eid)
            if loc is not None:
                self.note_location(eid, *loc)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._pos

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)
