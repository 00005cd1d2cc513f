"""The postgres adapter's schema: versioned migrations, run at startup.

Every table lives in one schema (``public`` unless configured), so several
deployments (or test runs) share a database without seeing each other.
Migrations run under a transaction-scoped advisory lock keyed by the schema
name: two instances booting at once apply each step exactly once, and
instances of *different* schemas never wait for each other.

Why each index exists (the queries they serve are in ``store.py``):

- ``sessions_updated`` / ``sessions_created`` (and the ``status``-prefixed
  pair, since migration 11 for the statuses done and error only): ``session::list``
  in each order, optionally filtered by status, is an index scan that stops after
  one page (idle or working: the unprefixed index, filtered).
- ``sessions_metadata`` (GIN, ``jsonb_path_ops``, since migration 11 only the
  sessions with metadata): a metadata filter is a bitmap index scan on
  containment; the service rechecks its equality rule.
- ``entries`` primary key ``(session_id, entry_id)``: get-message and every
  step of a path walk are one index probe.
- ``entries_seq``: ``entries()`` in insertion order.
- ``outbox_id``: the primary key, for fetching a notified id and replaying.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg import Connection, sql

from ...errors import StoreError
from ..sql import versions
from . import search
from .at_leaf import APPEND_AT_PROBED, APPEND_AT_PROCEDURE, APPEND_CALL_PROCEDURE, APPEND_FUNCTION

# sm_apply(...): the optimistic commit. Under the session's advisory lock (the
# one the transactional path takes), it checks the state the decision was
# made on (p_check 1: the meta text and leaf as read; 2: no session yet; and
# each entry read, by its exact text, NULL meaning absent), raising SQLSTATE
# SM409 (nothing written) on any difference; then upserts the entries (depth
# and jump pointer as links.py computes them), the session row, the outbox
# rows and one pg_notify of their ids.
APPLY_FUNCTION = """
CREATE FUNCTION sm_apply(
    p_sid text, p_check integer, p_expect_meta text, p_expect_leaf text, p_read_ids text[], p_read_bodies text[],
    p_ids text[], p_parents text[], p_bodies text[],
    p_has_meta boolean, p_meta text, p_status text, p_created bigint, p_updated bigint, p_metadata jsonb,
    p_has_leaf boolean, p_leaf text,
    p_instance text, p_fids text[], p_payloads text[], p_channel text, p_all text[]
) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    i integer;
    pd integer; pj text; pjd integer; jjd integer; jj text;
    d integer; ji text; jd integer;
    note text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || ':' || p_sid, 0));
    IF p_check = 1 AND NOT EXISTS (SELECT 1 FROM sessions WHERE session_id = p_sid AND meta = p_expect_meta
                                   AND leaf IS NOT DISTINCT FROM p_expect_leaf) THEN
        RAISE EXCEPTION 'session % changed', p_sid USING ERRCODE = 'SM409';
    END IF;
    IF p_check = 2 AND EXISTS (SELECT 1 FROM sessions WHERE session_id = p_sid AND meta IS NOT NULL) THEN
        RAISE EXCEPTION 'session % exists', p_sid USING ERRCODE = 'SM409';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_read_ids, p_read_bodies) AS u(i, b)
               LEFT JOIN entries e ON e.session_id = p_sid AND e.entry_id = u.i
               WHERE e.body IS DISTINCT FROM u.b) THEN
        RAISE EXCEPTION 'an entry of session % changed', p_sid USING ERRCODE = 'SM409';
    END IF;
    FOR i IN 1 .. coalesce(cardinality(p_ids), 0) LOOP
        pd := NULL;
        IF p_parents[i] IS NOT NULL THEN
            SELECT depth, jump_id, jump_depth INTO pd, pj, pjd FROM entries
             WHERE session_id = p_sid AND entry_id = p_parents[i];
        END IF;
        IF pd IS NULL THEN
            d := 0; ji := p_ids[i]; jd := 0;
        ELSE
            jj := NULL;
            SELECT jump_id, jump_depth INTO jj, jjd FROM entries WHERE session_id = p_sid AND entry_id = pj;
            IF jj IS NOT NULL AND pd - pjd = pjd - jjd AND pj <> p_parents[i] THEN
                d := pd + 1; ji := jj; jd := jjd;
            ELSE
                d := pd + 1; ji := p_parents[i]; jd := pd;
            END IF;
        END IF;
        INSERT INTO entries (session_id, entry_id, parent_id, depth, jump_id, jump_depth, body)
        VALUES (p_sid, p_ids[i], p_parents[i], d, ji, jd, p_bodies[i])
        ON CONFLICT (session_id, entry_id) DO UPDATE SET parent_id = EXCLUDED.parent_id, depth = EXCLUDED.depth,
            jump_id = EXCLUDED.jump_id, jump_depth = EXCLUDED.jump_depth, body = EXCLUDED.body;
    END LOOP;
    INSERT INTO sessions AS s (session_id, meta, status, created_at, updated_at, metadata, leaf)
    VALUES (p_sid, p_meta, p_status, p_created, p_updated, p_metadata, p_leaf)
    ON CONFLICT (session_id) DO UPDATE SET
        meta = CASE WHEN p_has_meta THEN EXCLUDED.meta ELSE s.meta END,
        status = CASE WHEN p_has_meta THEN EXCLUDED.status ELSE s.status END,
        created_at = CASE WHEN p_has_meta THEN EXCLUDED.created_at ELSE s.created_at END,
        updated_at = CASE WHEN p_has_meta THEN EXCLUDED.updated_at ELSE s.updated_at END,
        metadata = CASE WHEN p_has_meta THEN EXCLUDED.metadata ELSE s.metadata END,
        leaf = CASE WHEN p_has_leaf THEN EXCLUDED.leaf ELSE s.leaf END;
    IF coalesce(cardinality(p_fids), 0) > 0 THEN
        WITH ins AS (
            INSERT INTO outbox (instance, function_id, payload)
            SELECT p_instance, f, p FROM unnest(p_fids, p_payloads) WITH ORDINALITY AS u(f, p, n) ORDER BY n
            RETURNING id, function_id)
        SELECT p_instance || '|' || string_agg(id::text || ':' || array_position(p_all, function_id)::text, ','
                                               ORDER BY id) INTO note FROM ins;
        PERFORM pg_notify(p_channel, note);
    END IF;
    RETURN 0;
