"""The sqlite adapter's schema: versioned migrations (``PRAGMA user_version``),
run when a store opens, inside one ``BEGIN IMMEDIATE`` transaction so two
processes opening a new file at once apply each step exactly once.

The tables follow the postgres adapter's (values as their exact JSON text,
ids as :func:`..sql.keys.key` stores them, entries with depth and a
skew-binary jump pointer so :class:`..sql.path.WindowPath` reads any
window of a path in O(log depth) probes). What differs:

- ``entries.seq`` is the rowid: ``entries()`` in insertion order.
  ``entries_depth`` (version 2) orders a session's entries by depth, so a
  window of its path is one range scan (:mod:`.path`); it costs an append
  one more index page, and saves a transcript read the walk's three
  probes per entry.
- ``entries.sk`` (version 7) is its session's integer key (``sessions.sk``, given by the
  ``sessions_key`` trigger when a row is made): the two indexes on entries hold it, not the
  text id, so their entries are half as long and an append splits their pages half as often
  (0.3 WAL pages fewer per append: 4.66 -> 4.35, bench_sqlite). Statements find it from the
  text id by a constant subquery (:data:`.core.SK`: one probe of the sessions table). A
  clustered entries table (``WITHOUT ROWID`` by session, depth, id) was measured and left
  out: 5.6 pages per append (its interior pages hold whole rows, and the seq the search index
  needs takes another index), for a tail 3% faster.
- ``outbox.seq`` is ``AUTOINCREMENT``: never reused after a prune, so it
  increases in commit order (every write transaction is serialized).
  ``entry_key`` names the entry of an ``on-message-updated`` row, so a
  newer revision replaces the superseded rows (``outbox_updates``). No
  index on ``created_ms``: the table holds about a second of rows (pruned
  once a second), and an index would cost every mutation a page.
- ``sessions``: two list orders indexed (updated, created); a status filter
  walks the same index (unlike postgres, no status-prefixed pair: every
  append rewrites each index entry of its session, and SQLite writes whole
  pages to its WAL per commit, so each index costs every append a page). Not
  partial (``WHERE meta IS NOT NULL``) either: a partial index is rewritten
  whenever a column of its condition changes, i.e. on every meta write.
  The updated order's key is ``listed_at`` (version 5), beside the exact
  ``updated_at`` (not indexed, so written with the row's page for free):
  the two are equal on every row but the first of that order, whose key may
  lag (lower) while appends go to that same session, the common run, whose
  commit then writes no index page for the order; the order is the same
  (the first stays first), and a cursor read filters the rows it got by the
  exact value (:meth:`.reads.SqliteReads.ordered_metas`). Any other write of
  a key first brings the first row's key up to date (:mod:`.writes`).
- ``readers``: one row per store following the outbox, with the sequence
  it is past and when it last said so; rows are pruned once every live
  reader is past them, and after the retention whatever the readers say.
"""

from __future__ import annotations

import sqlite3

from ...errors import StoreError
from ..sql import versions
from ..sql.statements import statements as _statements
from . import search

