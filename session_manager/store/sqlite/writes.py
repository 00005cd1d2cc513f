"""The sqlite adapter's write path: a commit's entries and session row,
session deletion, attachments. Each runs in the calling mutation's
transaction, or in one of its own (``BEGIN IMMEDIATE``), checked against
what is stored then."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterable
from typing import Any

import orjson

from ...errors import Conflict
from .._core.cas import resolve
from .._core.codec import encode_line
from ..base import AttachmentMeta, Commit
from ..sql.keys import key
from ..sql.values import events_prefix, json_text
from . import search
from .core import FIRST_LISTED, SK, SqliteDatastore, sortable
from .reads import SqliteReads
from .transactions import SqliteTransactions

__all__ = ["SqliteWrites", "link"]

# An entry's body is bound as its JSON's UTF-8 bytes and stored as the TEXT they are (``CAST(? AS
# TEXT)``: the same bytes, the column's type): bound as a str, sqlite3 encodes it to UTF-8 again (a
# LangGraph checkpoint's ~5 KB of latin-1 text: ~79k instructions of a ~1,075k put; callgrind).
_BODY = "CAST(? AS TEXT)"
# Entries name their session by its integer key (schema.py, version 7): SK finds it from the text key.
_INSERT = ("INSERT INTO entries (sk, entry_id, parent_id, depth, jump_id, jump_depth, body)"
           " VALUES (" + SK + ", ?, ?, ?, ?, ?, " + _BODY + ")")
# The same under the session's integer key, read in this transaction (an append's: reads.py).
_INSERT_KEYED = ("INSERT INTO entries (sk, entry_id, parent_id, depth, jump_id, jump_depth, body)"
                 " VALUES (?, ?, ?, ?, ?, ?, " + _BODY + ")")
_REVISE = "UPDATE entries SET body = " + _BODY + " WHERE sk = " + SK + " AND entry_id = ?"


def bodies_of(commit: Commit) -> list[bytes]:
    """The JSON (UTF-8) of each of ``commit``'s entries, as stored: an append's one entry with
    the data's JSON spliced in when the caller encoded it already (``Commit.data_json``, as the
    fs store does: a LangGraph checkpoint's values are not encoded a second time)."""
    entries, data_json = commit.entries, commit.data_json
    if data_json is not None and commit.append and len(entries) == 1:
        try:
            return [orjson.dumps({**entries[0], "data": orjson.Fragment(data_json)})]
        except TypeError:  # (integers past 64 bits elsewhere in the entry: encode_line decides)
            pass
    return list(map(encode_line, entries))  # (map: no comprehension frame per commit)


# An entry with its jump target's links: the one statement serves both probes of link().
_LINKS = ("SELECT p.depth, p.jump_id, p.jump_depth, j.depth, j.jump_id, j.jump_depth FROM entries p"
          " LEFT JOIN entries j ON j.sk = p.sk AND j.entry_id = p.jump_id WHERE p.sk = " + SK + " AND p.entry_id = ?")


def _links(conn: sqlite3.Connection, sid: str, parent: str | None,
           known: dict[str, tuple[int, str, int]]) -> tuple[int, str, int] | None:
    """``(depth, jump_id, jump_depth)`` of the entry ``parent`` (``None``: no such entry)."""
    if parent is None:
        return None
    found = known.get(parent)
    if found is None:
        row = conn.execute(_LINKS, (sid, parent)).fetchone()
        if row is None:
            return None
        found = known[parent] = (row[0], row[1], row[2])
        if row[3] is not None:
            known.setdefault(row[1], (row[3], row[4], row[5]))
    return found


def link(conn: sqlite3.Connection, sid: str, eid: str, parent: str | None,
         known: dict[str, tuple[int, str, int]]) -> tuple[int, str, int]:
    """A new entry's depth and skew-binary jump pointer (the rule of
    :mod:`..postgres.links`, probed one row at a time: SQLite is in-process);
    ``eid`` and ``parent`` are stored keys. (``known`` first: an append's parent
    and its jump target were noted by its read, no call for them.)"""
    p = None if parent is None else known.get(parent) or _links(conn, sid, parent, known)
    if p is None or parent is None:
        row = (0, eid, 0)  # a root (or an orphan: its path starts here)
    else:
        p_depth, p_jump, p_jump_depth = p
        j = known.get(p_jump) or _links(conn, sid, p_jump, known)
        if j is not None and p_jump != parent and p_depth - p_jump_depth == p_jump_depth - j[2]:
            row = (p_depth + 1, j[1], j[2])
        else:
            row = (p_depth + 1, parent, p_depth)
    known[eid] = row
    return row


# The most entries' links an append's memo carries on to the next (core.py: staged).
_KNOWN_MAX = 1024


