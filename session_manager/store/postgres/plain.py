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
conflict, as ``sm_append_at``'s ``SM409``.

The new entry's depth and jump pointer (:mod:`.links`' rule) are the client's when it knows
the links of the known leaf and of the leaf's jump target: :data:`LINKED` sends them, and the
server reads no entry (its two primary-key probes cost about 85,000 instructions per append,
callgrind). ``Known.links`` holds them: the links of the entries along the known leaf's
chain of jump pointers, each new entry's added as it is written (:func:`learn`). The
compare-and-set of the session row on the known meta text, leaf and row version (its
``xmin``, as the last plain statement left it, ``Known.row``: the meta text and leaf alone do
not tell the session from one deleted and re-created alike, same id, title, clock and entry ids)
is what keeps that knowledge current: an entry's links never change while its session lives (a rewrite keeps
its parent, and the rewritten entries' links are dropped anyway), and a session written any
other way is forgotten with them. Without them :data:`APPEND` probes as before and also
answers the parent's whole chain (O(log depth) rows), so the session's next appends send
theirs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..sql.keys import key, key_or_none
from ..sql.values import json_text
from .at_leaf import HOLE_JSON

if TYPE_CHECKING:
    from .plan import Plan

__all__ = ["APPEND", "LINKED", "LOCK", "OBSERVED_S", "UNIQUE_VIOLATION", "Link", "chain", "grown", "learn",
           "next_link", "params"]

OBSERVED_S = 5.0  # after the statement saw an observer, appends take sm_append_at this long
UNIQUE_VIOLATION = "23505"

# The keys are the ones every writer takes (sm_append_at: ``current_schema()``'s name, which the
# connection's search_path makes the store's schema), computed from the schema's name sent as a
# parameter: ``current_schema()`` (a search-path walk and a catalog lookup, four calls an append)
# cost ~8,000 server instructions per append (callgrind, bench/pg_server_parts.py).
LOCK = ("SELECT pg_advisory_xact_lock(hashtextextended(%(schema)b::text || ':' || %(sid)b::text, 0)),"
        " pg_advisory_xact_lock_shared(hashtext(%(schema)b::text), 1)")

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
_OBSERVED = (
    "o AS (SELECT EXISTS (SELECT 1 FROM observers WHERE expires > now())"
    " OR NOT CASE WHEN pg_try_advisory_lock(hashtext(%(schema)b::text), 2)"
    " THEN pg_advisory_unlock(hashtext(%(schema)b::text), 2) ELSE false END AS seen),"
    " upd AS (UPDATE sessions SET meta = %(meta)b::text, updated_at = %(updated)b::bigint, leaf = %(leaf)b::text"
    " WHERE session_id = %(sid)b::text AND meta = %(expect_meta)b::text"
    " AND leaf IS NOT DISTINCT FROM %(parent)b::text AND NOT (SELECT seen FROM o) RETURNING session_id, xmin),"
)
# The parent's chain of jump pointers (itself, its jump target, that one's, ... to a root, which
# jumps to itself), each step a primary-key probe (OFFSET 0: never a join a generic plan could
# turn into a scan of the session), answered as four arrays: the next appends' links.
_CHAIN = (
    " c (entry_id, depth, jump_id, jump_depth) AS (SELECT entry_id, depth, jump_id, jump_depth FROM entries"
    " WHERE session_id = %(sid)b::text AND entry_id = %(parent)b::text"
    " UNION ALL SELECT e.entry_id, e.depth, e.jump_id, e.jump_depth FROM c, LATERAL (SELECT entry_id, depth,"
    " jump_id, jump_depth FROM entries WHERE session_id = %(sid)b::text AND entry_id = c.jump_id OFFSET 0) e"
    " WHERE c.jump_id <> c.entry_id)"
)
APPEND = (
    "WITH RECURSIVE " + _OBSERVED +
    " ins AS (INSERT INTO entries (session_id, entry_id, parent_id, depth, jump_id, jump_depth, body)"
    " SELECT u.session_id, %(id)b::text, %(parent)b::text, coalesce(p.depth + 1, 0),"
    f" CASE WHEN p.depth IS NULL THEN %(id)b::text WHEN {_TWIN} THEN j.jump_id ELSE p.entry_id END,"
    f" CASE WHEN p.depth IS NULL THEN 0 WHEN {_TWIN} THEN j.jump_depth ELSE p.depth END, %(body)b::text"
    " FROM upd u LEFT JOIN entries p ON p.session_id = %(sid)b::text AND p.entry_id = %(parent)b::text"
    " LEFT JOIN LATERAL (SELECT jump_id, jump_depth FROM entries WHERE session_id = %(sid)b::text"
    " AND entry_id = p.jump_id OFFSET 0) j ON true RETURNING 1)," + _CHAIN +
    " SELECT (SELECT seen FROM o), EXISTS (SELECT 1 FROM ins), ARRAY(SELECT entry_id FROM c),"
    " ARRAY(SELECT depth FROM c), ARRAY(SELECT jump_id FROM c), ARRAY(SELECT jump_depth FROM c),"
    " (SELECT xmin::text FROM upd)"
)
# The same write with the new entry's links as the client computed them (no entry read), and
# leaner: the INSERT is the statement itself and the check for observers a condition of the
# UPDATE (no CTE of its own, no final SELECT: ~50k fewer server instructions, mostly executor
# start-up). It answers one row when it wrote and none otherwise, without saying why: the
# caller tells an observer from a changed session by where sm_append_at then places the entry
# (at the known leaf: the session was as known, so someone observes).
_SEEN = ("EXISTS (SELECT 1 FROM observers WHERE expires > now())"
         " OR NOT CASE WHEN pg_try_advisory_lock(hashtext(%(schema)b::text), 2)"
         " THEN pg_advisory_unlock(hashtext(%(schema)b::text), 2) ELSE false END")
