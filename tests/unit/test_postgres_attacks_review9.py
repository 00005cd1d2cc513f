"""review9's attacks on three postgres changes: the warm plain append's work ahead (run between
its send and its answer, published only when the answer says it wrote), the prepared names
re-synced and an exchange sent again after psycopg's DEALLOCATE ALL, and the pool's one
maintenance worker. Real threads and a second instance; the server's rows read back in full."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

import session_manager
from session_manager.errors import SessionError
from tests import pg_support
from tests.pg_support import text
from tests.unit.test_postgres_attacks_review7 import _open, _rule_ok
from tests.unit.test_postgres_instances import check_linear, open_sm
from tests.unit.test_postgres_plain_ahead import ahead_fixture  # noqa: F401 (the fixture "ahead": what each _learn_ahead produced)

pytestmark = pytest.mark.postgres

HANG_S = 120  # a call not answered by then hangs (the deadlines here are a few seconds)


@pytest.fixture
def schema() -> Iterator[str]:
    pg_support.require()
    name = f"review9_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        pg_support.drop_schema(name)


def check_stored(schema: str, sm: session_manager.SessionManager, sid: str) -> list[str]:
    """One chain holding every entry, its count exact (check_linear), each entry's depth and
    jump pointer as the server's rule computes them from its parent's (review7's check); its ids."""
    path = check_linear(sm, sid)
    _rule_ok(schema, sid, len(path))
    return path


def _threads(n: int, work: Callable[[int], Any]) -> list[Any]:
    """``work(k)`` in ``n`` threads at once; each answers (or fails the test) within HANG_S."""
    start = threading.Barrier(n)

    def run(k: int) -> Any:
        start.wait(HANG_S)
        return work(k)

    with ThreadPoolExecutor(n) as ex:
        futures = [ex.submit(run, k) for k in range(n)]
        return [f.result(timeout=HANG_S) for f in futures]


@pytest.mark.parametrize("deleter", ["another instance", "this instance"])
def test_appends_while_the_session_is_deleted_and_recreated_alike(schema: str, deleter: str) -> None:
    # Prevents: what one instance learned of the session (ahead of the answer or after it)
    # surviving the session's deletion and alike re-creation, by another instance or by another
    # thread of its own (its append's answer and what it learned published after the delete
    # forgot the session), between its appends: links or a count from the old session stored
    # in the new one.
    clock = session_manager.ManualClock(1_700_000_000_000)  # frozen: the re-created meta text alike
    a = _open(schema, clock)
    b = _open(schema, clock) if deleter == "another instance" else a
    try:
        sid = "alike"
        a.call("session::ensure", {"session_id": sid})
        stop = threading.Event()
        recreated = [0]

        def churn() -> None:
            while not stop.is_set() and recreated[0] < 60:
                b.call("session::delete", {"session_id": sid})
                b.call("session::ensure", {"session_id": sid})
                recreated[0] += 1
                time.sleep(0.005)

        def work(k: int) -> int:
            if k == 2:
                churn()
                return 0
            done = 0
            for i in range(200):
                try:
                    a.call("session::append", {"session_id": sid, "entry_id": f"e{i % 25}",
                                               "message": text(f"{k}.{i}")})
                    done += 1
                except SessionError:
                    pass  # deleted under it, or the id taken in this incarnation
            if k == 0:
                stop.set()
            return done

        assert sum(_threads(3, work)) > 0 and recreated[0] > 0
        check_stored(schema, a, sid)
        for i in range(10):
            a.call("session::append", {"session_id": sid, "entry_id": f"z{i}", "message": text(str(i))})
        path = check_stored(schema, b, sid)
        assert path[-10:] == [f"z{i}" for i in range(10)]
    finally:
        a.close()
        if b is not a:
            b.close()


def _end_backends(schema: str, ended: set[int]) -> None:
    """Ends every backend of the schema's stores (idle or in a call), the listener's too, adding
    their pids to ``ended``."""
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        # (ended in the select list: only the rows the WHERE keeps, whatever order it is evaluated in)
        rows = conn.execute("SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE application_name = %s AND pid <> pg_backend_pid()",
                            (f"session-manager:{schema}"[:63],)).fetchall()
        ended.update(pid for pid, signalled in rows if signalled)


def _gone(pids: set[int]) -> None:
    """Waits until the backends ``pids`` have exited: pg_terminate_backend only signals, so a
    backend of the last round may still take a call sent right after the ending stopped (which
    it would then end mid-statement: a later call's in-doubt answer is not what a test of the
    calls made during the ending asserts)."""
    from tests.unit.test_postgres_instances import wait_for

    def none_left() -> bool:
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (list(pids),)).fetchone()
            return row is not None and row[0] == 0

    assert wait_for(none_left)


