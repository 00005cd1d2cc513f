"""The fs store's persisted search index: one FTS5 database beside the logs
(``.search/index.db``), whose on-disk posting lists a query reads only for
its own words.

It holds, per searchable entry, the folded words of :mod:`._search_text`
(made as the sqlite adapter's index makes them, :mod:`.sqlite.search`, in
tables keyed for one file, see ``_SCHEMA``), and per session the identity of
the log it was made from (size, mtime, inode) and its totals. Never a source of truth: a session whose log
does not match its identity is indexed again from its log, a file that
does not open as this index (corrupted, another version) is removed and
rebuilt, so a corrupted or missing index gives the same answers.

Brought up to date before each query, not at commit (an append costs a
set add): the first query of an open checks every session's log identity
(a ``stat`` each, no index read), later ones only the sessions this process
committed to since (a writable store is the one writer of its logs).

The segments are merged into one after every 10% of growth (a query probes
each segment), and the pages a merge frees go back to the file system.

Erasure: a deleted session's rows are deleted, the FTS5 segments rewritten
without them (``optimize``: FTS5 before 3.43 has no secure-delete), freed
pages zeroed (``secure_delete``) and the WAL truncated, before the delete
returns. Sessions whose log is gone are erased at the first query of an open.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..path import Entry
from ..search_index import Candidate, Matches, Ranked, SortKey, Stats, rank, scan
from ..search_text import Query
from ..sql import fts5 as fts
from ..sql.keys import key, unkey
from ..sql.statements import statements as _statements

__all__ = ["DB_FILE", "FsSearchDb"]

DB_FILE = "index.db"
_VERSION = 6  # (6: words of the text in NFC, search_text.py; a file of 5 is made again)
MERGE_DOCS = 1000  # (see _reindex)
SHIFT = 24  # a doc's rowid: its session's number << SHIFT | its place (a session is one rowid range)
# The sqlite adapter's FTS5 table (search.py there), over rows keyed for one file: a session is a
# number (its rows one rowid range, no id repeated per row, no index on it), its totals kept with
# its log identity (written once per catch-up). No triggers: a session's FTS rows are added and
# deleted by one statement over its rowid range (a trigger per row costs a catch-up 4x).
_SCHEMA = """
    CREATE TABLE logs (
        sn          INTEGER PRIMARY KEY,
        session_id  TEXT NOT NULL UNIQUE,
        size        INTEGER NOT NULL,
        mtime_ns    INTEGER NOT NULL,
        ino         INTEGER NOT NULL,
        docs        INTEGER NOT NULL,
        words       INTEGER NOT NULL
    );
    CREATE TABLE docs (
        id          INTEGER PRIMARY KEY,
        entry_id    NOT NULL,         -- the key, or a service id's 16 bytes (_pack_id)
        role        TEXT NOT NULL,
        ts          NOT NULL,
        length      INTEGER NOT NULL,
        words       TEXT NOT NULL
    );
    CREATE VIRTUAL TABLE fts USING fts5(
        words, content='docs', content_rowid='id', detail=none, columnsize=0, tokenize="ascii tokenchars '_'")
