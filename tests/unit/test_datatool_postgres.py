"""``session-manager data`` between adapters: a data_dir exported to JSON Lines
imports into the postgres adapter (a ``postgresql://`` URI in place of the
data_dir) and reads back, and exports again, identically. Needs a PostgreSQL
server (``SESSION_MANAGER_TEST_POSTGRES``): skips, with the reason, without one."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import pg_support
from tests.unit.test_datatool import data_dir, run, run_json  # noqa: F401 - the shared fixture

pytestmark = pytest.mark.postgres


@pytest.fixture
def database_uri() -> Iterator[str]:
    """A database of its own (the URI form opens schema public), dropped afterwards."""
    pg_support.require()
    import psycopg
    from psycopg import sql

    name = f"smdata_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    base = pg_support.DSN.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_fs_export_imports_into_postgres_and_exports_back_the_same(
        data_dir: Path, tmp_path: Path, database_uri: str, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    # Prevents: an export format that only round-trips within one adapter.
    from_fs = tmp_path / "fs.jsonl"
    run_json(capsys, "export", data_dir, "--attachments", "-o", from_fs)
    assert run_json(capsys, "import", database_uri, from_fs) == {
        "sessions": 3, "entries": 5, "attachments": 1, "attachments_without_bytes": 0}
    from_pg = tmp_path / "pg.jsonl"
    run_json(capsys, "export", database_uri, "--attachments", "-o", from_pg)
    assert [json.loads(x) for x in from_pg.read_text().splitlines()] == \
        [json.loads(x) for x in from_fs.read_text().splitlines()]
    assert run_json(capsys, "show", database_uri, "s_001", "--tree")["leaf"] == "e_005"
    code, _, err = run(capsys, "fsck", database_uri)
    assert code == 2 and "fsck takes a directory" in err  # not a postgres URI (its --help says so)
