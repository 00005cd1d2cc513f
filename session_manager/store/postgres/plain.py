"""The warm, unobserved, uncontended append as plain SQL (issue 24): no procedure.

``CALL sm_append_at(...)`` (:mod:`.at_leaf`) costs the server about 1.2M
instructions per append, of which the ``CALL`` with its 20 parameters and
plpgsql's statement-by-statement work are nearly half. When this instance knows
the session (its meta text and leaf, as it last wrote or read them), appends one
entry, reads nothing else, and nobody observes, the same write is two prepared
statements sent in one pipeline with one Sync: one implicit transaction, one
round trip, no schema change:

1. :data:`LOCK`: the session's advisory lock (the key every writer takes) and the
   schema's gate, shared (as ``sm_append_at`` takes it: an observer registering
   waits for this write, see :mod:`.outbox`, "Who is owed events");
2. :data:`APPEND`, whose snapshot is taken after both are held (so what it reads of
   the session and the observers is current): while no live ``observers`` row nor a
   read-only observer's lock says someone observes, a compare-and-set of the session
   row (its meta text and leaf exactly as known) to the new meta text, ``updated_at``
   and leaf, then the entry (its depth and jump pointer as ``sm_append_at`` computes
   them from its parent, the known leaf). It answers whether someone observes and
   whether it wrote.

Anything else goes to ``sm_append_at`` in the same call: someone observes (this
instance listens, or the statement said so: then for :data:`OBSERVED_S`), the
session changed (the compare-and-set failed: nothing written; that session's
appends take the procedure, which chooses the leaf itself, for a while). A new
entry's id already used fails the ``INSERT`` (``23505``, nothing written): a
conflict, as ``sm_append_at``'s ``SM409``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..sql.keys import key, key_or_none
from ..sql.values import json_text
from .at_leaf import HOLE_JSON

if TYPE_CHECKING:
    from .plan import Plan

__all__ = ["APPEND", "LOCK", "OBSERVED_S", "UNIQUE_VIOLATION", "params"]

OBSERVED_S = 5.0  # after the statement saw an observer, appends take sm_append_at this long
UNIQUE_VIOLATION = "23505"

LOCK = ("SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ':' || %(sid)b::text, 0)),"
        " pg_advisory_xact_lock_shared(hashtext(current_schema()), 1)")

# The parent's depth and jump pointer, and its jump's (a skew-binary jump, as links.py and
# sm_append_at): the new entry jumps to its parent's jump's jump when the two spans are equal.
# Both probes are primary-key lookups whatever the statistics when the connection's generic
# plan is made: they name the session by the parameter (joined on the session row's session_id,
# of collation "C" where entries' is the default, neither used the key: a scan of every entry),
# and the jump's jump is a subquery of its own (OFFSET 0: not flattened), where the parent's
# jump_id is a parameter; joined, a plan made while the table was small took the session's
# entries by entries_seq and filtered them (every append reading the whole session).
_TWIN = ("j.jump_id IS NOT NULL AND p.depth - p.jump_depth = p.jump_depth - j.jump_depth"
         " AND p.jump_id <> p.entry_id")
APPEND = (
    "WITH o AS (SELECT EXISTS (SELECT 1 FROM observers WHERE expires > now())"
    " OR NOT CASE WHEN pg_try_advisory_lock(hashtext(current_schema()), 2)"
    " THEN pg_advisory_unlock(hashtext(current_schema()), 2) ELSE false END AS seen),"
    " upd AS (UPDATE sessions SET meta = %(meta)b::text, updated_at = %(updated)b::bigint, leaf = %(leaf)b::text"
    " WHERE session_id = %(sid)b::text AND meta = %(expect_meta)b::text"
    " AND leaf IS NOT DISTINCT FROM %(parent)b::text AND NOT (SELECT seen FROM o) RETURNING session_id),"
    " ins AS (INSERT INTO entries (session_id, entry_id, parent_id, depth, jump_id, jump_depth, body)"
    " SELECT u.session_id, %(id)b::text, %(parent)b::text, coalesce(p.depth + 1, 0),"
    f" CASE WHEN p.depth IS NULL THEN %(id)b::text WHEN {_TWIN} THEN j.jump_id ELSE p.entry_id END,"
    f" CASE WHEN p.depth IS NULL THEN 0 WHEN {_TWIN} THEN j.jump_depth ELSE p.depth END, %(body)b::text"
    " FROM upd u LEFT JOIN entries p ON p.session_id = %(sid)b::text AND p.entry_id = %(parent)b::text"
    " LEFT JOIN LATERAL (SELECT jump_id, jump_depth FROM entries WHERE session_id = %(sid)b::text"
    " AND entry_id = p.jump_id OFFSET 0) j ON true RETURNING 1)"
    " SELECT (SELECT seen FROM o), EXISTS (SELECT 1 FROM ins)"
)


def params(plan: Plan) -> dict[str, Any] | None:
    """:data:`LOCK` and :data:`APPEND`'s arguments for ``plan`` (an append the server
    would place, :mod:`.at_leaf`), or ``None`` when it is not a plain one: one entry,
    nothing read but its own id (assumed unused), the session known."""
    commit, known = plan.commit, plan.known
    if (commit is None or known is None or plan.check != 1 or commit.meta is None or plan.meta_text is None
            or len(commit.entries) != 1 or len(plan.bodies) != 1):
        return None
    entry_id = commit.entries[0]["id"]
    reads = plan.reads
    if reads and (len(reads) != 1 or reads.get(entry_id, "") is not None):
        return None
    leaf = known.leaf
    return {
        "sid": key(plan.session_id), "meta": plan.meta_text, "updated": commit.meta["updated_at"],
        "leaf": key_or_none(commit.leaf), "expect_meta": known.text, "parent": key_or_none(leaf),
        "id": key(entry_id), "body": plan.bodies[0].replace(HOLE_JSON, json_text(leaf)),
    }