"""
Signature = tuple[int, int, int]
_T = TypeVar("_T")
log = logging.getLogger("session_manager.store.fs")
_SERVICE_ID = re.compile(r"e_[0-9a-f]{32}")


class LogSource(Protocol):
    """What the index reads of the fs store."""

    def list_metas(self) -> list[dict[str, Any]]: ...
    def file_path(self, session_id: str) -> Path: ...
    def entries_held(self, session_id: str) -> list[Entry]: ...  # (read, never changed)


def _signature(path: str) -> Signature | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)




def term_freq(words: str, word: str, *, prefix: bool) -> int:
    """How many of ``words`` (sorted, single-space separated) equal ``word`` (or start with it)."""
    padded = " " + words + " "
    if prefix:
        return padded.count(" " + word)
    probe = " " + word + " "
    i = padded.find(probe)
    if i < 0:
        return 0
    n, step, i = 1, len(word) + 1, i + len(word) + 1
    while padded.startswith(word + " ", i + 1):  # (sorted: the same word follows, if repeated)
        n, i = n + 1, i + step
    return n


class FsSearchDb:
    """The persisted search index of one writable fs store (see the module docstring)."""

    def __init__(self, data_dir: str) -> None:
        self._dir = os.path.join(data_dir, ".search")
        self._path = os.path.join(self._dir, DB_FILE)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._logs: dict[str, _Log] = {}  # session -> what the index holds of it
        self._names: dict[int, str] = {}  # sn -> session
        self._checked = False  # every live session checked against its log since the open
        self._all: tuple[int, int] | None = None  # (docs, words) of every session: None, to sum again
        self._unmerged = 0  # docs added since the segments were last merged into one
        self._touched: set[str] = set()
        # ``touched(session_id)``: a commit wrote that session's log (O(1); the catch-up waits for
        # the next query). The set's own add: no frame of this class's on every commit.
        self.touched: Callable[[str], None] = self._touched.add

    def search(self, store: LogSource, query: Query, sessions: Collection[str] | None,
               roles: Collection[str] | None) -> Matches:
        """:class:`Matches` from the index, brought up to date with ``store``'s logs first."""
        return self._answer(store, lambda conn: self._query(conn, query, sessions, roles),
                            lambda ids: scan(query, ids, store.entries_held, roles), sessions)

    def search_page(self, store: LogSource, query: Query, sessions: Collection[str] | None,
                    roles: Collection[str] | None, limit: int,
                    after: SortKey | None, stats: Stats | None = None) -> Ranked:
        """The page of :meth:`~session_manager.store.SessionStore.search_page`, ranked by
        SQLite inside the index (only the page's rows come back to Python)."""
        return self._answer(store, lambda conn: self._page(conn, query, sessions, roles, limit, after, stats),
                            lambda ids: rank(scan(query, ids, store.entries_held, roles), limit, after, stats),
                            sessions)

    def _answer(self, store: LogSource, ask: Callable[[sqlite3.Connection], _T],
                fallback: Callable[[Collection[str]], _T], sessions: Collection[str] | None) -> _T:
        with self._lock:
            try:
                conn = self._open()
                self._catch_up_all(store, conn)
                return ask(conn)
            except (sqlite3.DatabaseError, OSError):
                self._reset()  # not this index, or damaged: rebuilt from the logs
            try:
                conn = self._open()
                self._catch_up_all(store, conn)
                return ask(conn)
            except (sqlite3.Error, OSError) as e:
                # Never a source of truth: a file system refusing the index (full, read-only
                # directory) costs this query a read of the logs, not an answer.
                log.warning("search index %s unusable (%s): reading the logs", self._path, e)
                self._reset()
        return fallback(sessions if sessions is not None else [m["session_id"] for m in store.list_metas()])

    def forget(self, session_id: str) -> None:
        """Erase a deleted session from the index, at once."""
        with self._lock:
            self._touched.discard(session_id)
            if self._conn is None and not os.path.exists(self._path):
                return
            try:
                self._erase(self._open(), session_id)
            except (sqlite3.DatabaseError, OSError):
                self._reset()  # the whole index goes (erased with it), rebuilt at the next query

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.close()
                self._conn = None

    # -- the database --------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        os.makedirs(self._dir, exist_ok=True)
        self._sweep_files()
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            # Pages a merge frees go back to the file system (after each merge, below); set before
            # anything is written (a no-op on an existing file).
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # a power loss loses the last commits, caught up again
            conn.execute("PRAGMA secure_delete=ON")
            conn.execute("PRAGMA mmap_size=268435456")  # reads without a syscall per page (the page cache is shared)
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version != _VERSION:
                if version != 0 or conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                    raise sqlite3.DatabaseError(f"search index of version {version}")
                conn.execute("BEGIN IMMEDIATE")
                for statement in _statements(_SCHEMA):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {_VERSION}")
                conn.execute("COMMIT")
            # The words of the index, for a prefix's expansion (ranked_page); a connection's own.
            fts.vocabulary(conn, "fts_vocab", "fts")
            self._logs, self._names = {}, {}
            for sn, stored, size, mtime, ino, docs, words in conn.execute("SELECT * FROM logs"):
                sid = unkey(stored)
                self._logs[sid] = _Log(sn, (size, mtime, ino), docs, words)
                self._names[sn] = sid
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _sweep_files(self) -> None:
        """Remove what an earlier layout left in the directory (one JSON file per session)."""
        keep = {DB_FILE, DB_FILE + "-wal", DB_FILE + "-shm"}
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self._dir):
                if name not in keep:
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(self._dir, name))

    def _reset(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                os.unlink(self._path + suffix)
        self._logs, self._names = {}, {}
        self._checked = False

    # -- catching up ---------------------------------------------------------

    def _catch_up_all(self, store: LogSource, conn: sqlite3.Connection) -> None:
        todo: set[str] = set()
        if not self._checked:
            live = {m["session_id"] for m in store.list_metas()}
            for sid in [s for s in self._logs if s not in live]:
                self._erase(conn, sid)
            todo = live
        while self._touched:  # (a commit racing this adds again: caught up next time)
            todo.add(self._touched.pop())
        changed: dict[str, Signature | None] = {}
        for sid in todo:
            sig = _signature(os.fspath(store.file_path(sid)))
            known = self._logs.get(sid)
            if sig != (known.sig if known is not None else None):
                changed[sid] = sig
        if changed:
            self._reindex(store, conn, changed)
        self._checked = True

    def _reindex(self, store: LogSource, conn: sqlite3.Connection, changed: dict[str, Signature | None]) -> None:
        """Index the sessions whose logs changed from their logs, in one transaction."""
        learnt: dict[str, _Log | None] = {}
        conn.execute("BEGIN IMMEDIATE")
        try:
            for sid, sig in changed.items():
                known = self._logs.get(sid)
                if known is not None:
                    _delete_docs(conn, known.sn)
                if sig is None:
                    if known is not None:
                        conn.execute("DELETE FROM logs WHERE sn = ?", (known.sn,))
                    learnt[sid] = None
                    continue
                rows = []
                for e in store.entries_held(sid):
                    found = fts.doc(e)
                    if found is not None:
                        rows.append((_pack_id(e["id"]), *found))
                docs, words = len(rows), sum(r[3] for r in rows)
                sn = known.sn if known is not None else conn.execute(
                    "INSERT INTO logs (session_id, size, mtime_ns, ino, docs, words) VALUES (?, 0, 0, 0, 0, 0)"
                    " RETURNING sn", (key(sid),)).fetchone()[0]
                conn.execute("UPDATE logs SET size = ?, mtime_ns = ?, ino = ?, docs = ?, words = ? WHERE sn = ?",
                             (*sig, docs, words, sn))
                base = sn << SHIFT
                conn.executemany("INSERT INTO docs (id, entry_id, role, ts, length, words) VALUES (?, ?, ?, ?, ?, ?)",
                                 [(base + i, *r) for i, r in enumerate(rows)])
                conn.execute("INSERT INTO fts (rowid, words) SELECT id, words FROM docs WHERE id BETWEEN ? AND ?",
                             _range(sn))
                learnt[sid] = _Log(sn, sig, docs, words)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._all = None
        added = sum(log.docs for log in learnt.values() if log is not None)
        self._unmerged += added
        if added and self._unmerged > max(MERGE_DOCS, sum(log.docs for log in self._logs.values()) // 10):
            # Many small segments cost every query a probe each: one segment again, every 10% of growth.
            conn.execute("INSERT INTO fts (fts) VALUES ('optimize')")
            conn.executescript("PRAGMA incremental_vacuum;")  # (execute() runs one step: one page)
            self._unmerged = 0
        for sid, log in learnt.items():
            if log is None:
                old = self._logs.pop(sid, None)
                if old is not None:
                    self._names.pop(old.sn, None)
            else:
                self._logs[sid] = log
                self._names[log.sn] = sid

    def _erase(self, conn: sqlite3.Connection, session_id: str) -> None:
        known = self._logs.get(session_id)
        if known is None:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            _delete_docs(conn, known.sn)
            conn.execute("DELETE FROM logs WHERE sn = ?", (known.sn,))
            # FTS5 before 3.43 keeps deleted words in older segments until they merge: rewrite them all.
            conn.execute("INSERT INTO fts (fts) VALUES ('optimize')")
            conn.execute("COMMIT")
            conn.executescript("PRAGMA incremental_vacuum;")  # (execute() runs one step: one page)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._logs.pop(session_id, None)
        self._all, self._unmerged = None, 0
        self._names.pop(known.sn, None)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the WAL's copies of those pages leave with it

    # -- queries -------------------------------------------------------------

    def _query(self, conn: sqlite3.Connection, query: Query, sessions: Collection[str] | None,
               roles: Collection[str] | None) -> Matches:
        logs = list(self._logs.values()) if sessions is None else [
            log for log in (self._logs.get(s) for s in set(sessions)) if log is not None]
        if sessions is None:
            if self._all is None:
                self._all = (sum(log.docs for log in logs), sum(log.words for log in logs))
            out = Matches(docs=self._all[0], total_length=self._all[1])
        else:
            out = Matches(docs=sum(log.docs for log in logs), total_length=sum(log.words for log in logs))
        where, params = "", tuple[str, ...]()  # (typed: a scope adds one)
        if sessions is not None:
            where = f" AND (fts.rowid >> {SHIFT}) IN (SELECT value FROM json_each(?))"
            params = (json.dumps([log.sn for log in logs]),)
        terms = [fts.quoted(w) for w in query.exact] + [fts.quoted(query.prefix) + "*"]
        out.df = [int(conn.execute("SELECT count(*) FROM fts WHERE fts MATCH ?" + where,
                                   (t, *params)).fetchone()[0]) for t in terms]
        if not logs or not all(out.df):
            return out
        exact, prefix = query.exact, query.prefix
        for rowid, eid, role, ts, length, text in conn.execute(
                "SELECT d.id, d.entry_id, d.role, d.ts, d.length, d.words FROM fts JOIN docs d ON d.id = fts.rowid"
                " WHERE fts MATCH ?" + where, (" AND ".join(terms), *params)):
            if roles is not None and role not in roles:
                continue
            tfs = (*(term_freq(text, w, prefix=False) for w in exact), term_freq(text, prefix, prefix=True))
            if all(tfs):  # (the tokenizer agrees with words(); checked, never trusted)
                out.candidates.append(Candidate(self._names[rowid >> SHIFT], _unpack_id(eid), role, int(ts), tfs,
                                                length))
        return out

    def _page(self, conn: sqlite3.Connection, query: Query, sessions: Collection[str] | None,
              roles: Collection[str] | None, limit: int, after: SortKey | None,
              stats: Stats | None) -> Ranked:
        if sessions is None:
            if not self._logs or limit <= 0:
                return Ranked.of([], stats)
            if self._all is None:
                every = self._logs.values()
                self._all = (sum(log.docs for log in every), sum(log.words for log in every))
            docs, total = self._all
            scope, params = "", dict[str, Any]()
        else:
            logs = [log for log in (self._logs.get(s) for s in set(sessions)) if log is not None]
            if not logs or limit <= 0:
                return Ranked.of([], stats)
            docs, total = sum(log.docs for log in logs), sum(log.words for log in logs)
            scope = f" AND (fts.rowid >> {SHIFT}) IN (SELECT value FROM json_each(:scope))"
            params = {"scope": json.dumps([log.sn for log in logs])}
        only = ""
        if roles is not None:
            only = " AND d.role IN (SELECT value FROM json_each(:roles))"
            params["roles"] = json.dumps(sorted(roles))
        names = self._names

        def candidate(row: tuple[Any, ...], tfs: tuple[int, ...]) -> Candidate:
            rowid, eid, role, ts, length = row
            return Candidate(names[rowid >> SHIFT], _unpack_id(eid), role, int(ts), tfs, length)

        return fts.ranked_page(
            conn, vocab="fts_vocab", cols="d.id, d.entry_id, d.role, d.ts", length="d.length",
            spaced="(' ' || replace(d.words, ' ', '  ') || ' ')",
            source="FROM fts JOIN docs d ON d.id = fts.rowid WHERE fts MATCH {match}" + scope + only,
            count="SELECT count(*) FROM fts WHERE fts MATCH {match}" + scope,
            totals="SELECT :docs AS docs, :words AS words", params={**params, "docs": docs, "words": total},
            query=query, limit=limit, after=after,
            candidate=candidate, stats=stats)


@dataclass(frozen=True, slots=True)
class _Log:
    sn: int
    sig: Signature
    docs: int
    words: int


def _pack_id(entry_id: str) -> str | bytes:
    """An entry id as stored: the service's form (``e_`` and 32 hex digits) as its 16 bytes
    (half the row's id bytes), any other as its key."""
    if len(entry_id) == 34 and _SERVICE_ID.fullmatch(entry_id):
        return bytes.fromhex(entry_id[2:])
    return key(entry_id)


def _unpack_id(stored: str | bytes) -> str:
    return "e_" + stored.hex() if isinstance(stored, bytes) else unkey(stored)


def _delete_docs(conn: sqlite3.Connection, sn: int) -> None:
    """A session's rows out of the FTS index (by their words, as it needs), then out of ``docs``."""
    span = _range(sn)
    conn.execute("INSERT INTO fts (fts, rowid, words) SELECT 'delete', id, words FROM docs WHERE id BETWEEN ? AND ?",
                 span)
    conn.execute("DELETE FROM docs WHERE id BETWEEN ? AND ?", span)


def _range(sn: int) -> tuple[int, int]:
    return sn << SHIFT, ((sn + 1) << SHIFT) - 1