def test_threads_appending_while_every_backend_is_ended_again_and_again_all_answer(schema: str) -> None:
    # Prevents: with one pool worker, a call hanging (or waiting past its deadline) while the
    # server ends every connection under several callers at once; an append that answered
    # success missing or stored twice (settled in doubt), the chain's links or count wrong after.
    sm = open_sm(schema, pool_size=4, timeout_ms=3000)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        stop = threading.Event()
        ended: set[int] = set()

        def work(k: int) -> list[str]:
            if k == 4:
                while not stop.is_set():
                    _end_backends(schema, ended)
                    time.sleep(0.01)
                return []
            ok: list[str] = []
            for i in range(60):
                # (storage / unavailable: allowed while the server ends connections)
                with contextlib.suppress(SessionError):
                    ok.append(sm.call("session::append", {"session_id": sid, "entry_id": f"t{k}-{i}",
                                                          "message": text(f"{k}.{i}")})["entry_id"])
            if k == 0:
                stop.set()
            return ok

        answered = [x for batch in _threads(5, work) for x in batch]
        assert ended
        _gone(ended)
        path = check_stored(schema, sm, sid)
        assert len(set(path)) == len(path)
        assert set(answered) <= set(path)  # every success stored; an error's append may have landed
        for i in range(5):
            sm.call("session::append", {"session_id": sid, "entry_id": f"after{i}", "message": text(str(i))})
        assert check_stored(schema, sm, sid)[-5:] == [f"after{i}" for i in range(5)]
    finally:
        sm.close()


def _stored_row(schema: str, sid: str) -> tuple[str, str, str]:
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        row = conn.execute(f'SELECT meta, leaf, xmin::text FROM "{schema}".sessions WHERE session_id = %s',
                           (sid,)).fetchone()
        assert row is not None
        return row[0], row[1], row[2]


def _warm_then_deallocated(sm: session_manager.SessionManager) -> str:
    """A session appended to warm on ``sm`` (a pool of one connection), then that connection's
    prepared statements dropped the way psycopg drops them: its own statement, then a ROLLBACK
    (``DEALLOCATE ALL``); the session's id."""
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    for i in range(5):
        sm.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
    pool = sm.service.store.db.pool
    conn = pool.getconn(timeout=10)
    conn.execute("SELECT 1", prepare=True)  # psycopg's own statement: its ROLLBACK deallocates all
    conn.execute("BEGIN")
    conn.execute("ROLLBACK")
    assert not conn.execute("SELECT name FROM pg_prepared_statements WHERE name LIKE 'sm\\_%'").fetchall()
    pool.putconn(conn)
    return str(sid)


def test_a_linked_append_sent_again_after_deallocate_all_learns_ahead_once_and_as_written(
        schema: str, ahead: list[list[Any]]) -> None:
    # Prevents: the work ahead run again for the exchange sent again (or not at all), or the
    # session it learned published with the row version of the attempt that failed on a name
    # psycopg's DEALLOCATE ALL dropped: the next linked append's compare-and-set then missing.
    sm = open_sm(schema, pool_size=1)  # (one connection: the one rolled back below)
    try:
        sid = _warm_then_deallocated(sm)
        ahead.clear()
        answer = sm.call("session::append", {"session_id": sid, "message": text("x")})
        assert len(ahead) == 1 and len(ahead[0]) == 1
        known = sm.service.store.optimistic._known[sid]
        assert known is ahead[0][0]
        assert (known.text, known.leaf, known.row) == _stored_row(schema, sid)
        assert known.leaf == answer["entry_id"]
        nxt = sm.call("session::append", {"session_id": sid, "message": text("y")})
        assert nxt["parent_id"] == answer["entry_id"] and len(ahead) == 2 and ahead[1]
        assert sm.service.store.optimistic._known[sid] is ahead[1][0]
        assert len(check_stored(schema, sm, sid)) == 7
    finally:
        sm.close()


def test_a_linked_append_of_an_id_another_instance_used_learns_nothing_and_the_next_appends_link_right(
        schema: str, ahead: list[list[Any]]) -> None:
    # Prevents: the session learned ahead published after the INSERT's unique violation (23505:
    # nothing written), or the retry answering wrong, or the next appends' links or count off.
    a, b = open_sm(schema, pool_size=1), open_sm(schema, pool_size=1)
    try:
        sid = a.call("session::create", {"title": "t"})["session_id"]
        for i in range(4):
            a.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
        theirs = b.call("session::append", {"session_id": sid, "entry_id": "dup", "message": text("theirs")})
        ahead.clear()
        # An append of an id in use answers the stored one (idempotent, as every store).
        assert a.call("session::append", {"session_id": sid, "entry_id": "dup", "message": text("mine")}) == theirs
        assert len(ahead) <= 1
        known = a.service.store.optimistic._known.get(sid)
        assert known is None or (known.leaf, known.meta["message_count"]) == ("dup", 5)
        assert all(not out or out[0] is not known for out in ahead)
        nxt = a.call("session::append", {"session_id": sid, "message": text("after")})
        assert nxt["parent_id"] == "dup"
        assert len(check_stored(schema, a, sid)) == 6
    finally:
        a.close()
        b.close()


