"""The postgres adapter's schema: versioned migrations, run at startup.

Every table lives in one schema (``public`` unless configured), so several
deployments (or test runs) share a database without seeing each other.
Migrations run under a transaction-scoped advisory lock keyed by the schema
name: two instances booting at once apply each step exactly once, and
instances of *different* schemas never wait for each other.

Why each index exists (the queries they serve are in ``store.py``):

- ``sessions_updated`` / ``sessions_created`` (and the ``status``-prefixed
  pair): ``session::list`` in each order, optionally filtered by status, is an
  index scan that stops after one page.
- ``sessions_metadata`` (GIN, ``jsonb_path_ops``): a metadata filter is a
  bitmap index scan on containment; the service rechecks its equality rule.
- ``entries`` primary key ``(session_id, entry_id)``: get-message and every
  step of a path walk are one index probe.
- ``entries_seq``: ``entries()`` in insertion order.
- ``outbox_id``: the primary key, for fetching a notified id and replaying.
"""

from __future__ import annotations

from typing import Any

from psycopg import Connection, sql

from ...errors import StoreError

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
            raise StoreError(
                f"postgres: schema {schema!r} is at version {version}, newer than this session-manager's "
                f"{len(MIGRATIONS)}: a newer release migrated it; run that release (nothing was written)")
        if row is None:
            conn.execute(sql.SQL("INSERT INTO {}.schema_version VALUES (0)").format(ident))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(ident))
        for step in MIGRATIONS[version:]:
            conn.execute(step.encode("utf-8"))
        if version < len(MIGRATIONS):
            # No parameters beside the identifier: it may hold '%', which a
            # parameterized query would read as a placeholder.
            bump = sql.SQL("UPDATE {}.schema_version SET version = {}").format(ident, sql.Literal(len(MIGRATIONS)))
            conn.execute(bump)
    return len(MIGRATIONS)
