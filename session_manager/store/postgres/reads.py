"""The postgres adapter's read queries: sessions (one, all, listed in order
by keyset pages), entries, the active path, attachments. Outside a mutation
they run in autocommit on a pooled connection; inside one, in its
transaction."""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from typing import Any

from psycopg.types.json import Jsonb

from .._core.codec import loads
from ..base import AttachmentMeta, Entry, Meta
from ..path import EntryPath
from ..sql.keys import key, unkey
from ..sql.path import PATH_WINDOW, WindowPath
from ..sql.values import sanitize
from .core import PgDatastore, Statement
from .schema import RARE_STATUSES

__all__ = ["HITS_SQL", "PgReads"]

LIST_BATCH = 200

# Each hit (%(s)s[i], %(e)s[i]: session and entry) with whether its session's active path
# holds it, in one round trip: per hit a walk from its session's leaf down to the entry's
# depth by jump pointers (O(log n) probes, reading no body), as sql.path.HIT_SQL does for one.
# (The leaf is joined on t's session_id, of entries' collation: on sessions' "C" one the key
# could not be used and each hit's leaf was found by a scan of entries_pkey, 0.5 ms a hit.)
HITS_SQL = """
WITH RECURSIVE t(session_id, entry_id, depth, body) AS (
    SELECT e.session_id, e.entry_id, e.depth, e.body
    FROM unnest(%(s)s::text[], %(e)s::text[]) AS h(session_id, entry_id)
    JOIN entries e ON e.session_id = h.session_id AND e.entry_id = h.entry_id
), w(sid, target, tdepth, entry_id, depth, parent_id, jump_id, jump_depth) AS (
    SELECT t.session_id, t.entry_id, t.depth, e.entry_id, e.depth, e.parent_id, e.jump_id, e.jump_depth
    FROM t JOIN sessions s ON s.session_id = t.session_id
    JOIN entries e ON e.session_id = t.session_id AND e.entry_id = s.leaf
  UNION ALL
    SELECT w.sid, w.target, w.tdepth, e.entry_id, e.depth, e.parent_id, e.jump_id, e.jump_depth
    FROM w JOIN entries e ON e.session_id = w.sid
     AND e.entry_id = CASE WHEN w.depth > w.tdepth AND w.jump_depth >= w.tdepth THEN w.jump_id ELSE w.parent_id END
    WHERE w.depth > w.tdepth
)
SELECT t.session_id, t.entry_id, t.body,
       EXISTS (SELECT 1 FROM w WHERE w.sid = t.session_id AND w.target = t.entry_id AND w.depth = t.depth
               AND w.entry_id = t.entry_id)
FROM t
"""

# The session's meta and leaf with the last PATH_WINDOW entries of its active
# path, walked from the leaf by parent links (one primary-key probe each): what
# messages-tail reads, in one round trip. Kind 0 is the session (with its row's
# xmin: every write of the session rewrites the row, see meta_and_leaf_since),
# 1 an entry. When the row is still the caller's version (%(v)s its xmin, %(l)s
# its leaf, %(m)s its meta text, all compared here) the walk is skipped and the
# session's row comes back empty: only that it is at that version crosses the wire.
_META_AND_TAIL = """
WITH RECURSIVE s AS (
    SELECT meta, leaf, xmin::text AS v,
           (xmin::text = %(v)s AND leaf IS NOT DISTINCT FROM %(l)s AND meta = %(m)s) IS TRUE AS same
    FROM sessions WHERE session_id = %(s)s AND meta IS NOT NULL
), w(entry_id, parent_id, depth, n, body) AS (
    SELECT e.entry_id, e.parent_id, e.depth, 1, e.body
    FROM s JOIN entries e ON e.session_id = %(s)s AND e.entry_id = s.leaf
    WHERE NOT s.same
  UNION ALL
    SELECT p.entry_id, p.parent_id, p.depth, w.n + 1, p.body
    FROM w JOIN entries p ON p.session_id = %(s)s AND p.entry_id = w.parent_id
    WHERE w.n < %(window)s
)
SELECT 0, CASE WHEN same THEN NULL ELSE meta END, CASE WHEN same THEN NULL ELSE leaf END, NULL::integer,
       CASE WHEN same THEN NULL ELSE v END FROM s
UNION ALL
SELECT 1, body, entry_id, depth, NULL FROM w
"""
_META_AND_TAIL_STATEMENT = Statement(_META_AND_TAIL)  # a warm tail's one statement: sent directly