def test_a_linked_append_of_an_id_used_before_the_known_bodies_drops_what_it_ahead(
        schema: str, ahead: list[list[Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the session learned ahead published after the plain INSERT's unique violation
    # (23505: an id used before the entries this instance remembers, nothing written), the
    # retry answering other than the stored entry, or the next appends' links or count off.
    import session_manager.store.postgres.optimistic as opt

    failures: list[str | None] = []
    run_pair = opt.PgDatastore.run_pair

    def spy(self: Any, *rest: Any) -> Any:
        try:
            return run_pair(self, *rest)
        except psycopg.Error as e:
            failures.append(e.sqlstate)
            raise

    monkeypatch.setattr(opt.PgDatastore, "run_pair", spy)
    sm = open_sm(schema, pool_size=1)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        first = [sm.call("session::append", {"session_id": sid, "entry_id": f"e{i}", "message": text(str(i))})
                 for i in range(opt.KNOWN_BODIES + 4)]
        ahead.clear()
        again = sm.call("session::append", {"session_id": sid, "entry_id": "e0", "message": text("0")})
        assert again == first[0] and failures == ["23505"]
        assert len(ahead) == 1 and len(ahead[0]) == 1  # learned ahead, then dropped
        known = sm.service.store.optimistic._known.get(sid)
        assert known is not ahead[0][0]
        nxt = sm.call("session::append", {"session_id": sid, "message": text("after")})
        assert nxt["parent_id"] == first[-1]["entry_id"]
        assert len(check_stored(schema, sm, sid)) == opt.KNOWN_BODIES + 5
    finally:
        sm.close()


def test_a_cold_store_under_load_grows_its_pool_with_one_worker_and_every_call_succeeds(schema: str) -> None:
    # Prevents: the one maintenance worker connecting too slowly for callers that arrive together
    # on a cold store (each waiting for a connection in turn): a call failing "no connection"
    # with the server up, or the pool not growing past its first connection under load.
    open_sm(schema).close()  # (migrated: the stores below start cold, not migrating)
    sm = open_sm(schema, pool_size=6)
    try:
        sid = "load"

        def work(k: int) -> int:
            sm.call("session::ensure", {"session_id": sid})
            for i in range(15):
                sm.call("session::append", {"session_id": sid, "entry_id": f"t{k}-{i}", "message": text(str(i))})
                assert sm.call("session::get", {"session_id": sid})["meta"]["session_id"] == sid
            return 15

        assert sum(_threads(6, work)) == 90
        assert len(check_stored(schema, sm, sid)) == 90
        assert sm.service.store.db.pool.get_stats()["pool_size"] > 1
    finally:
        sm.close()


def test_close_while_the_one_worker_connects_to_a_silent_server_returns_and_calls_answer(
        schema: str, relay: Any) -> None:
    # Prevents: a store closed while its one pool worker is stuck connecting (a peer that accepts
    # and never answers) hanging in close(), or a call in progress or after it never answering.
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    open_sm(schema).close()  # (migrated directly: the store below never reaches the server)
    relay.silence()
    settings = PostgresSettings(dsn=relay.dsn(), schema=schema, timeout_ms=1000, connect_timeout_ms=1000,
                                pool_size=3)
    from session_manager.store.postgres import schema as pg_schema

    pg_schema.CHECKED.add((settings.conninfo(), schema))  # (no migration through the silent relay)
    sm = session_manager.open(store=PostgresStore(settings))

    def call(k: int) -> Any:
        try:
            return sm.call("session::get", {"session_id": f"s{k}"})
        except SessionError as e:
            return e
        except RuntimeError as e:  # (the manager closed before this call entered it)
            return e

    with ThreadPoolExecutor(4) as ex:
        futures = [ex.submit(call, k) for k in range(3)]
        closing = ex.submit(sm.close)
        answers = [f.result(timeout=HANG_S) for f in futures]
        closing.result(timeout=HANG_S)
    assert all(isinstance(a, SessionError) or "closed" in str(a) for a in answers), answers
    with pytest.raises(RuntimeError, match="closed"):
        sm.call("session::get", {"session_id": "s9"})


def test_a_statement_whose_name_went_inside_a_transaction_block_is_not_sent_again(schema: str) -> None:
    # Prevents: an exchange sent again inside a transaction block after its name was found gone
    # (the failure aborted the block: what ran before it in the block is lost, so sending it
    # again there would fail anew, or, were the block to go on, act on a half-undone state): it
    # fails as it is, the names corrected; after the block the statement runs once.
    from session_manager.store.postgres.core import Statement

    store = pg_support.open_store(schema, pool_size=1)
    db = store.db
    try:
        stmt = Statement("SELECT %(x)s::text || 'r'")
        conn = db.getconn(db.deadline_at())
        try:
            assert db.run(conn, stmt, {"x": "a"}) == [("ar",)]
            conn.execute("BEGIN")
            conn.execute("CREATE TEMP TABLE review9_t (x int) ON COMMIT DROP")
            conn.execute("DEALLOCATE ALL")
            with pytest.raises(psycopg.errors.InvalidSqlStatementName):
                db.run(conn, stmt, {"x": "b"})
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
            assert conn.statements == set()
            conn.execute("ROLLBACK")
            assert db.run(conn, stmt, {"x": "c"}) == [("cr",)]
            assert conn.statements == {stmt.name}
        finally:
            db.putconn(conn)
    finally:
        store.close()


def test_an_observer_gets_each_append_once_in_order_while_every_backend_is_ended_again_and_again(
        schema: str) -> None:
    # Prevents: with one pool worker on each store, appends settled in doubt (or sent again
    # after a lost connection) recording an event twice or none, or the observing instance's
    # listener, ended with the rest, missing or repeating some once it is back.
    from session_manager._wire import events as ev
    from tests.unit.test_postgres_instances import wait_for

    writer, watcher = open_sm(schema, pool_size=3, timeout_ms=3000), open_sm(schema, pool_size=2)
    try:
        sid = writer.call("session::create", {"title": "t"})["session_id"]
        seen: list[str] = []
        watcher.observe({"function_id": ev.ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
        watcher.service.store.events_ready()
        assert wait_for(lambda: watcher.service.store.outbox.listening)
        stop = threading.Event()
        ended: set[int] = set()

        def work(k: int) -> int:
            if k == 3:
                while not stop.is_set():
                    _end_backends(schema, ended)
                    time.sleep(0.02)
                return 0
            done = 0
            for i in range(40):
                with contextlib.suppress(SessionError):  # (allowed while the server ends connections)
                    writer.call("session::append", {"session_id": sid, "entry_id": f"t{k}-{i}",
                                                    "message": text(f"{k}.{i}")})
                    done += 1
            if k == 0:
                stop.set()
            return done

        assert sum(_threads(4, work)) > 0 and ended
        _gone(ended)
        writer.call("session::append", {"session_id": sid, "entry_id": "last", "message": text("last")})
        path = check_stored(schema, writer, sid)
        assert wait_for(lambda: "last" in seen)
        assert seen == path
    finally:
        writer.close()
        watcher.close()


def test_an_append_sent_again_after_deallocate_all_and_then_held_on_the_session_lock_meets_its_deadline(
        schema: str, ahead: list[list[Any]]) -> None:
    # Prevents: the exchange sent again after its names were found gone escaping the call's
    # deadline (a fresh wait per attempt), the work ahead run again for it or published
    # though no answer came, or the chain's links or count off once the lock is free.
    sm = open_sm(schema, pool_size=1, timeout_ms=1500)
    try:
        sid = _warm_then_deallocated(sm)
        ahead.clear()
        with psycopg.connect(pg_support.DSN, autocommit=True) as holder:
            holder.execute(f'SET search_path TO "{schema}"')
            holder.execute("BEGIN")
            holder.execute("SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ':' || %s, 0))",
                           (sid,))
            with ThreadPoolExecutor(1) as ex:
                held = ex.submit(sm.call, "session::append",
                                 {"session_id": sid, "entry_id": "late", "message": text("late")})
                with pytest.raises(SessionError) as failed:
                    held.result(timeout=HANG_S)
            holder.execute("COMMIT")
        assert failed.value.code == "session/storage"
        assert len(ahead) == 1 and sid not in sm.service.store.optimistic._known
        after = sm.call("session::append", {"session_id": sid, "message": text("after")})
        landed = [e["id"] for e in sm.service.store.entries(sid) if e["id"] == "late"]  # (in doubt: it may have)
        path = check_stored(schema, sm, sid)
        assert len(path) == 6 + len(landed) and after["parent_id"] == path[-2]
    finally:
        sm.close()
