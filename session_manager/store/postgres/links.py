"""Where a new entry sits in its session's tree: its depth and skew-binary
jump pointer (Myers' random-access lists), which let the path reader
(:mod:`..sql.path`) find any ancestor in O(log depth) probes.

Both write paths now link entries server-side, inside ``sm_apply``
(:mod:`.schema`, migration 2), by this same rule; :func:`link` stays the
rule's Python statement, importable by other adapters that store the same
pointers (its name and signature are kept stable)."""

from __future__ import annotations

from typing import Any

import psycopg

from ..base import Entry
from ..sql.keys import key, key_or_none


def link(conn: psycopg.Connection[Any], session_id: str, entries: list[Entry]) -> dict[str, tuple[Any, ...]]:
    """``(depth, jump_id, jump_depth)`` per entry (by stored key; ``session_id``
    is a stored key too). O(1) rows read per entry: its parent and the
    parent's jump target."""
    info: dict[str, tuple[int, str, int]] = {}

    def lookup(ids: list[str]) -> None:
        # Each entry with its jump target's pointer: one query serves both probes.
        missing = [i for i in ids if i not in info]
        if missing:
            for eid, depth, jump_id, jump_depth, j_jump_id, j_jump_depth in conn.execute(
                "SELECT p.entry_id, p.depth, p.jump_id, p.jump_depth, j.jump_id, j.jump_depth FROM entries p"
                " LEFT JOIN entries j ON j.session_id = p.session_id AND j.entry_id = p.jump_id"
                " WHERE p.session_id = %s AND p.entry_id = ANY(%s)",
                (session_id, missing),
            ).fetchall():
                info.setdefault(eid, (depth, jump_id, jump_depth))
                if j_jump_id is not None:
                    info.setdefault(jump_id, (jump_depth, j_jump_id, j_jump_depth))

    batch = {key(e["id"]) for e in entries}
    lookup([key(p) for e in entries if isinstance(p := e.get("parent_id"), str) and key(p) not in batch])
    out: dict[str, tuple[Any, ...]] = {}
    for entry in entries:
        eid, parent = key(entry["id"]), key_or_none(entry.get("parent_id"))
        if not isinstance(parent, str) or parent not in info:
            row = (0, eid, 0)  # a root (or an orphan: its path starts here, as walk_to_root has it)
        else:
            p_depth, p_jump, p_jump_depth = info[parent]
            lookup([p_jump])
            j = info.get(p_jump)
            if j is not None and p_depth - p_jump_depth == p_jump_depth - j[2] and p_jump != parent:
                row = (p_depth + 1, j[1], j[2])
            else:
                row = (p_depth + 1, parent, p_depth)
        info[eid] = row
        out[eid] = row
    return out
