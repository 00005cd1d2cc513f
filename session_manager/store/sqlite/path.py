"""The sqlite adapter's view of a session's active path: the shared window
reader (:class:`..sql.path.WindowPath`), with each window
read as one range scan of the ``entries_depth`` index instead of a walk.

Every entry's depth is its parent's plus one, so the path's entries at
depths ``lo..hi`` are among the session's entries at those depths. One
ordered scan of them (newest depth first) and a walk of their ``parent_id``
from the window's start picks the path's: exact on a branched session,
and on a linear one (the common case) every row read is a row returned. A
window whose depths hold many branches (more rows than ``SLACK`` times its
span), or whose start lies far above it, is read by the jump-pointer walk
instead, which costs O(window + log depth) however the session branches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import Entry
from ..sql.keys import key
from ..sql.path import PATH_WINDOW, WindowPath

if TYPE_CHECKING:
    from .core import SqliteDatastore

__all__ = ["SqlitePath"]

SLACK = 2  # rows per depth a window's scan may read before the walk is cheaper


_RANGE_SQL = ("SELECT body FROM entries WHERE session_id = ? AND depth BETWEEN ? AND ?"
              " ORDER BY depth DESC LIMIT ?")


class SqlitePath(WindowPath):
    """A session's root -> leaf chain, read a window at a time by depth range."""

    __slots__ = ("_decode",)

    def __init__(self, db: SqliteDatastore, session_id: str, leaf: str, depth: int) -> None:
        super().__init__(db, session_id, leaf, depth)
        self._decode = db.decoded

    def _window(self, start: str, start_depth: int, lo: int, hi: int) -> list[tuple[str, int, Entry]]:
        span = start_depth - lo + 1
        if start_depth - hi > PATH_WINDOW:  # far above the window: the jump pointers get there sooner
            return super()._window(start, start_depth, lo, hi)
        limit = span * SLACK
        rows = self._store.rows(_RANGE_SQL, (key(self._session), lo, start_depth, limit))
        if len(rows) >= limit:  # a bushy stretch: rows off the path would outnumber those on it
            return super()._window(start, start_depth, lo, hi)
        decode = self._decode
        if len(rows) == span:
            # One entry per depth (the path has one at each): the rows are the path's, if the
            # first is the start (else the session changed meanwhile: the walk below finds out).
            entries: list[Entry] = decode.rows(rows)
            if entries[0]["id"] == start:
                return [(e["id"], start_depth - k, e) for k, e in enumerate(entries) if start_depth - k <= hi]
        out: list[tuple[str, int, Entry]] = []
        want: str | None = start
        depth = start_depth
        for (body,) in rows:
            # Rows come deepest first; the path's entry at each depth is the one its child names.
            entry: Entry = decode(body)
            eid: str = entry["id"]
            if eid != want:
                continue
            if depth <= hi:
                out.append((eid, depth, entry))
            want, depth = entry.get("parent_id"), depth - 1
            if want is None or depth < lo:
                break
        return out