MIGRATIONS: tuple[str, ...] = (
    # 1: sessions, entries, attachments, the event outbox and its readers.
    """
    CREATE TABLE sessions (
        session_id  TEXT PRIMARY KEY,   -- BINARY collation: byte order = code point order, as the service sorts
        meta        TEXT,               -- exact JSON text (NULL: entries without a meta)
        status      TEXT,
        created_at  INTEGER,
        updated_at  INTEGER,
        leaf        TEXT
    ) WITHOUT ROWID;
    CREATE INDEX sessions_updated ON sessions (updated_at, session_id);
    CREATE INDEX sessions_created ON sessions (created_at, session_id);

    CREATE TABLE entries (
        seq         INTEGER PRIMARY KEY,
        session_id  TEXT NOT NULL,
        entry_id    TEXT NOT NULL,
        parent_id   TEXT,
        depth       INTEGER NOT NULL,
        jump_id     TEXT NOT NULL,
        jump_depth  INTEGER NOT NULL,
        body        TEXT NOT NULL,
        UNIQUE (session_id, entry_id)
    );

    CREATE TABLE attachments (
        session_id     TEXT NOT NULL,
        attachment_id  TEXT NOT NULL,
        meta           TEXT NOT NULL,
        data           BLOB NOT NULL,
        PRIMARY KEY (session_id, attachment_id)
    ) WITHOUT ROWID;

    CREATE TABLE outbox (
        seq          INTEGER PRIMARY KEY AUTOINCREMENT,
        instance     TEXT NOT NULL,
        function_id  TEXT NOT NULL,
        entry_key    TEXT,
        payload      TEXT NOT NULL,
        created_ms   INTEGER NOT NULL
    );
    CREATE INDEX outbox_updates ON outbox (entry_key) WHERE entry_key IS NOT NULL;

    CREATE TABLE readers (
        instance  TEXT PRIMARY KEY,
        seq       INTEGER NOT NULL,
        seen_ms   INTEGER NOT NULL
    ) WITHOUT ROWID;
    """,
    # 2: a session's entries by depth: a window of its path is one range scan (path.py).
    """
    CREATE INDEX entries_depth ON entries (session_id, depth);
    """,
    # 3: the search index (search.py), filled from the stored entries.
    search.MIGRATION,
    # 4: the search index caught up before each query, not in each commit (search.py).
    search.CATCH_UP,
    # 5: the list order's key apart from the exact updated_at, so an append to the session on
    # top of that order leaves its index entry alone (writes.py). An older release would trust
    # a lagging key: the version bump makes it refuse the file.
    """
    ALTER TABLE sessions ADD COLUMN listed_at INTEGER;
    UPDATE sessions SET listed_at = updated_at;
    DROP INDEX sessions_updated;
    CREATE INDEX sessions_listed ON sessions (listed_at, session_id);
    """,
    # 6: the search index without copies of the entries' ids (half the bytes), rebuilt (search.py).
    search.COMPACT,
    # 7: entries name their session by its integer key (sessions.sk), not its text id: their two
    # indexes' entries are half as long, so an append splits their pages half as often (0.3 WAL
    # pages fewer per append). ``seq`` is kept (the search index's key). A session row is made
    # for entries that had none, so every entry keeps its session.
    """
    ALTER TABLE sessions ADD COLUMN sk INTEGER;
    INSERT INTO sessions (session_id) SELECT DISTINCT session_id FROM entries WHERE true
        ON CONFLICT (session_id) DO NOTHING;
    CREATE TEMP TABLE sessions_numbered AS SELECT session_id FROM sessions ORDER BY session_id;
    CREATE UNIQUE INDEX temp.sessions_numbered_id ON sessions_numbered (session_id);
    UPDATE sessions SET sk = (SELECT n.rowid FROM temp.sessions_numbered n WHERE n.session_id = sessions.session_id);
    DROP TABLE temp.sessions_numbered;
    CREATE UNIQUE INDEX sessions_sk ON sessions (sk);
    CREATE TRIGGER sessions_key AFTER INSERT ON sessions WHEN new.sk IS NULL BEGIN
        UPDATE sessions SET sk = (SELECT coalesce(max(sk), 0) + 1 FROM sessions) WHERE session_id = new.session_id;
    END;
    CREATE TABLE entries_keyed (
        seq         INTEGER PRIMARY KEY,
        sk          INTEGER NOT NULL,   -- the session's sessions.sk
        entry_id    TEXT NOT NULL,
        parent_id   TEXT,
        depth       INTEGER NOT NULL,
        jump_id     TEXT NOT NULL,
        jump_depth  INTEGER NOT NULL,
        body        TEXT NOT NULL
    );
    INSERT INTO entries_keyed (seq, sk, entry_id, parent_id, depth, jump_id, jump_depth, body)
        SELECT e.seq, s.sk, e.entry_id, e.parent_id, e.depth, e.jump_id, e.jump_depth, e.body
        FROM entries e JOIN sessions s ON s.session_id = e.session_id ORDER BY e.seq;
    DROP TABLE entries;
    ALTER TABLE entries_keyed RENAME TO entries;
    CREATE UNIQUE INDEX entries_id ON entries (sk, entry_id);
    CREATE INDEX entries_depth ON entries (sk, depth);
    CREATE TRIGGER search_revised AFTER UPDATE OF body ON entries BEGIN
        INSERT OR IGNORE INTO search_dirty (seq) VALUES (new.seq);
    END
    """,
    # 8: the session's version (``sessions.rev``): one more with every write of the session (its
    # row is upserted by each commit, writes.py), from a random start where a row is made, so a
    # deleted and recreated session does not come back to a version read before. A messages-tail
    # page kept at a version is answered while the session is still at it (reads.py).
    """
    ALTER TABLE sessions ADD COLUMN rev INTEGER;
    UPDATE sessions SET rev = random() >> 2;
    DROP TRIGGER sessions_key;
    CREATE TRIGGER sessions_key AFTER INSERT ON sessions WHEN new.sk IS NULL BEGIN
        UPDATE sessions SET sk = (SELECT coalesce(max(sk), 0) + 1 FROM sessions), rev = random() >> 2
            WHERE session_id = new.session_id;
    END
    """,
    # 9: the search index made again (search.py, rebuild below): words are the runs of the text's
    # NFC form since (search_text.py), so a decomposed text was indexed as other words.
    search.COMPACT,
)
# Python run after the migrations' statements (every step's: it reads the final schema), in their
# transaction, for each version a file is brought to.
# (Version 3's and 6's index is filled by version 9's rebuild, which replaces it: a file below
# version 9 is indexed once.)
AFTER = {9: search.rebuild}

