"""The statements the postgres adapter sends through libpq itself (store/postgres/core.py:
``Statement``, ``PgDatastore.run``): converted once, values passed as bytes, prepared once
per connection in one pipeline with their first run; rows as a cursor's ``fetchall()``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from session_manager.store.postgres.arrays import FixedTextArray, TextArray, encode
from session_manager.store.postgres.core import Statement

pytestmark = pytest.mark.postgres


def test_a_statement_numbers_each_name_once_in_order() -> None:
    # Prevents: a repeated name bound twice (two parameters the server types apart), names
    # numbered out of their order of appearance, a literal %% left doubled.
    stmt = Statement("SELECT %(a)s, %(b)b::text, %(a)s = %(c)s, '100%%'")
    assert stmt.sql == b"SELECT $1, $2::text, $1 = $3, '100%'"
    assert stmt.names == ("a", "b", "c")
    assert stmt.name.startswith(b"sm_") and stmt.name == Statement(stmt.query).name
    assert stmt.name != Statement("SELECT %(a)s").name


def test_each_value_is_passed_as_the_bytes_the_server_reads() -> None:
    # Prevents: a str sent as text (libpq would cut it at a NUL: its length is sent only in
    # binary), an array in a form array_recv refuses, an unknown type sent as its repr.
    stmt = Statement("SELECT %(s)s, %(n)s, %(f)s, %(t)s, %(none)s, %(one)b, %(many)b, %(fixed)b")
    values, formats = stmt.values({"s": "é\u0001", "n": -12, "f": False, "t": True, "none": None,
                                   "one": TextArray(["x"]), "many": TextArray(["a", None]),
                                   "fixed": FixedTextArray(["k"])})
    assert values == ["é\u0001".encode(), b"-12", b"f", b"t", None, encode(["x"]), encode(["a", None]),
                      encode(["k"])]
    assert formats == [1, 0, 0, 0, 0, 1, 1, 1]
    with pytest.raises(TypeError, match="s: a float"):
        stmt.values({"s": 1.5, "n": 1, "f": False, "t": True, "none": None, "one": TextArray(),
                     "many": TextArray(), "fixed": FixedTextArray([])})



def test_a_pair_encodes_each_statement_as_it_alone_would() -> None:
    # Prevents: run_pair's encoder (each name both take encoded once) sending a statement other
    # values, formats or order than its own encoder does.
    from session_manager.store.postgres.core import _values_of

    first = Statement("SELECT %(s)s, %(n)s, %(shared)b")
    second = Statement("SELECT %(shared)b, %(none)s, %(s)s, %(many)b, %(s)s, %(t)s")
    params = {"s": "é\u0000", "n": 2**40, "shared": "x", "none": None, "many": TextArray(["a", None]), "t": True}
    sent = _values_of(first, second)(params, first, second)
    assert sent == ((first, *first.values(params)), (second, *second.values(params)))


@pytest.fixture
def db() -> Iterator[Any]:
    from tests import pg_support

    with pg_support.schema() as name:  # skips, saying why, where no server answers
        store = pg_support.open_store(name)
        try:
            yield store.db
        finally:
            store.close()


ROUND_TRIP = Statement("SELECT %(s)s::text, %(n)s::bigint, %(arr)b::text[], %(flag)s::boolean, %(none)s::text,"
                       " %(s)s::text = %(s2)s::text")


def test_a_direct_statement_returns_what_a_cursor_would(db: Any) -> None:
    # Prevents: a value the server reads differently sent directly (non-ASCII, \x01, an
    # empty string, a large int), rows typed otherwise than psycopg's loaders make them.
    params = {"s": "é\u0001 \U0001f600", "n": 2**40, "arr": TextArray(["a", None, ""]), "flag": True,
              "none": None, "s2": "é\u0001 \U0001f600"}
    conn = db.getconn(db.deadline_at())
    try:
        first = db.run(conn, ROUND_TRIP, params)
        again = db.run(conn, ROUND_TRIP, {**params, "s2": ""})
        cursor = conn.execute(ROUND_TRIP.query, params).fetchall()
    finally:
        db.putconn(conn)
    assert first == cursor == [("é\u0001 \U0001f600", 2**40, ["a", None, ""], True, None, True)]
    assert again == [("é\u0001 \U0001f600", 2**40, ["a", None, ""], True, None, False)]


def test_a_first_run_that_fails_leaves_its_statement_prepared_and_the_connection_usable(db: Any) -> None:
    # Prevents: a statement whose first execution failed (its Parse done in the same pipeline)
    # prepared again on its next run (the server: "already exists"), or the connection left
    # in pipeline mode or in a transaction after the failure.
    import psycopg

    stmt = Statement("SELECT 10 / %(d)s::integer")
    conn = db.getconn(db.deadline_at())
    try:
        with pytest.raises(psycopg.errors.DivisionByZero):
            db.run(conn, stmt, {"d": 0})
        assert conn.pgconn.pipeline_status == 0 and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert stmt.name in conn.statements
        assert db.run(conn, stmt, {"d": 5}) == [(2,)]
        names = {r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements").fetchall()}
        assert stmt.name.decode() in names
    finally:
        db.putconn(conn)


def test_a_statement_the_server_cannot_parse_is_not_taken_as_prepared(db: Any) -> None:
    # Prevents: a failed Parse recorded as done (every later run then failing on a
    # statement that does not exist), or the connection left unusable by the failure.
    import psycopg

    broken = Statement("SELEC %(x)s")
    conn = db.getconn(db.deadline_at())
    try:
        with pytest.raises(psycopg.errors.SyntaxError):
            db.run(conn, broken, {"x": "1"})
        assert broken.name not in conn.statements
        with pytest.raises(psycopg.errors.SyntaxError):
            db.run(conn, broken, {"x": "1"})
        assert conn.pgconn.pipeline_status == 0
        assert db.run(conn, Statement("SELECT %(x)s::text"), {"x": "ok"}) == [("ok",)]
    finally:
        db.putconn(conn)


def test_a_connection_outside_the_pool_prepares_a_statement_once(db: Any) -> None:
    # Prevents: a connection that is not the pool's (no attribute to keep its names on)
    # preparing the statement on every run (the second run: "already exists").
    import psycopg

    from tests import pg_support

    stmt = Statement("SELECT %(x)s::text || 'y'")
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        assert db.run(conn, stmt, {"x": "a"}) == [("ay",)]
        assert db.run(conn, stmt, {"x": "b"}) == [("by",)]


def test_a_statement_psycopg_deallocated_after_a_rollback_is_prepared_again(db: Any) -> None:
    # Prevents: "prepared statement sm_... does not exist" answered as session/storage after
    # psycopg's DEALLOCATE ALL (it sends one after a ROLLBACK, DROP or ALTER on a connection
    # where it prepared statements of its own), which drops ours too (seen in CI: a LangGraph
    # put_writes over postgres failed so).
    stmt = Statement("SELECT %(x)s::text || 'z'")
    conn = db.getconn(db.deadline_at())
    try:
        assert db.run(conn, stmt, {"x": "a"}) == [("az",)]
        conn.execute("DEALLOCATE ALL")
        assert stmt.name in conn.statements  # (what the adapter believes: stale)
        assert db.run(conn, stmt, {"x": "b"}) == [("bz",)]
        names = {r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements").fetchall()}
        assert stmt.name.decode() in names
        assert db.run(conn, stmt, {"x": "c"}) == [("cz",)]
    finally:
        db.putconn(conn)


def test_a_pair_psycopg_deallocated_is_prepared_again_and_a_pair_failing_rolls_back_whole(db: Any) -> None:
    # Prevents: run_pair's warm path (both statements taken as prepared, no prepare sent)
    # answering psycopg's DEALLOCATE ALL as a failure instead of preparing both again, or
    # reporting a pair whose second statement fails as anything but that failure.
    import psycopg

    first = Statement("SELECT %(x)s::text || 'p'")
    second = Statement("SELECT %(x)s::text || 'q'")
    failing = Statement("SELECT 1 / %(n)s::int")
    conn = db.getconn(db.deadline_at())
    try:
        assert db.run_pair(conn, first, second, {"x": "a"}) == [("aq",)]  # prepared in the pipeline
        assert db.run_pair(conn, first, second, {"x": "b"}) == [("bq",)]  # warm: both ready
        conn.execute("DEALLOCATE ALL")
        assert db.run_pair(conn, first, second, {"x": "c"}) == [("cq",)]  # prepared again
        names = {r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements").fetchall()}
        assert {first.name.decode(), second.name.decode()} <= names
        with pytest.raises(psycopg.errors.DivisionByZero):
            db.run_pair(conn, first, failing, {"x": "d", "n": 0})
        assert db.run_pair(conn, first, failing, {"x": "e", "n": 1}) == [(1,)]  # usable after
    finally:
        db.putconn(conn)
