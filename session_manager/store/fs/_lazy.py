"""Lazy entry bodies: a session's entries as ids, parents and log locations,
each body decoded from its log line the first time it is read.

Replay (and the index sidecar) already validated every line fully, so a
body read here only re-parses bytes known to be a valid record. The mapping
behaves like the ``dict`` :class:`~._state.SessionState` used before:
insertion order is first-put order, ``entries[id] = entry`` replaces a
body (and forgets its old location until the writer notes the new one).

Loaded from an index, nothing is built per entry: ids stay in the index's
blob (:class:`~._sidecar_format.PackedIds`) and the id -> position map is
made only when a by-id lookup needs it more than a few times (a lookup
before that is a scan of the blob); the active path is positions, walked
from the leaf through the parent array (:class:`~._lazy_path.LazyPath`).
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

from ._fileops import ReadAt
from ._lazy_bodies import BodyReads
from ._lazy_path import NO_PARENT, ORPHAN, LazyPath, Positions, walk_up
from ._sidecar_format import SCANS_BEFORE_MAP, IndexBody, PackedIds, pack_ids

Entry = dict[str, Any]


# Guards the one-time builds of a mapping's id list and position map (rare,
# brief: one lock for every mapping).
_BUILD = threading.RLock()

class LazyEntries(BodyReads, MutableMapping[str, Entry]):
    """``id -> entry`` with bodies decoded on demand.

    In first-put order: every live id, the position of its parent
    (:data:`NO_PARENT`, or :data:`ORPHAN` with the id kept aside), and the
    (offset, length) of its newest line (offset ``-1``: not yet noted), in
    compact arrays, so path walks never decode a body and an index is written
    by dumping the arrays as they are. ``_bodies`` holds the decoded (or
    freshly written) bodies. Callers hold the session's lock, as they did
    over the plain dict.
    """

    __slots__ = ("_bodies", "_current", "_guard", "_ids", "_lens", "_linear", "_live", "_offs", "_orphans",
                 "_packed", "_parents", "_path", "_pos", "_read", "_scans", "_session_id", "_unlocated", "body_bytes")

    def __init__(self, session_id: str, read: ReadAt | None = None) -> None:
        self._session_id = session_id
        self._read = read
        # The session's lock, once a store holds these arrays (:meth:`guard`): a decoded body
        # is cached under it, and only while its line is still the entry's newest.
        self._guard: threading.RLock | None = None
        # Ids: a list, or (loaded from an index, until an id is added) the
        # index's blob; the position map only once a lookup needs it.
        self._ids: list[str] | None = []
        self._packed: PackedIds | None = None
        self._pos: dict[str, int] | None = {}
        self._scans = 0
        self._parents = array("i")
        self._orphans: dict[int, str] = {}
        self._offs = array("q")
        self._lens = array("i")
        self._live: int | None = 0  # the sum :meth:`live_bytes` reports (None: to be summed)
        self._unlocated = 0
        self._bodies: dict[str, Entry] = {}
        # Every parent link is "the entry put just before" (None: not known yet).
        self._linear: bool | None = True
        # The last active path handed out: (leaf position, positions).
        self._path: tuple[int, Positions] | None = None
        # Log bytes behind the decoded bodies: the cache budget's estimate.
        self.body_bytes = 0
        # Set once the store dropped this mapping from its cache (:meth:`detach`).
        self._current: Callable[[str], Entry | None] | None = None

    # -- building ----------------------------------------------------------------

    def load_index(self, body: IndexBody) -> None:
        """Start from an index's arrays (which this mapping then owns)."""
        self._ids, self._packed, self._pos, self._scans = None, body.ids, None, 0
        self._parents, self._orphans, self._offs, self._lens = body.parents, body.orphans, body.offsets, body.lengths
        self._linear = bool(body["linear"])
        live = body.header.get("live")
        self._live = live if type(live) is int else None
        self._path = None
        self._unlocated = 0
        self._bodies = {}
        self.body_bytes = 0

    def arrays(self) -> tuple[PackedIds, array[int], dict[int, str], array[int], array[int]]:
        """ids, parent positions, orphaned parents, offsets, lengths (every
        entry located: see :meth:`fully_located`)."""
        packed = self._packed if self._packed is not None else pack_ids(self._id_list())
        return packed, self._parents, self._orphans, self._offs, self._lens

    def linear(self) -> bool:
        """Every entry's parent is the one put before it (an unbranched session)."""
        if self._linear is None:
            self._linear = self._parents == array("i", range(-1, len(self._parents) - 1))
        return self._linear

    def rebase(self, read: ReadAt, locations: dict[str, tuple[int, int]]) -> None:
        """Point at a rewritten log (compaction): new locations, same bodies."""
        self._read = read
        for eid, i in self._positions().items():
            self._offs[i], self._lens[i] = locations[eid]
        self._unlocated = 0
        self._live = None

    def note_location(self, entry_id: str, offset: int, length: int) -> None:
        """Where the body just written for ``entry_id`` now lives in the log."""
        i = self._index_of(entry_id)
        if i is not None:
            if self._offs[i] < 0:
                self._unlocated -= 1
            self._offs[i], self._lens[i] = offset, length
            self._live = None
            if entry_id in self._bodies:
                self.body_bytes += length  # a written body stays decoded: the budget counts it

    def put_written(self, entry: Entry, offset: int, length: int) -> None:
        """``self[id] = entry`` then :meth:`note_location` for a body a commit just
        wrote at (``offset``, ``length``): kept decoded (the budget counts it). A new
        entry (every append) is put located in one step, no lookup after the first."""
        entry_id = entry["id"]
        pos = self._pos
        if pos is None or type(entry_id) is not str or entry_id in pos:
            self[entry_id] = entry
            self.note_location(entry_id, offset, length)
            return
        self._bodies[entry_id] = entry  # its line is written already: a reader finds one or the other
        self._put_new(pos, entry_id, entry, offset, length)
        self.body_bytes += length

    def location(self, entry_id: str) -> tuple[int, int] | None:
        i = self._index_of(entry_id)
        return None if i is None or self._offs[i] < 0 else (self._offs[i], self._lens[i])

    # -- ids and positions -------------------------------------------------------

    # Readers (outside the session's lock) may build the list or the map while
    # a writer waits to add to it: built under _BUILD, the list published
    # before the blob is dropped, so a reader holding either sees every id.

    def id_at(self, i: int) -> str:
        packed = self._packed
        if packed is not None and i < packed.n:
            return packed.at(i)
        ids = self._ids
        assert ids is not None
        return ids[i]

    def _id_list(self) -> list[str]:
        """The ids as a list (decoding the blob once: an id is being added, or all are listed)."""
        ids = self._ids
        if ids is None:
            with _BUILD:
                ids = self._ids
                if ids is None:
                    assert self._packed is not None
                    ids = self._ids = self._packed.all()
                    self._packed = None
        return ids

    def _positions(self) -> dict[str, int]:
        pos = self._pos
        if pos is None:
            with _BUILD:
                pos = self._pos
                if pos is None:
                    ids = self._id_list()
                    pos = self._pos = dict(zip(ids, range(len(ids)), strict=True))
        return pos

    def _index_of(self, entry_id: object) -> int | None:
        """The position of ``entry_id``: from the map, or (a few times, before
        the map is worth building) by a scan of the index's id blob."""
        if not isinstance(entry_id, str):
            return None
        pos = self._pos
        if pos is not None:
            return pos.get(entry_id)
        packed = self._packed
        if packed is not None and packed.plain and self._scans < SCANS_BEFORE_MAP:
            self._scans += 1
            return packed.find(entry_id)
        return self._positions().get(entry_id)

    def position(self, entry_id: str) -> int | None:
        return self._index_of(entry_id)

    def _parent_at(self, i: int) -> str | None:
        j = self._parents[i]
        if j >= 0:
            return self.id_at(j)
        return self._orphans.get(i) if j == ORPHAN else None

    def parent_of(self, entry_id: str) -> str | None:
        i = self._index_of(entry_id)
        return None if i is None else self._parent_at(i)

    def _leaf_position(self, leaf: str) -> int | None:
        n = len(self._parents)
        if n and self.id_at(n - 1) == leaf:  # the usual leaf: no lookup by id
            return n - 1
        return self._index_of(leaf)

    def path_positions(self, leaf: str) -> Positions | None:
        """Positions from the root to ``leaf`` along parent links; ``None``
        when a link is missing or loops (the caller's generic walk says where).
        An unbranched session's path is a ``range``: nothing is walked."""
        p = self._leaf_position(leaf)
        if p is None:
            return None
        cached = self._path
        if cached is not None:
            q, seq = cached
            if q == p:
                return seq
            if self._parents[p] == q:  # one step on from the last path (an append)
                if isinstance(seq, range) and p == seq.stop:
                    seq = range(p + 1)
                else:
                    if isinstance(seq, range):
                        seq = array("i", seq)
                    seq.append(p)  # in place: the views handed out are bounded by their length
                self._path = (p, seq)
                return seq
        found = range(p + 1) if self.linear() else walk_up(self._parents, p)
        if found is not None:
            self._path = (p, found)
        return found

    def path_view(self, leaf: str) -> LazyPath | None:
        """The active path ending at ``leaf``, read by position."""
        positions = self.path_positions(leaf)
        return None if positions is None else LazyPath(self, self, positions)

    def walk(self, leaf: str) -> list[str] | None:
        """Ids from the root to ``leaf`` along parent links; ``None`` when a
        link is missing or loops (the caller's generic walk says where)."""
        positions = self.path_positions(leaf)
        return None if positions is None else [self.id_at(i) for i in positions]

    def fully_located(self) -> bool:
        """Every live entry has a known log line (an index can be written)."""
        return self._unlocated == 0

    def live_bytes(self) -> int:
        """The log bytes the live entries' newest lines take (kept in the index:
        summing 100k lengths costs more than the rest of a load)."""
        if self._live is None:
            self._live = sum(self._lens) + len(self._lens)
        return self._live

    def footprint(self) -> int:
        """Approximate bytes this mapping holds in memory (the cache budget).
        Measured with tracemalloc (tests/unit/test_memory_bound.py) on the
        packed index: an entry costs ~50-60 bytes while its id stays packed and
        ~100 once reads decode the ids, a decoded body ~2.5x its line plus
        ~100 bytes of its own; 120 per entry keeps the estimate above both."""
        ids = len(self._parents)
        return ids * 120 + 5 * self.body_bytes // 2 + 128 * len(self._bodies)

    def drop_bodies(self) -> int:
        """Forget every decoded body that can be read back; the bytes freed."""
        freed = self.body_bytes
        if self._bodies:
            offs, at = self._offs, self._index_of
            self._bodies = {eid: b for eid, b in self._bodies.items() if offs[at(eid)] < 0}  # type: ignore[index]
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
        i = self._index_of(entry_id)
        if i is None:
            return default
        offset = self._offs[i]
        if offset < 0:  # replaced since the look above (its body is held before its line is forgotten)
            return self._bodies.get(entry_id, default)
        return self._decode(i, entry_id, offset, self._lens[i])

    def body_at(self, i: int) -> Entry:
        """The body of the entry at position ``i`` (no lookup by id)."""
        return self.body_of(i, self.id_at(i))

    def body_of(self, i: int, entry_id: str) -> Entry:
        """:meth:`body_at` when the caller knows the id at ``i``."""
        body = self._bodies.get(entry_id)
        if body is not None:
            return body
        offset = self._offs[i]
        if offset < 0:  # replaced since the look above (its body is held before its line is forgotten)
            body = self._bodies.get(entry_id)
            if body is None:
                raise KeyError(entry_id)
            return body
        return self._decode(i, entry_id, offset, self._lens[i])

    def _link(self, i: int, parent: Any, new: bool) -> None:
        """Set entry ``i``'s parent link (``parents[i]`` exists)."""
        old = self._parents[i]
        self._orphans.pop(i, None)
        if not isinstance(parent, str):
            self._parents[i] = NO_PARENT
        else:
            j = self._index_of(parent)
            if j is None:
                self._parents[i] = ORPHAN
                self._orphans[i] = parent
            else:
                self._parents[i] = j
        if new:
            if self._linear and self._parents[i] != i - 1:
                self._linear = False
        elif self._parents[i] != old or old == ORPHAN:
            self._relinked()

    def _relinked(self) -> None:
        """An existing entry's parent changed: paths and linearity are re-derived."""
        self._linear = None
        self._path = None

    def __setitem__(self, entry_id: str, entry: Entry) -> None:
        pos = self._pos
        i = pos.get(entry_id) if pos is not None and type(entry_id) is str else self._index_of(entry_id)
        if i is None:  # a new entry (every append)
            self._put_new(self._positions() if pos is None else pos, entry_id, entry, -1, 0)
            self._unlocated += 1  # its line is noted by the writer
            self._bodies[entry_id] = entry
            return
        located = self._offs[i] >= 0
        if located and entry_id in self._bodies:
            self.body_bytes -= self._lens[i]  # the body it replaces
        # The new body before the old line is forgotten: a reader outside the lock finds one or the other.
        self._bodies[entry_id] = entry
        if located:
            self._unlocated += 1
            self._offs[i] = -1  # the new body's line is noted by the writer
        self._link(i, entry.get("parent_id"), False)
        if self._orphans and entry_id in self._orphans.values():
            self._adopted(entry_id, i)

    def _put_new(self, pos: dict[str, int], entry_id: str, entry: Entry, offset: int, length: int) -> None:
        """Add ``entry_id`` (not in ``pos``, the position map) at the next position,
        linked to its parent, located at (``offset``, ``length``; ``-1``: not yet noted)."""
        i = pos[entry_id] = len(self._parents)
        (self._ids if self._ids is not None else self._id_list()).append(entry_id)
        parent = entry.get("parent_id")
        j = NO_PARENT
        if isinstance(parent, str):
            j = pos.get(parent, ORPHAN)
            if j == ORPHAN:
                self._orphans[i] = parent
        self._parents.append(j)
        self._offs.append(offset)
        self._lens.append(length)
        self._live = None
        if self._linear and j != i - 1:
            self._linear = False
        if self._orphans and entry_id in self._orphans.values():
            self._adopted(entry_id, i)

    def put_located(self, entry: Entry, offset: int, length: int) -> None:
        """``self[id] = entry`` for a body replay just read from the log line
        at (``offset``, ``length``): only its location is kept, no body."""
        entry_id = entry["id"]
        pos = self._positions()
        i = pos.get(entry_id)
        if i is None:  # a new entry (nearly every line of a replay)
            self._put_new(pos, entry_id, entry, offset, length)
            return
        if self._offs[i] < 0:
            self._unlocated -= 1
        self._offs[i], self._lens[i] = offset, length
        self._live = None
        if self._bodies:
            self._bodies.pop(entry_id, None)
        self._link(i, entry.get("parent_id"), False)
        if self._orphans and entry_id in self._orphans.values():
            self._adopted(entry_id, i)

    def _adopted(self, entry_id: str, i: int) -> None:
        """``entry_id`` (at ``i``) was some earlier entries' missing parent: it is one no more."""
        for k in [k for k, p in self._orphans.items() if p == entry_id]:
            del self._orphans[k]
            self._parents[k] = i
        self._relinked()

    def __delitem__(self, entry_id: str) -> None:
        # Rare (no store path deletes one entry): rebuild from what stays.
        ids = list(self._id_list())
        keep = [(eid, self.parent_of(eid), self.location(eid), self._bodies.get(eid))
                for eid in ids if eid != entry_id]
        if len(keep) == len(ids):
            raise KeyError(entry_id)
        self.__init__(self._session_id, self._read)  # type: ignore[misc]
        for eid, parent, loc, body in keep:
            self[eid] = body if body is not None else {"id": eid, "parent_id": parent}
            if body is None:
                self._bodies.pop(eid)
            if loc is not None:
                self.note_location(eid, *loc)

    def __contains__(self, entry_id: object) -> bool:
        pos = self._pos
        if pos is not None and type(entry_id) is str:  # (:meth:`_index_of`'s map case, inline: every commit asks)
            return entry_id in pos
        return self._index_of(entry_id) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._id_list())

    def __len__(self) -> int:
        return len(self._parents)