LINKED = (
    "WITH upd AS (UPDATE sessions SET meta = %(meta)b::text, updated_at = %(updated)b::bigint,"
    " leaf = %(leaf)b::text WHERE session_id = %(sid)b::text AND meta = %(expect_meta)b::text"
    " AND (%(row)b::text IS NULL OR xmin::text = %(row)b::text)"
    f" AND leaf IS NOT DISTINCT FROM %(parent)b::text AND NOT ({_SEEN}) RETURNING session_id)"
    " INSERT INTO entries (session_id, entry_id, parent_id, depth, jump_id, jump_depth, body)"
    " SELECT u.session_id, %(id)b::text, %(parent)b::text, %(depth)b::integer, %(jump)b::text,"
    " %(jump_depth)b::integer, %(body)b::text FROM upd u RETURNING xid(pg_current_xact_id())::text"
)

Link = tuple[int, str, int]  # an entry's (depth, jump_id, jump_depth), by stored keys
CHAIN_MAX = 128  # links kept per session (a chain is O(log depth) long: far below)


def next_link(links: dict[str, Link], parent: str | None, entry_id: str) -> Link | None:
    """The links of a new entry ``entry_id`` under ``parent`` (stored keys), by the rule
    ``sm_append_at`` and :data:`APPEND` apply, from ``links``; ``None`` when they do not
    hold what the rule reads (the parent's and its jump target's)."""
    if parent is None:
        return (0, entry_id, 0)
    p = links.get(parent)
    if p is None:
        return None
    pd, pj, pjd = p
    if pj == parent:  # a root (or an orphan) jumps to itself: the rule never jumps further
        return (pd + 1, parent, pd)
    j = links.get(pj)
    if j is None:
        return None
    if pd - pjd == pjd - j[2]:
        return (pd + 1, j[1], j[2])
    return (pd + 1, parent, pd)


def chain(links: dict[str, Link], leaf: str | None) -> dict[str, Link]:
    """``links`` cut to the leaf's chain of jump pointers (all the next appends can read)."""
    out: dict[str, Link] = {}
    at = leaf
    while at is not None and at not in out and len(out) < CHAIN_MAX:
        link = links.get(at)
        if link is None:
            break
        out[at] = link
        at = link[1]
    return out


def learn(links: dict[str, Link], params: dict[str, Any], row: tuple[Any, ...]) -> dict[str, Link]:
    """``links`` with the entry :data:`LINKED` or :data:`APPEND` wrote (``params``, the
    statement's answer ``row``: :data:`APPEND`'s names its parent's chain), cut to the new
    leaf's chain."""
    if "depth" in params and len(row) <= 2 and links:
        out = grown(links, params)  # (Optimistic._learn_ahead calls it first itself)
        if out is not None:
            return out
    new = dict(links)
    if len(row) > 2:
        new.update(zip(row[2], zip(row[3], row[4], row[5], strict=True), strict=True))
    entry_id = params["id"]
    link = (params["depth"], params["jump"], params["jump_depth"]) if "depth" in params else \
        next_link(new, params["parent"], entry_id)
    if link is not None:
        new[entry_id] = link
    return chain(new, entry_id)