OURS = frozenset({"sessions", "entries", "attachments", "outbox", "readers", "sqlite_sequence"}) | search.TABLES




def _utf8(conn: sqlite3.Connection, path: str) -> None:
    """Refuse a file whose text encoding is not UTF-8 (another program can make an empty file
    UTF-16 before the store first opens it): bodies are bound as UTF-8 bytes cast to TEXT and
    read back as the bytes (writes.py, reads.py), which SQLite takes for UTF-16 there."""
    encoding = conn.execute("PRAGMA encoding").fetchone()[0]
    if encoding != "UTF-8":
        raise StoreError(f"sqlite: {path} is a {encoding} database; the session store needs UTF-8 "
                         "(nothing was written)")


def check(conn: sqlite3.Connection, path: str) -> int:
    """A read-only open's check (no transaction, nothing written): the database is a
    session store at exactly this release's version; an older one is refused (a
    read-only open never migrates: a writable open of this release does), as are a
    newer one and a file that holds no session store."""
    _utf8(conn, path)
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > len(MIGRATIONS):
        raise versions.newer(f"sqlite: {path}", version, len(MIGRATIONS))
    if version == 0:
        raise StoreError(f"sqlite: {path} holds no session store (schema version 0); a read-only open "
                         "creates nothing (nothing was written)")
    if version < len(MIGRATIONS):
        raise versions.older_read_only(f"sqlite: {path}", version, len(MIGRATIONS))
    return version


def refuse(conn: sqlite3.Connection, path: str) -> int:
    """The file's schema version, unless it is one a writable open refuses: a newer
    version's, or (version 0) another application's database. Reads only: the opening
    connection asks before it switches the file to WAL mode (core.py), so a refused file
    keeps its journal mode, its header and no -wal/-shm beside it."""
    _utf8(conn, path)
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > len(MIGRATIONS):
        raise versions.newer(f"sqlite: {path}", version, len(MIGRATIONS))
    if version == 0:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        foreign = sorted(tables - OURS)
        if foreign:
            raise StoreError(f"sqlite: {path} is not a session-manager database (it holds the tables "
                             f"{', '.join(foreign[:5])}); nothing was written")
    return version


def migrate(conn: sqlite3.Connection, path: str) -> int:
    """Apply the missing migrations (the caller holds no transaction); returns
    the version. Refuses, writing nothing, a database of a newer version or
    one that holds other tables (not a session store)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = refuse(conn, path)  # (again, under the write lock: another process may have migrated)
        for step in MIGRATIONS[version:]:
            for statement in _statements(step):
                conn.execute(statement)
        # Once every step ran: the code is this release's, which reads this release's schema.
        for n in range(version + 1, len(MIGRATIONS) + 1):
            after = AFTER.get(n)
            if after is not None:
                after(conn)
        if version < len(MIGRATIONS):
            conn.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return len(MIGRATIONS)
