"""Server instructions per "our SQL, bare" append, counted by callgrind (issue 24).

Needs a private PostgreSQL whose postmaster runs under callgrind, following its children,
each backend writing its own file when it exits::

    valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=DIR/cg.%p \
        postgres -D DATA   # fsync, synchronous_commit and autovacuum off

    python bench/pg_server_instr.py 'host=/tmp/pg port=5499 user=postgres dbname=test' DIR 100 [ours|lc]

Per append = (the backend's total after 2n appends - after n) / n, each count on a fresh
schema (migrated by this tree's store, a session created and appended to once by the
service), its appends sent as ``bench/pg_floor.py``'s "our SQL, bare" sends them (the
statements ``plain.py`` sends for a warm, unobserved, uncontended append at a known leaf);
with ``ours``, ours' own ``session::append`` calls (the service's statements, the same backend);
with ``lc``, langchain-postgres's ``add_message`` (its three statements, its one connection).
"""

from __future__ import annotations

import re
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import pg_floor  # noqa: E402

WARM = 20


def backend_total(out: Path, pid: int) -> int:
    path = out / f"cg.{pid}"
    for _ in range(600):
        if path.exists():
            text = path.read_text(errors="replace")
            m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            if m:
                return int(m.group(1))
        time.sleep(0.1)
    raise RuntimeError(f"no callgrind output for backend {pid}")


def counted(dsn: str, out: Path, calls: int, prefix: str,
            make: Callable[[str, list[Any]], Callable[[], None]],
            check: Callable[[str], None] | None = None) -> int:
    """The backend's instructions for ``calls`` appends made by ``make(schema, opened)`` (a
    :class:`pg_floor.Bare`, whose ``conn`` is the backend counted) on a fresh schema named
    ``prefix`` and a suffix; ``check(schema)`` runs once they are sent; the schema is dropped."""
    schema = f"{prefix}_{uuid.uuid4().hex[:8]}"
    pg_floor.setup(dsn, schema)
    opened: list[Any] = []
    try:
        append = make(schema, opened)
        conn = append.conn  # type: ignore[attr-defined]
        pid = conn.pgconn.backend_pid
        (out / f"cg.{pid}").unlink(missing_ok=True)  # (a file an earlier process of that pid left)
        for _ in range(calls):
            append()
        conn.close()
        if check is not None:
            check(schema)
        return backend_total(out, pid)
    finally:
        for o in opened:
            o.close()
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def run(dsn: str, out: Path, n: int) -> int:
    def make(schema: str, opened: list[Any]) -> Callable[[], None]:
        sm = pg_floor.ours(dsn, schema)
        opened.append(sm)
        return pg_floor.our_sql(dsn, schema, sm, WARM + n, opened)

    return counted(dsn, out, WARM + n, "pgsrv_instr", make)


def run_lc(dsn: str, out: Path, n: int) -> int:
    """The same count for langchain-postgres's ``add_message`` (the ``bench`` extra)."""
    from langchain_core.messages import HumanMessage

    class Lc:
        def __init__(self, schema: str, opened: list[Any]) -> None:
            self.history = pg_floor.langchain(dsn, schema, str(uuid.uuid4()), opened)
            assert self.history is not None, "langchain-postgres is not installed (the bench extra)"
            self.conn = opened[-1]

        def __call__(self) -> None:
            self.history.add_message(HumanMessage("hi"))

    return counted(dsn, out, WARM + n, "pgsrv_lc", Lc)


def run_ours(dsn: str, out: Path, n: int) -> int:
    """The same count for ours' own appends (``session::append`` on an embedded store, a pool
    of one connection, nobody observing): the backend that pool connection talks to."""
    import session_manager
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    schema = f"pgsrv_instr_{uuid.uuid4().hex[:8]}"
    pg_floor.setup(dsn, schema)
    sm = session_manager.open(store=PostgresStore(PostgresSettings(dsn=dsn, schema=schema, pool_size=1)))
    try:
        sid = sm.call("session::create", {})["session_id"]
        for _ in range(WARM + n):
            sm.call("session::append", {"session_id": sid, "message": pg_floor.MSG})
        with psycopg.connect(dsn, autocommit=True) as c:
            pids = [r[0] for r in c.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'"
                                            " AND pid <> pg_backend_pid() AND query LIKE %s", ("%sessions%",))]
        assert len(pids) == 1, pids
        (out / f"cg.{pids[0]}").unlink(missing_ok=True)
    finally:
        sm.close()
    try:
        return backend_total(out, pids[0])
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def main() -> None:
    dsn, out, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    count = {"ours": run_ours, "lc": run_lc}.get(sys.argv[4], run) if sys.argv[4:] else run
    one, two = count(dsn, out, n), count(dsn, out, 2 * n)
    print(f"server instructions per append: {(two - one) / n:,.0f} (n={n}: {one:,} / 2n: {two:,})")


if __name__ == "__main__":
    main()