@functools.lru_cache(maxsize=32)
def _upsert(columns: tuple[str, ...]) -> str:
    """The session row's upsert setting ``columns`` (a handful of shapes: built once each), and
    its version one more (every commit's: a new row's is random, the ``sessions_key`` trigger;
    schema.py, version 8)."""
    names = ", ".join(columns)
    update = "".join(f", {c} = excluded.{c}" for c in columns)
    return (f"INSERT INTO sessions (session_id{', ' * bool(columns)}{names}) VALUES "
            f"({', '.join('?' * (len(columns) + 1))}) ON CONFLICT (session_id) "
            f"DO UPDATE SET rev = sessions.rev + 1{update}")


@functools.lru_cache(maxsize=32)
def _update(columns: tuple[str, ...]) -> str:
    """:func:`_upsert` of a row read in this transaction (so it exists): one UPDATE, no insert tried."""
    return "UPDATE sessions SET rev = rev + 1" + "".join(f", {c} = ?" for c in columns) + " WHERE session_id = ?"


class SqliteWrites:
    """Commits, deletions and attachments, each in the calling mutation's transaction or one of its own."""

    def __init__(self, db: SqliteDatastore, txs: SqliteTransactions, reads: SqliteReads) -> None:
        self.db = db
        self.txs = txs
        self.reads = reads  # what a commit from outside a mutation is checked against

    def commit(self, session_id: str, commit: Commit) -> Commit:
        if self.db.local.state.in_tx:
            # Inside a mutation the decision was read in this transaction, which
            # holds the write lock: it is current, so the compare-and-set is a no-op.
            self.write(session_id, commit)
            return commit
        reads = self.reads
        with self.txs.mutation((session_id,)):
            # A commit from outside a mutation is checked against what is stored now.
            commit = resolve(commit, reads.get_meta(session_id), reads.get_leaf(session_id),
                             lambda entry_id: reads.get_entry(session_id, entry_id))
            self.write(session_id, commit)
        return commit

    def write(self, session_id: str, commit: Commit) -> None:
        """``commit`` as it is, in the open transaction (a mutation's: decided in it)."""
        # Encode everything first: a value that cannot be stored writes nothing.
        entries = commit.entries
        bodies = bodies_of(commit)
        meta = commit.meta
        meta_text = json_text(meta) if meta is not None else None
        db = self.db
        state = db.local.state
        conn, sid = state.conn or db.conn(), key(session_id)
        cur = state.cur or conn  # (the append's statements: no cursor made per statement)
        state.leaf_depth = state.staged = None
        noted, state.links = state.links, None
        listed, position, state.listed = state.listed, state.position, None
        # The session's row was read in this transaction (an append's): it exists, its key is known.
        read = noted is not None and noted[0] == sid
        session: int | str  # what the entries' INSERT names the session by
        try:
            if read:
                assert noted is not None
                insert, session, known = _INSERT_KEYED, noted[1], noted[2]
            else:
                insert, session, known = _INSERT, sid, {}
                if entries:  # its entries name it by the row's integer key (sk): the row first
                    conn.execute("INSERT INTO sessions (session_id) VALUES (?) ON CONFLICT (session_id) DO NOTHING",
                                 (sid,))
            for entry, text in zip(entries, bodies, strict=True):
                eid = key(entry["id"])
                # A new revision keeps its place and links: only the body changes (an
                # append's entries are new: checked absent in this transaction).
                # (The search index learns of both by itself: search.py.)
                if not commit.append and conn.execute(_REVISE, (text, sid, eid)).rowcount:
                    continue
                parent = entry.get("parent_id")
                parent = key(parent) if isinstance(parent, str) else None
                depth, jump_id, jump_depth = link(conn, sid, eid, parent, known)
                cur.execute(insert, (session, eid, parent, depth, jump_id, jump_depth, text))
            columns: dict[str, Any] = {}
            if meta is not None:
                updated = sortable(meta.get("updated_at"))
                columns.update(meta=meta_text, updated_at=updated)
                if not commit.append:  # an append's meta keeps them (derive_append_meta): their index stays put
                    columns.update(status=meta.get("status"), created_at=sortable(meta.get("created_at")))
                if not self._key_may_lag(conn, sid, updated, commit.append, listed):
                    columns["listed_at"] = updated
            if commit.leaf is not None:
                columns["leaf"] = key(commit.leaf)
            if read:
                cur.execute(_update(tuple(columns)), (*columns.values(), sid))
            else:
                conn.execute(_upsert(tuple(columns)), (sid, *columns.values()))
        except sqlite3.IntegrityError as e:
            if commit.append and str(e).startswith("UNIQUE constraint failed: entries."):  # (3.10: no errorname)
                # A new entry's id the session holds (entries' one unique key; drawn again by a
                # generator two processes repeat, or twice in a batch): a conflict, as every store
                # answers it, so the service draws fresh ids (the mutation's transaction rolls back).
                raise Conflict(f"an entry of session {session_id} is already stored") from None
            raise self.db.fail(e) from None
        except sqlite3.Error as e:
            raise self.db.fail(e) from None
        if (read and commit.append and meta_text is not None and "listed_at" not in columns
                and listed is not None and position is not None and not position[1]
                and state.version is not None):
            # What the next append's read would find once this commits, all known here: its meta
            # and leaf as written, the leaf's links (and its jump target's, when noted), the list
            # key that stayed (this session is first in the order and stays so: only its key may
            # lag), and the outbox position (nobody else follows: no row written, the sequence
            # unchanged). Kept by the COMMIT (core.py), taken while data_version is unchanged.
            leaf: str | None = columns.get("leaf")
            links = known.get(leaf) if leaf is not None else None
            if leaf is not None and links is not None and isinstance(session, int):
                # The links noted so far go on with it (a later leaf's jump target is an older
                # entry: probed once, then known), up to a bound.
                if len(known) > _KNOWN_MAX:
                    known = {leaf: links}
                state.staged = (sid, state.version, session, meta_text, leaf, known, listed[1], sid, position)

    def _key_may_lag(self, conn: sqlite3.Connection, sid: str, updated: Any, append: bool,
                     noted: tuple[str, Any, str | None] | None) -> bool:
        """Whether the session's list-order key (``listed_at``) may stay as it is: on an append
        to the session first in that order, with a new ``updated_at`` no lower than the key (it
        stays first, the key at most lags: schema.py), so the commit writes no page of that
        index. Otherwise the key is written, and the first session's lagging key, if any, is
        brought up to date first, so only the first row's key ever lags. (``noted``: the append
        read's (session key, its listed_at, the first session's key) in this transaction.)"""
        if append and noted is not None and noted[0] == sid:
            listed, first = noted[1], noted[2]
            if first == sid:
                return (isinstance(listed, (int, float)) and isinstance(updated, (int, float))
                        and updated >= listed)
            if first is not None:
                conn.execute("UPDATE sessions SET listed_at = updated_at WHERE session_id = ?"
                             " AND listed_at IS NOT updated_at", (first,))
            return False
        conn.execute("UPDATE sessions SET listed_at = updated_at WHERE session_id = (" + FIRST_LISTED + ")"
                     " AND session_id != ? AND listed_at IS NOT updated_at", (sid,))
        return False

    def delete_session(self, session_id: str) -> bool:
        removed: list[int] = []
        # Erasure: the session's earlier events (message text) leave the outbox with it;
        # secure_delete zeroes the freed cells, and the commit checkpoints the WAL (core.py).
        prefix = events_prefix(session_id)
        state = self.db.local.state
        state.leaf_depth = state.links = state.staged = None  # its entries' links go with it

        def run(conn: sqlite3.Connection) -> None:
            search.erase(conn, key(session_id))  # before its entries: its index rows are found by their seq
            for table, column in (("entries", "sk = " + SK), ("attachments", "session_id = ?"),
                                  ("sessions", "session_id = ?")):
                removed.append(conn.execute(f"DELETE FROM {table} WHERE {column}", (key(session_id),)).rowcount)
            search.lower(conn)  # after its entries: the mark lowered to what is left
            conn.execute("DELETE FROM outbox WHERE substr(payload, 1, ?) = ?", (len(prefix), prefix))
            state.erased = True

        self.txs.in_tx(session_id, run)
        return any(n > 0 for n in removed)  # the service fires on-deleted only for a delete that removed something

    def put_attachment(self, meta: AttachmentMeta, chunks: Iterable[bytes]) -> None:
        data = b"".join(chunks)  # bounded by max_attachment_bytes; a failing producer leaves nothing
        text = json_text(meta)

        def run(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO attachments (session_id, attachment_id, meta, data) VALUES (?, ?, ?, ?)"
                         " ON CONFLICT (session_id, attachment_id) DO UPDATE SET meta = excluded.meta,"
                         " data = excluded.data", (key(meta["session_id"]), key(meta["attachment_id"]), text, data))

        self.txs.in_tx(meta["session_id"], run)

    def delete_attachment(self, session_id: str, attachment_id: str) -> bool:
        found: list[bool] = []

        def run(conn: sqlite3.Connection) -> None:
            cur = conn.execute("DELETE FROM attachments WHERE session_id = ? AND attachment_id = ?",
                               (key(session_id), key(attachment_id)))
            found.append(cur.rowcount > 0)

        self.txs.in_tx(session_id, run)
        return found[0]