END
$fn$;
"""

# Migration 14: sm_apply with one parameter more, ``p_expect_row`` (the session row's ``xmin`` as
# text; NULL: not checked), checked with the meta text and leaf (p_check 1), answering the
# writing transaction's id: the ``xmin`` its write of the session row left (one transaction, no
# subtransaction: every row it writes carries it). So an optimistic commit knows the session's
# version it left (reads.py, meta_and_leaf_since: the row's xmin, leaf and meta text) and that
# it followed exactly the version it checked, without a read (SessionStore.version_left: the
# LangGraph saver's index after its own puts). A new overload beside the old one, which the
# previous release keeps calling: safe while its processes run (nothing else changes, no table
# is taken beyond migrate's own locks). Written to run again over itself (OR REPLACE).
_APPLY_AT_ROW_PARTS = (
    ("CREATE FUNCTION sm_apply(", "CREATE OR REPLACE FUNCTION sm_apply("),
    ("p_channel text, p_all text[]\n) RETURNS integer",
     "p_channel text, p_all text[], p_expect_row text\n) RETURNS text"),
    ("AND leaf IS NOT DISTINCT FROM p_expect_leaf) THEN",
     "AND leaf IS NOT DISTINCT FROM p_expect_leaf\n                                   "
     "AND (p_expect_row IS NULL OR xmin::text = p_expect_row)) THEN"),
    ("    RETURN 0;\n", "    RETURN xid(pg_current_xact_id())::text;\n"),
)


def _apply_at_row() -> str:
    out = APPLY_FUNCTION
    for was, now in _APPLY_AT_ROW_PARTS:
        assert out.count(was) == 1, was
        out = out.replace(was, now)
    return out


APPLY_AT_ROW_FUNCTION = _apply_at_row()

# The call of sm_apply, by name (both write paths send it).
APPLY = (  # binary parameters (%b): no text escaping of the arrays' JSON, client or server side
    "SELECT sm_apply(%(sid)b::text, %(check)b::integer, %(expect_meta)b::text, %(expect_leaf)b::text,"
    " %(read_ids)b::text[], %(read_bodies)b::text[], %(ids)b::text[], %(parents)b::text[], %(bodies)b::text[],"
    " %(has_meta)b::boolean, %(meta)b::text, %(status)b::text, %(created)b, %(updated)b,"
    " %(metadata)b::jsonb, %(has_leaf)b::boolean, %(leaf)b::text, %(instance)b::text, %(fids)b::text[],"
    " %(payloads)b::text[], %(channel)b::text, %(all)b::text[])"
)
# The optimistic commit's call (migration 14's overload): it also checks ``%(row)b`` and answers
# the session row's xmin it left.
APPLY_AT_ROW = APPLY[:-1] + ", %(row)b::text)"

# The instances that observe events (outbox.py, "Who is owed events"): a writable one's row,
# renewed while it listens; past ``expires`` it is nobody (a killed process pins nothing).
# An instance of the previous release listening now (its LISTEN is its connection's last
# statement) registers nothing: it is counted in for a day, so an upgrade's first writers keep
# recording for it while the rest of the deployment is upgraded. (Written to run again over
# itself, as migration 7: a test that rolls a schema's version back re-applies the steps.)
OBSERVERS_TABLE = """
CREATE TABLE IF NOT EXISTS observers (
    instance  text PRIMARY KEY,
    expires   timestamptz NOT NULL
);
INSERT INTO observers (instance, expires)
SELECT 'previous release', now() + interval '1 day'
 WHERE EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN "'
               || 'session_manager_' || left(encode(sha256(convert_to(current_schema(), 'UTF8')), 'hex'), 24) || '"')
