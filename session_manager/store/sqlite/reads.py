"""The sqlite adapter's read queries: sessions (one, all, listed in order by
keyset pages), entries, the active path (the postgres adapter's window
reader, over this connection), attachments. Outside a mutation each runs on
the thread's connection in autocommit; inside one, in its transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable, Iterator, Sequence
from typing import Any

from .._core.codec import loads
from ..base import AttachmentMeta, Entry, Meta
from ..path import EntryPath
from ..sql.keys import key, unkey
from .core import FIRST_LISTED, SK, SqliteDatastore, sortable
from .outbox import POSITION_COLUMNS, now_ms
from .path import HIT_SQL

__all__ = ["SqliteReads"]

LIST_BATCH = 200
# An append's read: with the outbox's position, which its events need at the commit (outbox.record).
# And the session's list-order key with the session first in that order (writes.list_key), and
# its integer key (its entries are inserted under it: writes.write).
_META_LEAF_LINKS = ("SELECT s.meta, s.leaf, p.depth, p.jump_id, p.jump_depth, j.depth, j.jump_id, j.jump_depth, "
                    "s.listed_at, (" + FIRST_LISTED + "), s.sk, " + POSITION_COLUMNS +
                    ", (SELECT data_version FROM pragma_data_version())"
                    " FROM sessions s LEFT JOIN entries p ON p.sk = s.sk AND p.entry_id = s.leaf"
                    " LEFT JOIN entries j ON j.sk = s.sk AND j.entry_id = p.jump_id"
                    " WHERE s.session_id = ?")
# An index's token with the session's version (session_token): created_at, leaf (the meta only where its
# created_at column is not the exact integer) and the row's rev.
_TOKEN = ("SELECT created_at, leaf, CASE WHEN typeof(created_at) = 'integer' THEN NULL ELSE meta END, rev"
          " FROM sessions WHERE session_id = ? AND meta IS NOT NULL")
_META_LEAF_DEPTH = ("SELECT s.meta, s.leaf, e.depth, s.rev FROM sessions s LEFT JOIN entries e"
                    " ON e.sk = s.sk AND e.entry_id = s.leaf WHERE s.session_id = ?")

# Entries name their session by its integer key (schema.py, version 7): SK finds it from the text key.
# The body's UTF-8 itself (the file's encoding: the writes bind it so, CAST(? AS TEXT)), decoded
# once: as a str, a latin-1-heavy body (a LangGraph checkpoint's values) was made a str by sqlite3
# and encoded back for the decoder, ~9 us of a ~29 us read of 8 KB.
_BODY_BYTES = "SELECT CAST(body AS BLOB) FROM entries WHERE sk = " + SK + " AND entry_id = ?"
_DEPTH = "SELECT depth FROM entries WHERE sk = " + SK + " AND entry_id = ?"
_BODIES = "SELECT CAST(body AS BLOB) FROM entries WHERE sk = " + SK + " ORDER BY seq"  # (as _BODY_BYTES)


def _load(text: str) -> Any:
    return loads(text.encode("utf-8"))


class SqliteReads:
    """The queries, over the datastore's connection on the calling thread."""

    def __init__(self, db: SqliteDatastore) -> None:
        self.db = db

    def get_meta(self, session_id: str) -> Meta | None:
        rows = self.db.rows("SELECT meta FROM sessions WHERE session_id = ? AND meta IS NOT NULL", (key(session_id),))
        return _load(rows[0][0]) if rows else None

    def list_metas(self) -> list[Meta]:
        return [_load(r[0]) for r in self.db.rows("SELECT meta FROM sessions WHERE meta IS NOT NULL")]

    def meta_and_leaf(self, session_id: str) -> tuple[Meta | None, str | None]:
        meta, leaf, _ = self.meta_and_leaf_since(session_id, None)
        return meta, leaf

    def meta_and_leaf_since(self, session_id: str, version: Hashable | None
                            ) -> tuple[Meta | None, str | None, Hashable | None]:
        """:meth:`meta_and_leaf` with the session's version, in one statement: its row's
        ``rev`` (schema.py, version 8), one more with each commit of the session (every
        commit upserts the row, this process's or another's: writes.py) and random where a
        row is made (a deleted and recreated session's does not come back). None inside a
        mutation (what its transaction sees may yet roll back). ``version`` is not needed:
        the read is this one statement either way (the path is read lazily, by :meth:`path`).
        The leaf and the meta text go with it: a process of the previous release that had the
        file open before it was migrated writes no ``rev``, but moves the leaf or rewrites the
        meta (its ``updated_at``) with nearly every write."""
        meta, leaf, version = self.text_and_leaf_since(session_id)
        return (_load(meta) if meta is not None else None), leaf, version

    def text_and_leaf_since(self, session_id: str) -> tuple[str | None, str | None, Hashable | None]:
        """:meth:`meta_and_leaf_since` with the meta as its stored text, not decoded (the store's
        ``leaf_since``: a tail needs only to know the session is there)."""
        # With the leaf's depth, noted as get_leaf notes it: path() of this leaf (a
        # messages-tail page, next) is then one range read, not a depth probe and the read.
        rows = self.db.rows(_META_LEAF_DEPTH, (key(session_id),))
        if not rows:
            return None, None, None
        meta, stored_leaf, depth, rev = rows[0]
        state = self.db.local.state
        leaf = None
        if stored_leaf is not None:
            leaf = unkey(stored_leaf)
            state.leaf_depth = (session_id, leaf, depth)
        version = None if state.in_tx or rev is None else (rev, stored_leaf, meta)
        return meta, leaf, version

    def created_and_leaf(self, session_id: str) -> tuple[Any, str | None] | None:
        """The meta's ``created_at`` and the leaf, from the row's columns: no meta decoded (the
        column is the meta's value, written with it, unless that was no 64-bit integer);
        :meth:`session_token`'s one statement, its version left out."""
        token = self.session_token(session_id)
        return None if token is None else token[:2]

    def session_token(self, session_id: str) -> tuple[Any, str | None, Hashable | None] | None:
        """:meth:`created_and_leaf` with the row's ``rev`` (see :meth:`meta_and_leaf_since`), in
        the same one statement; no version inside a mutation (its transaction may roll back)."""
        try:
            row = self.db.conn().execute(_TOKEN, (key(session_id),)).fetchone()
        except sqlite3.Error as e:
            raise self.db.fail(e) from None
        if row is None:
            return None
        created, leaf, meta, rev = row
        if meta is not None:
            created = _load(meta).get("created_at")
        if self.db.local.state.in_tx:
            rev = None
        return created, (unkey(leaf) if leaf is not None else None), rev

    def meta_and_leaf_to_commit(self, session_id: str) -> tuple[Meta | None, str | None]:
        db = self.db
        state = db.local.state
        if not state.in_tx:
            return self.meta_and_leaf(session_id)
        # An append's read: with the links of the leaf (its default parent) and of the
        # leaf's jump target, which the commit needs next (writes.link), in this transaction,
        # and the outbox's position, which its events need (outbox.record).
        sid = key(session_id)
        cur = state.cur  # (the mutation's connection's: in_tx)
        assert cur is not None
        memo = state.memo
        try:  # on the connection itself: the append's hot read (no db.rows, no placeholder rewrite)
            if memo is not None and memo[0] == sid:
                # This connection's last commit was an append to this session: while no other
                # connection committed since (data_version), what it left is what the read finds.
                version = cur.execute("PRAGMA data_version").fetchone()[0]
                if version == memo[1]:
                    _, state.version, sk, meta, leaf, links, listed_at, first, state.position = memo
                    state.listed = (sid, listed_at, first)
                    state.links = (sid, sk, links)  # (the commit adds to it; dropped unless it commits)
                    return loads(meta.encode("utf-8")), unkey(leaf)
            row = cur.execute(_META_LEAF_LINKS, (db.instance, now_ms() - db.retention_ms, sid)).fetchone()
        except sqlite3.Error as e:
            raise db.fail(e) from None
        if row is None:
            return None, None
        (meta, leaf, depth, jump_id, jump_depth, j_depth, j_jump_id, j_jump_depth, listed_at, first, sk,
         last, others, state.version) = row
        state.position = (last, others)
        state.listed = (sid, listed_at, first)
        known: dict[str, tuple[int, str, int]] = {}
        if depth is not None:
            known[leaf] = (depth, jump_id, jump_depth)
            if j_depth is not None:
                known[jump_id] = (j_depth, j_jump_id, j_jump_depth)
        state.links = (sid, sk, known)
        return (loads(meta.encode("utf-8")) if meta is not None else None), (unkey(leaf) if leaf is not None else None)

    def ordered_metas(
        self, order: str, after: tuple[int, str] | None, status: str | None, metadata: Meta | None
    ) -> Iterator[Meta]:
        # Keyset pages of one index (a cursor left open would pin a read snapshot, and with it
        # the WAL, for as long as the caller holds the generator). Metadata is left to the
        # service's rule: a superset is the contract.
        # The updated order's key is listed_at: the first row's may lag its exact updated_at
        # (schema.py), so after a cursor it can be a row the cursor is past: dropped here.
        column = "listed_at" if order == "updated_desc" else "created_at"
        cmp, direction = ("<", "DESC") if order != "created_asc" else (">", "ASC")
        status_sql = "" if status is None else " AND status = :status"
        tail = f" ORDER BY {column} {direction}, session_id {direction} LIMIT {LIST_BATCH}"
        first = f"SELECT meta, {column}, session_id, updated_at FROM sessions WHERE meta IS NOT NULL{status_sql}"
        following = first + f" AND ({column}, session_id) {cmp} (:at, :sid)"
        args: dict[str, Any] = {"status": status}
        cursor = None
        if after is not None:
            args.update(at=sortable(after[0]), sid=key(after[1]))
            cursor = (args["at"], args["sid"]) if column == "listed_at" else None
        while True:
            rows = self.db.rows((first if "sid" not in args else following) + tail, args)
            for text, listed, sid, updated in rows:
                if cursor is None or listed == updated or (updated, sid) < cursor:
                    yield _load(text)
            if len(rows) < LIST_BATCH:
                return
            args.update(at=rows[-1][1], sid=rows[-1][2])

    def get_entry(self, session_id: str, entry_id: str) -> Entry | None:
        rows = self.db.rows(_BODY_BYTES, (key(session_id), key(entry_id)))
        return loads(rows[0][0]) if rows else None

    def get_leaf(self, session_id: str) -> str | None:
        # With the leaf's depth: path() of this leaf, called next (a transcript read), needs it.
        rows = self.db.rows("SELECT s.leaf, e.depth FROM sessions s LEFT JOIN entries e"
                          " ON e.sk = s.sk AND e.entry_id = s.leaf WHERE s.session_id = ?",
                          (key(session_id),))
        if not rows or rows[0][0] is None:
            return None
        leaf = unkey(rows[0][0])
        self.db.local.state.leaf_depth = (session_id, leaf, rows[0][1])
        return leaf

    def entries_on_active_path(self, session_id: str, entry_ids: Sequence[str]) -> list[tuple[Entry | None, bool]]:
        """One statement per entry: its body and whether the walk from the session's leaf
        reaches it (not the leaf, the entry and the walk apart)."""
        out: list[tuple[Entry | None, bool]] = []
        for eid in entry_ids:
            rows = self.db.rows(HIT_SQL, {"s": key(session_id), "e": key(eid)})
            body, on_path = rows[0] if rows else (None, 0)
            out.append((_load(body) if body is not None else None, bool(on_path)))
        return out

    def path(self, session_id: str, leaf: str | None) -> EntryPath:
        if leaf is None:
            return EntryPath([], {})
        # An entry's depth never changes once written; a write on this thread drops the note.
        state = self.db.local.state
        noted, state.leaf_depth = state.leaf_depth, None
        if noted is not None and noted[:2] == (session_id, leaf):
            depth = noted[2]
        else:
            rows = self.db.rows(_DEPTH, (key(session_id), key(leaf)))
            depth = rows[0][0] if rows else None
        if depth is None:
            return EntryPath([], {})
        from .path import SqlitePath

        return SqlitePath(self.db, session_id, leaf, depth)

    def entries(self, session_id: str) -> list[Entry]:
        return [loads(r[0]) for r in
                self.db.rows(_BODIES, (key(session_id),))]

    def get_attachment_meta(self, session_id: str, attachment_id: str) -> AttachmentMeta | None:
        rows = self.db.rows("SELECT meta FROM attachments WHERE session_id = ? AND attachment_id = ?",
                          (key(session_id), key(attachment_id)))
        return _load(rows[0][0]) if rows else None

    def read_attachment(self, session_id: str, attachment_id: str) -> bytes | None:
        rows = self.db.rows("SELECT data FROM attachments WHERE session_id = ? AND attachment_id = ?",
                          (key(session_id), key(attachment_id)))
        return bytes(rows[0][0]) if rows else None

    def list_attachments(self, session_id: str) -> list[AttachmentMeta]:
        return [_load(r[0]) for r in
                self.db.rows("SELECT meta FROM attachments WHERE session_id = ?", (key(session_id),))]

    def integrity_check(self) -> list[str]:
        """What ``PRAGMA integrity_check`` finds wrong (empty: the file is sound)."""
        return [r[0] for r in self.db.rows("PRAGMA integrity_check") if r[0] != "ok"]

    def sessions_without_meta(self) -> list[str]:
        """Sessions holding entries but no meta (the contract allows it mid-way; fsck reports it)."""
        return [unkey(r[0]) for r in self.db.rows("SELECT session_id FROM sessions WHERE meta IS NULL")]
