"""A session's root -> leaf chain, read from the database a window at a time.

The service pages a path by index (``path[i]``, ``index_of``) from its end,
so this view fetches only the windows it is asked for: each fetch is one
recursive query that jumps from the nearest entry already read down to the
window's top (skew-binary jump pointers: O(log distance) index probes) and
then follows parent links through the window (one probe per entry). A
``messages-tail`` page therefore reads O(page + log length) rows, plus the
rows of an activity run it collapses (a run is read whole to elide it).

Parent links never change once written, so windows read at different
moments still belong to one chain; an entry's body is whatever revision was
current when its window was read (as with the fs store's shared cache).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from ...errors import SessionError, StoreError
from .._core.codec import loads_texts
from ..base import Entry
from ..path import EntryPath
from .keys import key, unkey

__all__ = ["HIT_SQL", "PATH_WINDOW", "Rows", "WindowPath"]

PATH_WINDOW = 64  # entries per fetch: one round trip serves a typical page

_WINDOW_SQL = """
WITH RECURSIVE w(entry_id, parent_id, depth, jump_id, jump_depth) AS (
    SELECT entry_id, parent_id, depth, jump_id, jump_depth
    FROM entries WHERE session_id = %(s)s AND entry_id = %(start)s
  UNION ALL
    SELECT e.entry_id, e.parent_id, e.depth, e.jump_id, e.jump_depth
    FROM w JOIN entries e ON e.session_id = %(s)s
     AND e.entry_id = CASE WHEN w.depth > %(b)s AND w.jump_depth >= %(b)s THEN w.jump_id ELSE w.parent_id END
    WHERE w.depth > %(a)s
)
SELECT e.entry_id, e.depth, e.body
FROM w JOIN entries e ON e.session_id = %(s)s AND e.entry_id = w.entry_id
WHERE w.depth BETWEEN %(a)s AND %(b)s
"""

# Whether an entry is on the chain ending at %(start)s: the walk of _WINDOW_SQL down to the
# entry's depth only, no body read (one statement, O(log distance) probes).
_HOLDS_SQL = """
WITH RECURSIVE t(depth) AS (
    SELECT depth FROM entries WHERE session_id = %(s)s AND entry_id = %(e)s
), w(entry_id, parent_id, depth, jump_id, jump_depth) AS (
    SELECT entry_id, parent_id, depth, jump_id, jump_depth
    FROM entries WHERE session_id = %(s)s AND entry_id = %(start)s
  UNION ALL
    SELECT e.entry_id, e.parent_id, e.depth, e.jump_id, e.jump_depth
    FROM w CROSS JOIN t JOIN entries e ON e.session_id = %(s)s
     AND e.entry_id = CASE WHEN w.depth > t.depth AND w.jump_depth >= t.depth THEN w.jump_id ELSE w.parent_id END
    WHERE w.depth > t.depth
)
SELECT 1 FROM w CROSS JOIN t WHERE w.depth = t.depth AND w.entry_id = %(e)s
"""

# A search hit's entry (its body) and whether it is on its session's active path, in one
# statement: _HOLDS_SQL's walk, started from the session's leaf.
HIT_SQL = """
WITH RECURSIVE t(depth) AS (
    SELECT depth FROM entries WHERE session_id = %(s)s AND entry_id = %(e)s
), w(entry_id, parent_id, depth, jump_id, jump_depth) AS (
    SELECT e.entry_id, e.parent_id, e.depth, e.jump_id, e.jump_depth
    FROM sessions s JOIN entries e ON e.session_id = s.session_id AND e.entry_id = s.leaf
    WHERE s.session_id = %(s)s
  UNION ALL
    SELECT e.entry_id, e.parent_id, e.depth, e.jump_id, e.jump_depth
    FROM w CROSS JOIN t JOIN entries e ON e.session_id = %(s)s
     AND e.entry_id = CASE WHEN w.depth > t.depth AND w.jump_depth >= t.depth THEN w.jump_id ELSE w.parent_id END
    WHERE w.depth > t.depth
)
SELECT (SELECT body FROM entries WHERE session_id = %(s)s AND entry_id = %(e)s),
       EXISTS (SELECT 1 FROM w CROSS JOIN t WHERE w.depth = t.depth AND w.entry_id = %(e)s)