ON CONFLICT (instance) DO NOTHING;
"""

# Migration 11 (issue 24: an append's server work). The session row is rewritten by every append
# and its update is not HOT (updated_at is indexed), so each of its indexes takes a new entry per
# append, whether the row matches anything a list looks for or not. The status-prefixed pair now
# holds only the sessions a status filter may find rare (done, error: a list of idle or working
# sessions walks sessions_updated / sessions_created, where those are near the top or common), and
# the metadata index only sessions with metadata: an append to an idle or working session without
# metadata feeds neither (reads.py states the predicates, so the planner can use them). The search
# queue's row for a new entry is a plain INSERT (a new seq is never queued yet: no ON CONFLICT, no
# speculative insertion); a rewrite still merges its flag. Safe while processes of the previous
# release run (docs/postgres-round-trips.md, "Migration 11 and a rolling upgrade"): no statement
# names an index, and triggers act on every writer's rows alike; the swap is atomic (one
# transaction, under the tables' locks). Written to run again over itself.
SESSION_ROW_INDEXES = """
CREATE OR REPLACE FUNCTION sm_search_born() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO search_pending (seq, rewrite) VALUES (NEW.seq, false);
    RETURN NULL;
END
$fn$;
DROP TRIGGER IF EXISTS entries_search ON entries;
DROP TRIGGER IF EXISTS entries_search_born ON entries;
CREATE TRIGGER entries_search AFTER UPDATE OF body ON entries FOR EACH ROW EXECUTE FUNCTION sm_search_queue();
CREATE TRIGGER entries_search_born AFTER INSERT ON entries FOR EACH ROW EXECUTE FUNCTION sm_search_born();
DROP INDEX IF EXISTS sessions_status_updated;
DROP INDEX IF EXISTS sessions_status_created;
DROP INDEX IF EXISTS sessions_metadata;
CREATE INDEX sessions_status_updated ON sessions (status, updated_at DESC, session_id DESC)
    WHERE meta IS NOT NULL AND status IN ('done', 'error');
CREATE INDEX sessions_status_created ON sessions (status, created_at, session_id)
    WHERE meta IS NOT NULL AND status IN ('done', 'error');
