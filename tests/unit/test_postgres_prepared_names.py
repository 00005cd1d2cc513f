"""The names of the statements the postgres adapter prepares itself (store/postgres/core.py:
``Statement``, ``PgDatastore.run`` and ``run_pair``) kept in step with the server's.

psycopg sends ``DEALLOCATE ALL`` on a connection where it prepared statements of its own
after a ``ROLLBACK``, ``DROP`` or ``ALTER`` there (a failed mutation's ``ROLLBACK``, the
pool's reset of a connection returned in a transaction): ours go too, while the connection
still lists them. An append then failing as session/storage is our bookkeeping, not a fault:
each test here failed on the code before (``sm_...`` "does not exist", then "already exists"
on every later append on that connection)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import session_manager
from session_manager.errors import NOT_FOUND, SessionError
from tests import pg_support
from tests.pg_support import text
from tests.unit.test_postgres_instances import check_linear

pytestmark = pytest.mark.postgres


@pytest.fixture
def schema() -> Iterator[str]:
    pg_support.require()
    name = f"pgprep_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        pg_support.drop_schema(name)


def _server_names(conn: Any) -> set[bytes]:
    return {r[0].encode() for r in conn.execute("SELECT name FROM pg_prepared_statements WHERE name LIKE 'sm\\_%'")}


def _psycopg_rollback(conn: Any) -> None:
    """What a failed mutation does on a pooled connection: psycopg prepares a statement of its
    own there, a transaction is rolled back, and psycopg sends DEALLOCATE ALL."""
    conn.execute("SELECT 1", prepare=True)
    conn.execute("BEGIN")
    conn.execute("ROLLBACK")


def test_a_probed_append_after_a_rolled_back_mutation_on_its_connection_is_stored(schema: str) -> None:
    # Prevents: the append's pair sent with its lock statement taken as prepared (psycopg's
    # DEALLOCATE ALL after the mutation's ROLLBACK took it) and the other prepared beside it:
    # "sm_0823... does not exist" answered as session/storage, then "already exists" on every
    # later append on that connection (one connection here: every later append of the store).
    import session_manager.store.postgres.optimistic as opt

    pairs: list[str] = []
    run_pair = opt.PgDatastore.run_pair

    def spy(self: Any, conn: Any, first: Any, second: Any, params: dict[str, Any], *rest: Any) -> Any:
        pairs.append("linked" if second is opt._PLAIN_LINKED else "probed")
        return run_pair(self, conn, first, second, params, *rest)

    sm = session_manager.open(store=pg_support.open_store(schema, pool_size=1))
    try:
        # Another instance wrote the session: this one does not know its links (a "probed" append).
        other = session_manager.open(store=pg_support.open_store(schema, pool_size=1))
        try:
            probed = other.call("session::create", {"title": "p"})["session_id"]
            first = other.call("session::append", {"session_id": probed, "message": text("o")})["entry_id"]
        finally:
            other.close()
        warm = sm.call("session::create", {"title": "w"})["session_id"]
        for i in range(6):  # (the lock statement and the linked one prepared on the connection)
            sm.call("session::append", {"session_id": warm, "message": text(f"w{i}")})
        gone = sm.call("session::create", {"title": "g"})["session_id"]
        sm.call("session::delete", {"session_id": gone})
        with pytest.raises(SessionError) as refused:  # its mutation rolls back: psycopg's DEALLOCATE ALL
            sm.call("session::append", {"session_id": gone, "message": text("x")})
        assert refused.value.code == NOT_FOUND
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(opt.PgDatastore, "run_pair", spy)
            got = [sm.call("session::append", {"session_id": probed, "message": text(f"p{i}")}) for i in range(5)]
        assert pairs[0] == "probed"  # (the path of the defect)
        assert [g["parent_id"] for g in got] == [first, *[g["entry_id"] for g in got[:-1]]]
        assert check_linear(sm, probed) == [first, *[g["entry_id"] for g in got]]
        page = sm.call("session::messages", {"session_id": probed, "limit": 10})["messages"]
        assert [m["message"]["content"][0]["text"] for m in page] == ["o", "p0", "p1", "p2", "p3", "p4"]
        assert sm.call("session::get", {"session_id": probed})["meta"]["message_count"] == 6
        assert sm.call("session::get", {"session_id": warm})["meta"]["message_count"] == 6
    finally:
        sm.close()


@pytest.fixture
def db(schema: str) -> Iterator[Any]:
    store = pg_support.open_store(schema, pool_size=1)
    try:
        yield store.db
    finally:
        store.close()


def test_pairs_sharing_a_statement_run_after_psycopg_deallocated_them(db: Any) -> None:
    # Prevents: a pair whose first statement is taken as prepared but gone, its second prepared
    # in the same pipeline, failing "does not exist" (no retry when anything was prepared), and
    # the names left out of step (the second's "already exists" on the next pair and every one after).
    from session_manager.store.postgres.core import Statement

    lock = Statement("SELECT %(x)s::text || 'l'")
    linked = Statement("SELECT %(x)s::text || 'k'")
    probed = Statement("SELECT %(x)s::text || 'p'")
    conn = db.getconn(db.deadline_at())
    try:
        assert db.run_pair(conn, lock, linked, {"x": "a"}) == [("ak",)]
        _psycopg_rollback(conn)
        assert _server_names(conn) == set()
        assert db.run_pair(conn, lock, probed, {"x": "b"}) == [("bp",)]
        assert db.run_pair(conn, lock, linked, {"x": "c"}) == [("ck",)]
        assert db.run_pair(conn, lock, probed, {"x": "d"}) == [("dp",)]
        assert conn.statements == _server_names(conn) == {lock.name, linked.name, probed.name}
    finally:
        db.putconn(conn)


def test_a_pair_runs_on_a_connection_the_pool_rolled_back(db: Any) -> None:
    # Prevents: the pool's reset of a connection returned inside a transaction (its ROLLBACK:
    # psycopg's DEALLOCATE ALL) leaving the next pair on that connection failing (one sharing
    # the first statement with a new second: "does not exist" on the code before).
    from session_manager.store.postgres.core import Statement

    first = Statement("SELECT %(x)s::text || 'f'")
    second = Statement("SELECT %(x)s::text || 's'")
    third = Statement("SELECT %(x)s::text || 't'")
    conn = db.getconn(db.deadline_at())
    try:
        assert db.run_pair(conn, first, second, {"x": "a"}) == [("as",)]
        conn.execute("SELECT 2", prepare=True)
        conn.execute("BEGIN")
    finally:
        db.putconn(conn)  # (returned in a transaction: the pool rolls it back)
    again = db.getconn(db.deadline_at())
    try:
        assert again is conn and _server_names(again) == set()  # (one connection: the same one, emptied)
        assert db.run_pair(again, first, third, {"x": "b"}) == [("bt",)]
        assert db.run_pair(again, first, second, {"x": "c"}) == [("cs",)]
        assert again.statements == _server_names(again) == {first.name, second.name, third.name}
    finally:
        db.putconn(again)


@pytest.mark.parametrize("lost", ["first", "second", "both"])
def test_a_name_the_server_has_but_the_connection_does_not_list_is_taken_as_prepared(db: Any, lost: str) -> None:
    # Prevents: a Parse failing "already exists" (42P05) answered as the append's failure, and
    # the pipeline it aborted recording nothing: the same failure on every later try.
    from session_manager.store.postgres.core import Statement

    first = Statement("SELECT %(x)s::text || '1'")
    second = Statement("SELECT %(x)s::text || '2'")
    conn = db.getconn(db.deadline_at())
    try:
        assert db.run_pair(conn, first, second, {"x": "a"}) == [("a2",)]
        for stmt in {"first": [first], "second": [second], "both": [first, second]}[lost]:
            conn.statements.discard(stmt.name)
        assert db.run_pair(conn, first, second, {"x": "b"}) == [("b2",)]
        assert conn.statements == _server_names(conn) == {first.name, second.name}
        conn.statements.discard(first.name)
        assert db.run(conn, first, {"x": "c"}) == [("c1",)]
        assert conn.statements == {first.name, second.name}
    finally:
        db.putconn(conn)


@pytest.mark.parametrize("pipelines", [True, False])
def test_a_statement_run_alone_keeps_its_name_in_step_both_ways(db: Any, monkeypatch: pytest.MonkeyPatch,
                                                                 pipelines: bool) -> None:
    # Prevents: run() answering a name gone or taken as the statement's failure, with libpq's
    # pipelines or without them (each Parse and run then answered in turn); or a real failure
    # taken for our bookkeeping's (sent again).
    import psycopg

    from session_manager.store.postgres.core import Statement

    monkeypatch.setattr(db, "_pipelines", pipelines)
    stmt = Statement("SELECT %(x)s::text || 's'")
    failing = Statement("SELECT 1 / %(n)s::int")
    conn = db.getconn(db.deadline_at())
    try:
        assert db.run(conn, stmt, {"x": "a"}) == [("as",)]
        _psycopg_rollback(conn)
        assert db.run(conn, stmt, {"x": "b"}) == [("bs",)]  # gone: prepared again
        conn.statements.discard(stmt.name)
        assert db.run(conn, stmt, {"x": "c"}) == [("cs",)]  # taken: recorded, then run
        assert conn.statements == _server_names(conn) == {stmt.name}
        with pytest.raises(psycopg.errors.DivisionByZero):
            db.run(conn, failing, {"n": 0})
        assert conn.statements == _server_names(conn) == {stmt.name, failing.name}
        assert db.run(conn, failing, {"n": 1}) == [(1,)]
    finally:
        db.putconn(conn)


def test_a_pair_whose_first_statement_ran_before_the_second_was_found_gone_writes_once(db: Any) -> None:
    # Prevents: a pair sent again after its second statement was found gone while its first (just
    # prepared) ran: written twice (the implicit transaction rolled back, the retry writes it), or
    # not at all.
    from session_manager.store.postgres.core import Statement

    conn = db.getconn(db.deadline_at())
    try:
        conn.execute("CREATE TEMP TABLE pgprep_once (x text)")
        write = Statement("INSERT INTO pgprep_once VALUES (%(x)s::text)")
        count = Statement("SELECT count(*) FROM pgprep_once WHERE x = %(x)s::text")
        assert db.run_pair(conn, write, count, {"x": "a"}) == [(1,)]
        conn.execute("DEALLOCATE ALL")
        conn.statements.discard(write.name)  # (the first prepared in the pair's pipeline, the second gone)
        assert db.run_pair(conn, write, count, {"x": "b"}) == [(1,)]
        assert conn.execute("SELECT x FROM pgprep_once ORDER BY x").fetchall() == [("a",), ("b",)]
    finally:
        db.putconn(conn)


def _race(sm: session_manager.SessionManager) -> None:
    """One round of the reviewer's race: four threads append 40 messages each to a session of
    their own while this one deletes the first thread's; every other append is stored once."""
    ids = [sm.call("session::create", {})["session_id"] for _ in range(4)]
    errors: list[BaseException] = []
    answers: dict[str, list[str]] = {sid: [] for sid in ids}

    def writer(sid: str) -> None:
        try:
            for i in range(40):
                answers[sid].append(sm.call("session::append", {"session_id": sid,
                                                                "message": text(f"{sid}-{i}")})["entry_id"])
        except SessionError as e:
            if not (sid == ids[0] and e.code == NOT_FOUND):  # the deleted session's writer may be refused
                errors.append(e)
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(sid,)) for sid in ids]
    for t in threads:
        t.start()
    sm.call("session::delete", {"session_id": ids[0]})
    for t in threads:
        t.join()
    assert errors == []
    for sid in ids[1:]:
        assert check_linear(sm, sid) == answers[sid]
        page = sm.call("session::messages", {"session_id": sid, "limit": 50})["messages"]
        assert [m["message"]["content"][0]["text"] for m in page] == [f"{sid}-{i}" for i in range(40)]
    assert sm.call("session::get", {"session_id": ids[0]}) is None  # deleted, not made again


def test_appends_racing_a_delete_in_threads_are_all_stored_once(schema: str) -> None:
    # Prevents: an append to a session nobody deleted failing as session/storage because a
    # rolled-back mutation on a pooled connection (the deleted session's append) made psycopg
    # deallocate every statement there (the reviewer's race: about one round in ten before).
    sm = session_manager.open(store=pg_support.open_store(schema))
    try:
        for _ in range(6):
            _race(sm)
    finally:
        sm.close()
