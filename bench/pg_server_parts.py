"""What each part of "our SQL, bare" costs the server, counted by callgrind (issue 24).

The same count as ``bench/pg_server_instr.py`` (its docstring says how to run the server)
for variants of the warm plain append, each taking one part away (as a measure only: most
are not correct on their own)::

    python bench/pg_server_parts.py 'host=/tmp/pg port=5499 user=postgres dbname=test' DIR 100 [NAME ...]

Each variant is a change to a fresh schema after its migration (SQL run in it) and the
statements sent per append (with ``plain.params``' parameters, as ``pg_floor.our_sql``);
``minimum`` is ``pg_floor``'s contract minimum.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import pg_floor  # noqa: E402
from pg_ceiling import CEILING, CEILING_SCHEMA_CHANGE  # noqa: E402
from pg_server_instr import WARM, counted  # noqa: E402

from session_manager.store.postgres import plain  # noqa: E402
from session_manager.store.postgres.core import Statement  # noqa: E402

LOCK, LINKED = plain.LOCK, plain.LINKED
_SEEN_CLAUSE = f" AND NOT ({plain._SEEN})"  # (as LINKED spells it)
_CAS = " AND meta = %(expect_meta)b::text AND (%(row)b::text IS NULL OR xmin::text = %(row)b::text)"
_XMIN = "(%(row)b::text IS NULL OR xmin::text = %(row)b::text)"
assert _SEEN_CLAUSE in LINKED and _CAS in LINKED

REPEAT = 3  # counts per variant (each a fresh schema and backend; they differ by about +-10k)

# name -> (SQL run in the migrated schema, the statements of one append)
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "base": ("", (LOCK, LINKED)),
    "no lock statement": ("", (LINKED,)),
    "lock: session only": ("", ("SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ':' ||"
                                " %(sid)b::text, 0))", LINKED)),
    "no observers check": ("", (LOCK, LINKED.replace(_SEEN_CLAUSE, ""))),
    "observers: the lock probe only": ("", (LOCK, LINKED.replace(
        "EXISTS (SELECT 1 FROM observers WHERE expires > now()) OR ", ""))),
    "observers: the table only": ("", (LOCK, LINKED.replace(
        " OR NOT CASE WHEN pg_try_advisory_lock(hashtext(current_schema()), 2)"
        " THEN pg_advisory_unlock(hashtext(current_schema()), 2) ELSE false END", ""))),
    # (the keys as plain.py computed them before: from current_schema(), four calls an append)
    "keys from current_schema()": ("", (
        LOCK.replace("%(schema)b::text", "current_schema()"), LINKED.replace("%(schema)b::text", "current_schema()"))),
    "no meta/xmin CAS": ("", (LOCK, LINKED.replace(_CAS, ""))),
    # (the bench cannot know each row version ahead: a compare of xmin's text with a constant, as costly)
    "meta and xmin compared": ("", (LOCK, LINKED.replace(_XMIN, "xmin::text <> '0'"))),
    "xmin compared, no meta": ("", (LOCK, LINKED.replace(_CAS, " AND xmin::text <> '0'"))),
    "RETURNING 1": ("", (LOCK, LINKED.replace("RETURNING xid(pg_current_xact_id())::text", "RETURNING 1"))),
    "RETURNING upd's xmin": ("", (LOCK, LINKED.replace("RETURNING session_id)", "RETURNING session_id, xmin)")
                                         .replace("RETURNING xid(pg_current_xact_id())::text",
                                                  "RETURNING (SELECT xmin::text FROM upd)"))),
    "no partial status/metadata indexes": (
        "DROP INDEX sessions_status_updated; DROP INDEX sessions_status_created; DROP INDEX sessions_metadata",
        (LOCK, LINKED)),
    "sessions_updated/created not partial": (
        "DROP INDEX sessions_updated, sessions_created; CREATE INDEX sessions_updated ON sessions"
        " (updated_at DESC, session_id DESC); CREATE INDEX sessions_created ON sessions (created_at, session_id)",
        (LOCK, LINKED)),
    "no index predicate (all five not partial)": (
        "DROP INDEX sessions_updated, sessions_created, sessions_status_updated, sessions_status_created,"
        " sessions_metadata; CREATE INDEX sessions_updated ON sessions (updated_at DESC, session_id DESC);"
        " CREATE INDEX sessions_created ON sessions (created_at, session_id);"
        " CREATE INDEX sessions_status_updated ON sessions (status, updated_at DESC, session_id DESC);"
        " CREATE INDEX sessions_status_created ON sessions (status, created_at, session_id);"
        " CREATE INDEX sessions_metadata ON sessions USING gin (metadata jsonb_path_ops)", (LOCK, LINKED)),
    "no sessions_created": ("DROP INDEX sessions_created", (LOCK, LINKED)),
    "no search trigger": ("DROP TRIGGER entries_search_born ON entries", (LOCK, LINKED)),
    "search trigger a no-op": ("CREATE OR REPLACE FUNCTION sm_search_born() RETURNS trigger LANGUAGE plpgsql"
                               " AS $$ BEGIN RETURN NULL; END $$", (LOCK, LINKED)),
    "search trigger BEFORE INSERT": (
        "CREATE FUNCTION sm_search_before() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " INSERT INTO search_pending (seq, rewrite) VALUES (NEW.seq, false); RETURN NEW; END $$;"
        " DROP TRIGGER entries_search_born ON entries; CREATE TRIGGER entries_search_born BEFORE INSERT ON entries"
        " FOR EACH ROW EXECUTE FUNCTION sm_search_before()", (LOCK, LINKED)),
    "search queue without its key": ("ALTER TABLE search_pending DROP CONSTRAINT search_pending_pkey",
                                     (LOCK, LINKED)),
    "no entries_seq": ("DROP INDEX entries_seq", (LOCK, LINKED)),
    "HOT (no secondary session index)": (
        "DROP INDEX sessions_updated; DROP INDEX sessions_created; DROP INDEX sessions_status_updated;"
        " DROP INDEX sessions_status_created; DROP INDEX sessions_metadata", (LOCK, LINKED)),
    # bench/pg_ceiling.py: the lock folded into the UPDATE, no observers check, no search trigger
    "ceiling (no shared protocols)": (CEILING_SCHEMA_CHANGE, (CEILING,)),
    "lock folded only": ("", (LINKED.replace(_SEEN_CLAUSE, " AND NOT (" + plain._SEEN + ") AND pg_advisory_xact_lock("
                                             "hashtextextended(%(schema)b::text || ':' || %(sid)b::text, 0))"
                                             " IS NOT NULL"),)),
}


def appender(dsn: str, schema: str, name: str, calls: int, opened: list[Any]) -> Callable[[], None]:
    sm = pg_floor.ours(dsn, schema)
    opened.append(sm)
    if name == "minimum":
        return pg_floor.contract_minimum(dsn, schema, calls, opened)
    change, statements = VARIANTS[name]
    if change:
        with pg_floor.connect(dsn, schema) as c:
            c.execute(change)
    return pg_floor.our_sql(dsn, schema, sm, calls, opened, tuple(Statement(s) for s in statements))


def run(dsn: str, out: Path, n: int, name: str) -> int:
    """The backend's instructions for ``WARM + n`` appends of variant ``name`` (a fresh schema)."""
    def every_append_written(schema: str) -> None:  # (every variant must write every append)
        with pg_floor.connect(dsn, schema) as c:
            rows = c.execute("SELECT count(*) FROM entries UNION ALL SELECT count(*) FROM min_entries").fetchall()
        assert sum(r[0] for r in rows) >= WARM + n, rows

    return counted(dsn, out, WARM + n, "pgsrv_parts",
                   lambda schema, opened: appender(dsn, schema, name, WARM + n, opened), every_append_written)


def main() -> None:
    dsn, out, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    for name in sys.argv[4:] or [*VARIANTS, "minimum"]:
        got = sorted((run(dsn, out, 2 * n, name) - run(dsn, out, n, name)) / n for _ in range(REPEAT))
        print(f"{name}: median {got[len(got) // 2]:,.0f} per append ("
              + ", ".join(f"{v:,.0f}" for v in got) + ")", flush=True)


if __name__ == "__main__":
    main()