def grown(links: dict[str, Link], params: dict[str, Any]) -> dict[str, Link] | None:
    """:func:`learn` of a :data:`LINKED` append onto a parent whose chain ``links`` is (as
    :func:`chain` leaves it: the parent first, then each jump in turn), without walking it
    again: the new entry, then the parent's chain from the entry's jump target on, which is
    the parent itself or (a skew-binary jump, :func:`next_link`) its jump's jump, the chain's
    third; ``None`` when ``links`` is not that chain (then :func:`learn` walks)."""
    parent, jump = params["parent"], params["jump"]
    if next(iter(links)) != parent or len(links) >= CHAIN_MAX:
        return None
    rest = iter(links.items())
    if jump != parent:
        next(rest)  # the parent
        skipped = next(rest, None)  # its jump target, whose jump is the entry's
        third = next(rest, None)
        if skipped is None or third is None or third[0] != jump or skipped[1][1] != jump:
            return None
        out = {params["id"]: (params["depth"], jump, params["jump_depth"]), jump: third[1]}
        out.update(rest)
        return out
    out = {params["id"]: (params["depth"], jump, params["jump_depth"])}
    out.update(rest)
    return out


def params(plan: Plan, schema: str) -> dict[str, Any] | None:
    """:data:`LOCK` and :data:`APPEND`'s arguments for ``plan`` (an append the server
    would place, :mod:`.at_leaf`) in the store's ``schema``, or ``None`` when it is not a
    plain one: one entry, nothing read but its own id (assumed unused), the session known.
    With ``depth``, ``jump`` and ``jump_depth`` (:data:`LINKED`'s) when the known links give
    them."""
    commit, known = plan.commit, plan.known
    if (commit is None or known is None or plan.check != 1 or commit.meta is None or plan.meta_text is None
            or len(commit.entries) != 1 or len(plan.bodies) != 1):
        return None
    entry_id = commit.entries[0]["id"]
    reads = plan.reads
    if reads and (len(reads) != 1 or reads.get(entry_id, "") is not None):
        return None
    leaf, session_id = known.leaf, plan.session_id
    # (key and key_or_none written out: an id without NUL or U+0001, nearly every one, is its key)
    parent = (leaf if "\x00" not in leaf and "\x01" not in leaf else key(leaf)) if type(leaf) is str else \
        key_or_none(leaf)
    stored_id = entry_id if "\x00" not in entry_id and "\x01" not in entry_id else key(entry_id)
    sid = session_id if "\x00" not in session_id and "\x01" not in session_id else key(session_id)
    out: dict[str, Any] = {
        "schema": schema, "sid": sid, "meta": plan.meta_text, "updated": commit.meta["updated_at"],
        # (the new leaf is the one entry: its key once)
        "leaf": stored_id if commit.leaf == entry_id else key_or_none(commit.leaf),
        "expect_meta": known.text, "parent": parent,
        "id": stored_id,
        # (resolved on the known leaf, plan.plain, its text is the statement's; else its hole filled)
        "body": plan.bodies[0] if plan.plain else plan.bodies[0].replace(HOLE_JSON, json_text(leaf)),
    }
    # The links are sent only for the session row version they were learned on (``Known.row``,
    # its xmin as the last plain statement left it): the meta text and leaf alone do not tell
    # the session from one deleted and re-created alike (same id, title, clock, entry ids).
    # A root's links need none (they name only itself).
    # (next_link, written out: every warm append computes its links)
    link: Link | None = None
    if parent is None:
        link = (0, stored_id, 0)
    elif known.row is not None:
        links = known.links
        p = links.get(parent)
        if p is not None:
            pd, pj, pjd = p
            if pj == parent:  # a root (or an orphan) jumps to itself: the rule never jumps further
                link = (pd + 1, parent, pd)
            else:
                j = links.get(pj)
                if j is not None:
                    link = (pd + 1, j[1], j[2]) if pd - pjd == pjd - j[2] else (pd + 1, parent, pd)
    if link is not None:
        out["depth"], out["jump"], out["jump_depth"], out["row"] = *link, known.row
    return out