"""


class Rows(Protocol):
    """The statements a path reader runs: its adapter's (a query in psycopg's
    placeholders), and how a failure of a lazy read reaches the caller."""

    def rows(self, query: Any, params: Any = None) -> list[tuple[Any, ...]]: ...

    def storage_error(self, e: BaseException) -> SessionError: ...


class WindowPath(EntryPath):
    """The chain ending at ``leaf`` (at ``depth``), fetched lazily by window."""

    __slots__ = ("_by_depth", "_depth_of", "_leaf_id", "_session", "_store", "_top")

    # The statements, as an adapter's schema spells them (sqlite: entries name their session by an
    # integer key, :mod:`..sqlite.path`).
    window_sql = _WINDOW_SQL
    holds_sql = _HOLDS_SQL
    depth_sql = "SELECT depth FROM entries WHERE session_id = %s AND entry_id = %s"

    def __init__(self, store: Rows, session_id: str, leaf: str, depth: int) -> None:
        super().__init__([], {})
        self._store = store
        self._session = session_id
        self._leaf_id = leaf
        self._top = depth
        self._len = depth + 1
        self._by_depth: dict[int, tuple[str, Entry]] = {}
        self._depth_of: dict[str, int] = {}

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> Entry:
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(index)
        found = self._by_depth.get(index)
        if found is None:
            self._fetch_around(index)
            found = self._by_depth.get(index)
            if found is None:
                raise self._changed()
        return found[1]

    def _changed(self) -> SessionError:
        """The answer to a window that no longer holds the path (the session changed meanwhile)."""
        return self._store.storage_error(StoreError(f"session {self._session} changed while its transcript was read"))

    def __iter__(self) -> Iterator[Entry]:
        for i in range(self._len):
            yield self[i]

    def index_of(self, entry_id: str) -> int | None:
        depth = self._depth_of.get(entry_id)
        if depth is None:
            try:
                rows = self._store.rows(self.depth_sql, (key(self._session), key(entry_id)))
            except StoreError as e:
                raise self._store.storage_error(e) from None
            if not rows or rows[0][0] > self._top:
                return None
            depth = rows[0][0]
            if depth not in self._by_depth:
                self._fetch_around(depth)  # the window holding the path's entry at that depth
        found = self._by_depth.get(depth)
        return depth if found is not None and found[0] == entry_id else None

    def holds(self, entry_id: str) -> bool:
        """Whether ``entry_id`` is on the path: from what was read, else by one walk down to
        its depth that reads no entry (a search's hits in many sessions: no window each)."""
        if entry_id in self._depth_of or self._leaf_id is None:
            return self.index_of(entry_id) is not None
        try:
            rows = self._store.rows(self.holds_sql, {"s": key(self._session), "start": key(self._leaf_id),
                                                 "e": key(entry_id)})
        except StoreError as e:
            raise self._store.storage_error(e) from None
        return bool(rows)

    def seed(self, rows: list[tuple[str, int, str]]) -> None:
        """Entries already read (id, depth, body text), e.g. with the session's meta."""
        by_depth, depth_of = self._by_depth, self._depth_of
        for (entry_id, depth, _), entry in zip(rows, loads_texts([body for _, _, body in rows]), strict=True):
            by_depth[depth] = (entry_id, entry)
            depth_of[entry_id] = depth

    @property
    def leaf(self) -> str | None:
        return self._leaf_id

    def _fetch_around(self, i: int) -> None:
        cached = self._by_depth
        below = max((d for d in cached if d < i), default=-1)
        above = min((d for d in cached if d > i), default=None)
        if i == self._top or (i + 1) in cached:
            lo, hi = max(below + 1, i - PATH_WINDOW + 1, 0), i  # paging backwards from the end
        else:
            lo, hi = i, min(self._top, i + PATH_WINDOW - 1, (above - 1) if above is not None else self._top)
        # Walk from the nearest entry already read above the window (else the leaf).
        start, start_depth = (cached[above][0], above) if above is not None else (self._leaf_id, self._top)
        try:
            rows = self._window(start, start_depth, lo, hi)
        except StoreError as e:
            raise self._store.storage_error(e) from None
        for eid, depth, entry in rows:
            cached[depth] = (eid, entry)
            self._depth_of[eid] = depth

    def _window(self, start: str, start_depth: int, lo: int, hi: int) -> list[tuple[str, int, Entry]]:
        """The path's entries at depths ``lo..hi`` (id, depth, entry), walking down from
        ``start`` (an entry of the path at ``start_depth`` > ``hi``, or the leaf at ``hi``)."""
        del start_depth  # the jump pointers find the window's top from any distance
        rows = self._store.rows(self.window_sql, {"s": key(self._session), "start": key(start), "a": lo, "b": hi})
        entries = loads_texts([body for _, _, body in rows])
        return [(unkey(entry_id), depth, entry) for (entry_id, depth, _), entry in zip(rows, entries, strict=True)]
