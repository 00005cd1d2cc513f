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

A window's bodies are decoded together, in one parse of their stored texts
joined as a JSON array (one call of the exact decoder, not one per row), and
for this read alone: no cache holds the entries, so a response built from
them belongs to its caller already (:attr:`..base.SessionStore.private_paths`:
the embedded host does not copy it again).
"""

from __future__ import annotations

from ...errors import SessionError, not_found
from .._core.codec import loads
from ..base import Entry
from ..sql.keys import key
from ..sql.path import _HOLDS_SQL, _WINDOW_SQL, PATH_WINDOW, WindowPath
from ..sql.path import HIT_SQL as _HIT_SQL

__all__ = ["HIT_SQL", "SqlitePath"]


def keyed(sql: str) -> str:
    """A shared path statement (:mod:`..sql.path`) over this schema's entries, which name
    their session by its integer key (``sk``, schema version 7), not its text id."""
    out = (sql.replace("e.session_id = s.session_id", "e.sk = s.sk")
           .replace("e.session_id = %(s)s", "e.sk = (SELECT sk FROM sessions WHERE session_id = %(s)s)")
           .replace("FROM entries WHERE session_id = %(s)s",
                    "FROM entries WHERE sk = (SELECT sk FROM sessions WHERE session_id = %(s)s)")
           .replace("FROM entries WHERE session_id = %s", "FROM entries WHERE sk = (SELECT sk FROM sessions"
                    " WHERE session_id = %s)"))
    rest = out.replace("FROM sessions WHERE session_id = %", "").replace("s.session_id = %", "")
    assert "session_id" not in rest.replace("s.session_id", ""), out  # every entries probe rewritten
    return out


HIT_SQL = keyed(_HIT_SQL)

SLACK = 2  # rows per depth a window's scan may read before the walk is cheaper


_LIVE_SQL = "SELECT 1 FROM sessions WHERE session_id = ? AND meta IS NOT NULL"
_RANGE_SQL = ("SELECT body FROM entries WHERE sk = (SELECT sk FROM sessions WHERE session_id = ?)"
              " AND depth BETWEEN ? AND ? ORDER BY depth DESC LIMIT ?")


def decode_bodies(rows: list[tuple[str]]) -> list[Entry]:
    """The entries of ``rows`` (each a stored body: exact JSON text of an object), in
    order, new objects: the texts joined into one array and parsed once."""
    if not rows:
        return []
    return loads(("[" + ",".join([body for (body,) in rows]) + "]").encode("utf-8"))  # type: ignore[no-any-return]


class SqlitePath(WindowPath):
    """A session's root -> leaf chain, read a window at a time by depth range."""

    __slots__ = ()

    window_sql = keyed(_WINDOW_SQL)
    holds_sql = keyed(_HOLDS_SQL)
    depth_sql = keyed(WindowPath.depth_sql)

    def _changed(self) -> SessionError:
        """The session's absence if another connection deleted it since the read's leaf (a
        read racing a delete answers ``session/not_found``, not a store fault: review 21);
        else the window's fault as the shared reader answers it. (Each window is its own
        statement: no read snapshot spans the leaf's read and the path's.)"""
        if not self._store.rows(_LIVE_SQL, (key(self._session),)):
            return not_found(self._session)
        return super()._changed()

    def _window(self, start: str, start_depth: int, lo: int, hi: int) -> list[tuple[str, int, Entry]]:
        span = start_depth - lo + 1
        if start_depth - hi > PATH_WINDOW:  # far above the window: the jump pointers get there sooner
            return super()._window(start, start_depth, lo, hi)
        limit = span * SLACK
        rows = self._store.rows(_RANGE_SQL, (key(self._session), lo, start_depth, limit))
        if len(rows) >= limit:  # a bushy stretch: rows off the path would outnumber those on it
            return super()._window(start, start_depth, lo, hi)
        entries = decode_bodies(rows)
        if len(rows) == span and entries[0]["id"] == start:
            # One entry per depth (the path has one at each): the rows are the path's, as the
            # first is the start (else the session changed meanwhile: the walk below finds out).
            return [(e["id"], start_depth - k, e) for k, e in enumerate(entries) if start_depth - k <= hi]
        out: list[tuple[str, int, Entry]] = []
        want: str | None = start
        depth = start_depth
        for entry in entries:
            # Rows come deepest first; the path's entry at each depth is the one its child names.
            eid: str = entry["id"]
            if eid != want:
                continue
            if depth <= hi:
                out.append((eid, depth, entry))
            want, depth = entry.get("parent_id"), depth - 1
            if want is None or depth < lo:
                break
        return out