# The session's meta and leaf (with its depth) and the first entries (depths 0
# .. window - 1) of its active path: jump pointers from the leaf down to the
# window's top, then parent links (what a messages page from the root reads,
# in one round trip). Kind 0 is the session, 1 an entry.
_META_AND_HEAD = """
WITH RECURSIVE s AS (
    SELECT meta, leaf FROM sessions WHERE session_id = %(s)s AND meta IS NOT NULL
), w(entry_id, parent_id, depth, jump_id, jump_depth) AS (
    SELECT e.entry_id, e.parent_id, e.depth, e.jump_id, e.jump_depth
    FROM s JOIN entries e ON e.session_id = %(s)s AND e.entry_id = s.leaf
  UNION ALL
    SELECT e.entry_id, e.parent_id, e.depth, e.jump_id, e.jump_depth
    FROM w JOIN entries e ON e.session_id = %(s)s
     AND e.entry_id = CASE WHEN w.depth > %(b)s AND w.jump_depth >= %(b)s THEN w.jump_id ELSE w.parent_id END
    WHERE w.depth > 0
)
SELECT 0, meta, leaf, (SELECT depth FROM w ORDER BY depth DESC LIMIT 1) FROM s
UNION ALL
SELECT 1, e.body, e.entry_id, e.depth
FROM w JOIN entries e ON e.session_id = %(s)s AND e.entry_id = w.entry_id
WHERE w.depth <= %(b)s
"""