CREATE INDEX sessions_metadata ON sessions USING gin (metadata jsonb_path_ops) WHERE metadata <> '{}';
"""
RARE_STATUSES = ("done", "error")  # the statuses the status-prefixed indexes hold (migration 11)

# Each step is applied once, in order, inside one transaction with the
# version bump. Never edit a released step: add one.
MIGRATIONS: tuple[str, ...] = (
    # 1: sessions, entries, attachments, the event outbox.
    """
    CREATE TABLE sessions (
        session_id  text COLLATE "C" PRIMARY KEY,  -- byte order = code point order, as the service sorts
        meta        text,            -- the exact JSON text of the meta (NULL: entries without a meta)
        status      text,
        created_at  bigint,
        updated_at  bigint,
        metadata    jsonb,           -- derived from meta, only to serve filters
        leaf        text
    );
    CREATE INDEX sessions_updated ON sessions (updated_at DESC, session_id DESC) WHERE meta IS NOT NULL;
    CREATE INDEX sessions_created ON sessions (created_at, session_id) WHERE meta IS NOT NULL;
    CREATE INDEX sessions_status_updated ON sessions (status, updated_at DESC, session_id DESC)
        WHERE meta IS NOT NULL;
    CREATE INDEX sessions_status_created ON sessions (status, created_at, session_id) WHERE meta IS NOT NULL;
    CREATE INDEX sessions_metadata ON sessions USING gin (metadata jsonb_path_ops);

    CREATE TABLE entries (
        session_id  text NOT NULL,
        entry_id    text NOT NULL,
        seq         bigint GENERATED ALWAYS AS IDENTITY,
        parent_id   text,
        depth       integer NOT NULL,   -- position on its root chain (0: root or orphan)
        jump_id     text NOT NULL,      -- skew-binary jump pointer: level-ancestor in O(log n)
        jump_depth  integer NOT NULL,
        body        text NOT NULL,      -- the exact JSON text of the entry
        PRIMARY KEY (session_id, entry_id)
    );
    CREATE INDEX entries_seq ON entries (session_id, seq);

    CREATE TABLE attachments (
        session_id     text NOT NULL,
        attachment_id  text NOT NULL,
        meta           text NOT NULL,
        data           bytea NOT NULL,
        PRIMARY KEY (session_id, attachment_id)
    );

    CREATE TABLE outbox (
        id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        instance     text NOT NULL,     -- the instance that made the mutation (it delivered locally)
        function_id  text NOT NULL,
        payload      text NOT NULL,     -- exact JSON text: NOTIFY only carries the id
        created_at   timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX outbox_created ON outbox (created_at);
    """,
    # 2: one mutation in one round trip (store/postgres/optimistic.py): check what the
    # decision read, write the commit, its outbox rows and their NOTIFY, atomically.
    APPLY_FUNCTION,
    # 3: the search index (search.py): a tsvector per searchable entry, GIN-indexed,
    # filled from a queue a trigger on entries keeps (every stored entry queued now).
    search.MIGRATION,
    # 4: a plain append at the session's leaf as the server has it (at_leaf.py): no
    # guessing of the leaf, so several writers of one session do not retry.
    APPEND_FUNCTION,
    # 5: each session's searchable entries and words (search.py), kept by a trigger on
    # search_docs, so a search reads its totals instead of summing search_docs.
    search.TOTALS_MIGRATION,
    # 6: a smaller search index (no ids, timestamp or tsvector column: a GIN index on an
    # expression of the words), totals changed per catch-up batch and deleting statement,
    # and the ranked page of an unscoped search as one function call whose plans are kept
    # (search.py); every entry queued again.
    search.LAYOUT_MIGRATION,
    # 7: sm_append's lean successor, a procedure that notifies after the write's COMMIT
    # (at_leaf.py): several writers' commits share the WAL flush again.
    APPEND_CALL_PROCEDURE,
    # 8: sm_search_page also returns the body and active-path flag of the rows a page shows
    # (a search with hits in one round trip).
    search.PAGE_MIGRATION,
    # 9: appends record their events only while some instance observes (the observers table,
    # sm_append_at; at_leaf.py, outbox.py): an unobserved append is one transaction, no
    # outbox row, no NOTIFY.
    OBSERVERS_TABLE + APPEND_AT_PROCEDURE,
    # 10: sm_append_at's jump-pointer probe a primary-key lookup whatever the statistics its
    # generic plan was made with (at_leaf.py, APPEND_AT_PROBED).
    APPEND_AT_PROBED,
    # 11: an append's session-row update and entry insert leaner on the server (SESSION_ROW_INDEXES:
    # the search queue's insert trigger without ON CONFLICT; the status and metadata indexes
    # partial, so an append to a working or idle session without metadata feeds neither).
    SESSION_ROW_INDEXES,
    # 12: sm_search_page reads a hit's timestamp so that a body holding \u0000 does not fail the
    # search (search.py, TIMESTAMP).
    search.NUL_SAFE_PAGE_MIGRATION,
    # 13: every entry indexed again (search.py, REINDEX_MIGRATION): words are the runs of the
    # text's NFC form since (search_text.py), so a decomposed text was indexed as other words.
    search.REINDEX_MIGRATION,
    # 14: sm_apply's overload checking the session row's xmin and answering the one it left
    # (APPLY_AT_ROW_FUNCTION): the version an optimistic commit leaves, known without a read.
    APPLY_AT_ROW_FUNCTION,
)


NAME_BYTES = 63  # NAMEDATALEN - 1: PostgreSQL silently truncates longer identifiers


def name_problem(schema: str) -> str | None:
    """Why ``schema`` cannot name the adapter's schema, or ``None``.

    A longer name would be truncated by the server while the NOTIFY channel
    and the migration lock are keyed by the whole name: two such names would
    share tables but not events."""
    size = len(schema.encode("utf-8"))
    if size > NAME_BYTES:
        return f"adapter config schema: {size} bytes in UTF-8, PostgreSQL keeps at most {NAME_BYTES}"
    return None


# (conninfo, schema) pairs this process has migrated or found current: a new
# store on one of them skips the check (a cold open connects only when its
# first call needs a connection). Cleared by tests that play a new process.
CHECKED: set[tuple[str, str]] = set()


def check(conn: Connection[Any], schema: str) -> int:
    """A read-only open's check (a read-only session: nothing written): ``schema``
    holds a session store at exactly this release's version. An older one is
    refused, never migrated (a writable open of this release migrates it); so
    are a newer one and a schema without a store."""
    ident = sql.Identifier(schema)
    exists = conn.execute("SELECT to_regclass(%s)", (f"{sql.Identifier(schema).as_string(conn)}.schema_version",))
    row = exists.fetchone()
    if row is None or row[0] is None:
        raise StoreError(f"postgres: schema {schema!r} holds no session store; a read-only open creates "
                         "nothing (nothing was written)")
    found = conn.execute(sql.SQL("SELECT version FROM {}.schema_version").format(ident)).fetchone()
    version = found[0] if found else 0
    if version > len(MIGRATIONS):
        raise versions.newer(f"postgres: schema {schema!r}", version, len(MIGRATIONS))
    if version < len(MIGRATIONS):
        raise versions.older_read_only(f"postgres: schema {schema!r}", version, len(MIGRATIONS))
    return version


LOCK_TRY_S = 0.2  # how long a migration holding sessions waits for entries before it lets go


def _lock_tables(conn: Connection[Any]) -> None:
    """Take the tables the steps alter (``sessions``, ``entries``) exclusively before any step,
    never holding one while it waits long for the other. Writers take them in both orders (the
    previous release's ``sm_append_call`` its session row, then entries; ``sm_apply`` without a
    check reads entries, then writes sessions), so any fixed order deadlocks with one of them,
    and PostgreSQL fails one of the two (migration 11 took entries, then sessions: the upgrade
    test's opens failed so). It waits for ``sessions`` holding nothing a writer wants, then
    tries ``entries`` for :data:`LOCK_TRY_S`; when a writer holds entries (and so may be
    waiting for sessions) it lets ``sessions`` go (a savepoint) and tries again."""
    row = conn.execute("SELECT current_setting('lock_timeout')").fetchone()
    before = str(row[0]) if row else "0"
    try_for = sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(f"{int(LOCK_TRY_S * 1000)}ms"))
    while True:
        try:
            with conn.transaction():  # (a savepoint: rolled back, it lets sessions go)
                conn.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
                conn.execute(try_for)
                conn.execute("LOCK TABLE entries IN ACCESS EXCLUSIVE MODE")
        except psycopg.errors.LockNotAvailable:
            time.sleep(LOCK_TRY_S / 4)  # (the writer that held entries goes on)
            continue
        conn.execute("SELECT set_config('lock_timeout', %s, true)", (before,))
        return


def migrate(conn: Connection[Any], schema: str) -> int:
    """Create ``schema`` if needed and apply the missing migrations; returns the version."""
    ident = sql.Identifier(schema)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7311))", ("session-manager:" + schema,))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {}.schema_version (version integer NOT NULL)").format(ident)
        )
        row = conn.execute(sql.SQL("SELECT version FROM {}.schema_version").format(ident)).fetchone()
        version = row[0] if row else 0
        if version > len(MIGRATIONS):
            raise versions.newer(f"postgres: schema {schema!r}", version, len(MIGRATIONS))
        if row is None:
            conn.execute(sql.SQL("INSERT INTO {}.schema_version VALUES (0)").format(ident))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(ident))
        if 1 <= version < len(MIGRATIONS):
            _lock_tables(conn)
        for step in MIGRATIONS[version:]:
            conn.execute(step.encode("utf-8"))
        if version < len(MIGRATIONS):
            # No parameters beside the identifier: it may hold '%', which a
            # parameterized query would read as a placeholder.
            bump = sql.SQL("UPDATE {}.schema_version SET version = {}").format(ident, sql.Literal(len(MIGRATIONS)))
            conn.execute(bump)
    return len(MIGRATIONS)