class PgReads:
    """The queries, in the mutation's transaction or on a pooled connection."""

    def __init__(self, db: PgDatastore) -> None:
        self.db = db

    def _seen(self, session_id: str) -> tuple[str | None, str | None] | None:
        """The session's meta text and leaf as the mutation's transaction read them at BEGIN."""
        tx = self.db.local.state.tx
        return tx.seen.get(session_id) if tx is not None else None

    def get_meta(self, session_id: str) -> Meta | None:
        seen = self._seen(session_id)
        if seen is not None:
            return loads(seen[0].encode("utf-8")) if seen[0] is not None else None
        rows = self.db.rows("SELECT meta FROM sessions WHERE session_id = %s AND meta IS NOT NULL", (key(session_id),))
        return loads(rows[0][0].encode("utf-8")) if rows else None

    def list_metas(self) -> list[Meta]:
        rows = self.db.rows("SELECT meta FROM sessions WHERE meta IS NOT NULL")
        return [loads(r[0].encode("utf-8")) for r in rows]

    def ordered_metas(
        self, order: str, after: tuple[int, str] | None, status: str | None, metadata: Meta | None
    ) -> Iterator[Meta]:
        column = "updated_at" if order == "updated_desc" else "created_at"
        descending = order != "created_asc"
        cmp, direction = ("<", "DESC") if descending else (">", "ASC")
        where = ["meta IS NOT NULL"]
        params: list[Any] = []
        if status in RARE_STATUSES:  # a literal: the partial index's predicate must be provable
            where.append(f"status = '{status}'")
        elif status is not None:
            where.append("status = %s")
            params.append(status)
        wanted = sanitize(metadata) if metadata else None
        if wanted:  # (only a session with metadata contains a non-empty filter: the index's predicate)
            where.append("metadata @> %s AND metadata <> '{}'")
            params.append(Jsonb(wanted))
        base = " AND ".join(where)
        # The caller's cursor names the session by its id; rows compare by stored key.
        cursor = (after[0], key(after[1])) if after is not None else None
        while True:
            query = f"SELECT meta, {column}, session_id FROM sessions WHERE {base}"
            args = list(params)
            if cursor is not None:
                query += f" AND ({column}, session_id) {cmp} (%s, %s)"
                args += [cursor[0], cursor[1]]  # the stored key, as the row gave it
            query += f" ORDER BY {column} {direction}, session_id {direction} LIMIT {LIST_BATCH}"
            rows = self.db.rows(query, args)
            for text, sort_key, sid in rows:
                yield loads(text.encode("utf-8"))
                cursor = (sort_key, sid)
            if len(rows) < LIST_BATCH:
                return

    def meta_and_leaf(self, session_id: str) -> tuple[Meta | None, str | None]:
        """Both in one read, with the active path's last window kept for this call's
        :meth:`path` of that leaf (a messages-tail page: one round trip)."""
        meta, leaf, _ = self.meta_and_leaf_since(session_id, None)
        return meta, leaf

    def meta_and_leaf_since(self, session_id: str, version: Hashable | None
                            ) -> tuple[Meta | None, str | None, Hashable | None]:
        """:meth:`meta_and_leaf` and the session's version, in one read; the path's last
        window is read (and kept for :meth:`path`) unless the session is at ``version``.

        The version is the session row's ``xmin`` (the transaction that wrote it last)
        with its leaf and meta text. Every write of a session rewrites its row (sm_apply,
        and so sm_append, upserts it in the writing transaction; a delete removes it), and
        a transaction id is never used for another write, so the version changes with
        every commit, another instance's too, with no column to keep. The leaf and the
        meta text (its ``updated_at``) guard against the 32-bit ``xmin`` wrapping around."""
        text, leaf, now = self.text_and_leaf_since(session_id, version)
        return (loads(text.encode("utf-8")) if text is not None else None), leaf, now

    def text_and_leaf_since(self, session_id: str, version: Hashable | None
                            ) -> tuple[str | None, str | None, Hashable | None]:
        """:meth:`meta_and_leaf_since` with the meta as its stored JSON text, not decoded
        (a tail needs only to know the session is there: the store's ``leaf_since``)."""
        if isinstance(version, tuple) and len(version) == 3:
            known, known_leaf, known_meta = version
        else:
            known, known_leaf, known_meta = "", None, None
        sid = session_id if "\x00" not in session_id and "\x01" not in session_id else key(session_id)
        rows = self.db.rows(_META_AND_TAIL_STATEMENT, {"s": sid, "window": PATH_WINDOW, "v": known,
                                                       "l": known_leaf, "m": known_meta})
        if len(rows) == 1 and rows[0][0] == 0:  # the session alone: at ``version``, or no entries
            _, meta, leaf, _, xmin = rows[0]
            if meta is None:  # at ``version`` (its row's meta is never NULL): nothing else was sent
                # (unkey(known_leaf), written out: an id holds no escape but for a rare NUL or U+0001)
                return known_meta, (known_leaf if known_leaf is None or "\x01" not in known_leaf
                                    else unkey(known_leaf)), version
        else:
            head = [r for r in rows if r[0] == 0]
            if not head:
                return None, None, None
            _, meta, leaf, _, xmin = head[0]
            # (unkey(eid), written out: an id holds no escape but for a rare NUL or U+0001)
            entries = [(eid if "\x01" not in eid else unkey(eid), depth, body)
                       for kind, body, eid, depth, _ in rows if kind == 1]
            self._keep_window(session_id, leaf, entries[0][1] if entries else None, entries)
        return meta, unkey(leaf) if leaf is not None else None, (xmin, leaf, meta)

    def meta_and_leaf_from_root(self, session_id: str) -> tuple[Meta | None, str | None]:
        """Both in one read, with the active path's first window kept for this call's
        :meth:`path` of that leaf (a messages page from the root: one round trip)."""
        rows = self.db.rows(_META_AND_HEAD, {"s": key(session_id), "b": PATH_WINDOW - 1})
        head = [r for r in rows if r[0] == 0]
        if not head:
            return None, None
        _, meta, leaf, top = head[0]
        entries = [(unkey(eid), depth, body) for kind, body, eid, depth in rows if kind == 1]
        self._keep_window(session_id, leaf, top, entries)
        return loads(meta.encode("utf-8")), unkey(leaf) if leaf is not None else None

    def _keep_window(self, session_id: str, leaf: str | None, top: int | None,
                     entries: list[tuple[str, int, str]]) -> None:
        """Keep a window read with its session (the leaf's depth and the entries read)
        for this call's :meth:`path` of that leaf."""
        local = self.db.local.state
        in_call = local.tx is None and local.deadline is not None
        if in_call and leaf is not None and top is not None and entries:
            local.window = (session_id, unkey(leaf), top, entries)

    def get_entry(self, session_id: str, entry_id: str) -> Entry | None:
        rows = self.db.rows(
            "SELECT body FROM entries WHERE session_id = %s AND entry_id = %s", (key(session_id), key(entry_id))
        )
        return loads(rows[0][0].encode("utf-8")) if rows else None

    def entries_on_active_path(self, session_id: str, entry_ids: Sequence[str]) -> list[tuple[Entry | None, bool]]:
        """Each entry and whether the active path holds it, in one statement (:data:`HITS_SQL`)."""
        return self.hits_on_active_paths([(session_id, eid) for eid in entry_ids])

    def hits_on_active_paths(self, hits: Sequence[tuple[str, str]]) -> list[tuple[Entry | None, bool]]:
        """Each ``(session_id, entry_id)``'s entry and whether its session's active path holds
        it, in one statement (:data:`HITS_SQL`)."""
        if not hits:
            return []
        rows = self.db.rows(HITS_SQL, {"s": [key(s) for s, _ in hits], "e": [key(e) for _, e in hits]})
        found = {(unkey(sid), unkey(eid)): (loads(body.encode("utf-8")), bool(on_path))
                 for sid, eid, body, on_path in rows}
        return [found.get(h, (None, False)) for h in hits]

    def get_leaf(self, session_id: str) -> str | None:
        seen = self._seen(session_id)
        if seen is not None:
            return unkey(seen[1]) if seen[1] is not None else None
        rows = self.db.rows("SELECT leaf FROM sessions WHERE session_id = %s", (key(session_id),))
        return unkey(rows[0][0]) if rows and rows[0][0] is not None else None

    def path(self, session_id: str, leaf: str | None) -> EntryPath:
        if leaf is None:
            return EntryPath([], {})
        local = self.db.local.state
        window, local.window = local.window, None
        if window is not None and window[0] == session_id and window[1] == leaf:
            read = WindowPath(self.db, session_id, leaf, window[2])
            read.seed(window[3])
            return read
        rows = self.db.rows(
            "SELECT depth FROM entries WHERE session_id = %s AND entry_id = %s", (key(session_id), key(leaf))
        )
        if not rows:
            return EntryPath([], {})
        return WindowPath(self.db, session_id, leaf, rows[0][0])

    def entries(self, session_id: str) -> list[Entry]:
        rows = self.db.rows("SELECT body FROM entries WHERE session_id = %s ORDER BY seq", (key(session_id),))
        return [loads(r[0].encode("utf-8")) for r in rows]

    def get_attachment_meta(self, session_id: str, attachment_id: str) -> AttachmentMeta | None:
        rows = self.db.rows(
            "SELECT meta FROM attachments WHERE session_id = %s AND attachment_id = %s",
            (key(session_id), key(attachment_id)),
        )
        return loads(rows[0][0].encode("utf-8")) if rows else None

    def read_attachment(self, session_id: str, attachment_id: str) -> bytes | None:
        rows = self.db.rows(
            "SELECT data FROM attachments WHERE session_id = %s AND attachment_id = %s",
            (key(session_id), key(attachment_id)),
        )
        return bytes(rows[0][0]) if rows else None

    def list_attachments(self, session_id: str) -> list[AttachmentMeta]:
        rows = self.db.rows("SELECT meta FROM attachments WHERE session_id = %s", (key(session_id),))
        return [loads(r[0].encode("utf-8")) for r in rows]
