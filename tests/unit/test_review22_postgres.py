"""Review 22's attacks on postgres's armed slot per thread (5c4929f: ``Armed.held``/``outer``, a
store call made inside another on one thread keeps the outer call's armed connection).

The nesting is made deterministic: the store's ``take``/``getconn`` are wrapped so that, right
after a call has its connection armed (where a signal handler or finalizer would run while it
waits on the database), a nested store call runs on the same thread, to three deep, reading,
writing or failing. After every attack: nothing is left armed in the watchdog, the thread's slot
is no use's, and past the deadline every connection the calls used still answers (an armed one
handed back would have had its socket shut down by the watchdog)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import session_manager
from session_manager import SessionError, SessionManager
from tests import pg_support
from tests.pg_support import text

pytestmark = pytest.mark.postgres

TIMEOUT_MS = 1500


@pytest.fixture
def schema() -> Iterator[str]:
    with pg_support.schema("smtest_review22") as name:
        yield name


class _Nesting:
    """Wraps the store's connection hand-out: after one is armed, ``inner(depth)`` runs (once per
    depth, while ``on``: a call run again after a conflict does not nest again), as a signal
    handler would inside the call waiting on it."""

    def __init__(self, db: Any, inner: Callable[[int], None], depth: int) -> None:
        self.db, self.inner, self.depth = db, inner, depth
        self.level = 0
        self.on = False
        self.used: dict[int, Any] = {}
        self.ran: list[int] = []
        self.real = (db.take, db.getconn)
        db.take, db.getconn = self.take, self.getconn

    def _after(self, conn: Any) -> Any:
        self.used[id(conn)] = conn
        if self.on and self.level < self.depth and self.level + 1 not in self.ran:  # (once per depth)
            self.level += 1
            try:
                self.ran.append(self.level)
                self.inner(self.level)
            finally:
                self.level -= 1
        return conn

    def take(self, state: Any) -> Any:
        return self._after(self.real[0](state))

    def getconn(self, deadline: float | None = None) -> Any:
        return self._after(self.real[1](deadline))

    def close(self) -> None:
        self.db.take, self.db.getconn = self.real


def _check_nothing_left_armed(db: Any, used: dict[int, Any]) -> None:
    with db.watchdog._lock:
        left = dict(db.watchdog._armed)
    assert left == {}, "a connection handed back is still armed"
    armed = db.local.state.armed
    assert armed is None or (not armed.held and armed.outer is None)
    time.sleep(TIMEOUT_MS / 1000 + 0.4)  # (past every call's deadline: an armed one would be shut)
    for conn in used.values():
        if not conn.closed:
            assert conn.execute("SELECT 1").fetchone() == (1,)


def _said(sm: SessionManager, sid: str) -> list[str]:
    return [m["message"]["content"][0]["text"] for m in sm.call("session::messages", {"session_id": sid})["messages"]]


def _open(schema: str, **overrides: Any) -> tuple[Any, SessionManager]:
    store = pg_support.open_store(schema, timeout_ms=TIMEOUT_MS, **overrides)
    return store, session_manager.open(store=store)


def test_calls_nested_three_deep_reading_and_writing_leave_nothing_armed(schema: str) -> None:
    store, sm = _open(schema)
    try:
        sids = [sm.call("session::create", {"title": f"t{i}"})["session_id"] for i in range(4)]
        for i in range(2):  # (warm: the append's one statement on a pooled connection, take's path)
            sm.call("session::append", {"session_id": sids[0], "message": text(f"warm {i}")})
        got: list[Any] = []

        def inner(depth: int) -> None:  # (a write at each depth, and a read)
            got.append(sm.call("session::append", {"session_id": sids[depth], "message": text(f"in {depth}")}))
            got.append(sm.call("session::get", {"session_id": sids[depth]})["meta"]["title"])

        nesting = _Nesting(store.db, inner, depth=3)
        try:
            nesting.on = True
            outer = sm.call("session::append", {"session_id": sids[0], "message": text("outer")})
            nesting.on = False
        finally:
            nesting.close()
        assert 3 in nesting.ran, "the calls never nested three deep: the test proved nothing"
        assert outer["entry_id"]
        _check_nothing_left_armed(store.db, nesting.used)
        assert _said(sm, sids[0]) == ["warm 0", "warm 1", "outer"]
        for depth in (1, 2, 3):
            said = _said(sm, sids[depth])
            assert said and set(said) == {f"in {depth}"}, (depth, said)
    finally:
        sm.close()


def test_a_nested_call_that_fails_leaves_the_outer_call_s_connection_armed_and_handed_back(schema: str) -> None:
    store, sm = _open(schema)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        for i in range(2):
            sm.call("session::append", {"session_id": sid, "message": text(f"warm {i}")})
        failed: list[str] = []

        def inner(depth: int) -> None:  # (answered not_found: the store read, then the service raised)
            with pytest.raises(SessionError) as e:
                sm.call("session::messages", {"session_id": f"missing-{depth}"})
            failed.append(e.value.code)
            with pytest.raises(SessionError) as e:  # (a write refused: its plan dropped)
                sm.call("session::append", {"session_id": sid, "message": text("x"), "parent_id": "nope"})
            failed.append(e.value.code)

        nesting = _Nesting(store.db, inner, depth=2)
        try:
            nesting.on = True
            outer = sm.call("session::append", {"session_id": sid, "message": text("outer")})
            nesting.on = False
        finally:
            nesting.close()
        assert nesting.ran == [1, 2], nesting.ran
        assert failed[:1] == ["session/not_found"] and len(failed) == 4, failed
        assert outer["entry_id"]
        _check_nothing_left_armed(store.db, nesting.used)
        assert _said(sm, sid) == ["warm 0", "warm 1", "outer"]
    finally:
        sm.close()


def test_a_nested_call_with_the_pool_s_one_connection_held_fails_by_the_deadline_not_hangs(schema: str) -> None:
    # pool_size=1: the outer call holds the pool's one connection, the nested one waits for it
    # (its thread cannot give it back) until the deadline they share: no deadlock, both answered
    # session/storage by then, nothing left armed, and the store serves the next call.
    store, sm = _open(schema, pool_size=1, pool_timeout_ms=5000)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        sm.call("session::append", {"session_id": sid, "message": text("warm")})
        inner_codes: list[str] = []

        def inner(depth: int) -> None:
            try:
                sm.call("session::get", {"session_id": sid})
            except SessionError as e:
                inner_codes.append(e.code)

        nesting = _Nesting(store.db, inner, depth=1)
        started = time.monotonic()
        try:
            nesting.on = True
            try:
                sm.call("session::append", {"session_id": sid, "message": text("outer")})
                outer_code = None
            except SessionError as e:
                outer_code = e.code
            nesting.on = False
        finally:
            nesting.close()
        took = time.monotonic() - started
        assert inner_codes == ["session/storage"]
        assert outer_code in (None, "session/storage")
        assert took < TIMEOUT_MS / 1000 + 3, f"not answered by the deadline (took {took:.1f}s)"
        _check_nothing_left_armed(store.db, nesting.used)
        said = _said(sm, sid)
        assert said in (["warm"], ["warm", "outer"]) and (outer_code is not None or said == ["warm", "outer"])
        sm.call("session::append", {"session_id": sid, "message": text("after")})
        assert _said(sm, sid)[-1] == "after"
    finally:
        sm.close()


def test_the_deadline_firing_while_a_nested_call_waits_ends_both_and_leaves_the_pool_sound(schema: str) -> None:
    # The nested call waits on a lock another connection holds past the deadline it shares with
    # the outer call: the watchdog ends both connections; each call answers session/storage, the
    # connections the deadline ended are not handed out again, and later calls are served.
    store, sm = _open(schema)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        other = sm.call("session::create", {"title": "o"})["session_id"]
        for i in range(2):
            sm.call("session::append", {"session_id": sid, "message": text(f"warm {i}")})
        inner_codes: list[str] = []
        in_doubt: list[bool] = []  # (answered "it may have landed": its statement was sent)

        def inner(depth: int) -> None:
            try:
                sm.call("session::append", {"session_id": other, "message": text("inner")})
            except SessionError as e:
                inner_codes.append(e.code)
                in_doubt.append("it may have landed" in str(e))

        nesting = _Nesting(store.db, inner, depth=1)
        with psycopg.connect(pg_support.DSN) as blocker:
            blocker.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s || ':' || %s, 0))", (schema, other))
            release = threading.Timer(TIMEOUT_MS / 1000 + 1.0, blocker.rollback)
            release.start()
            try:
                nesting.on = True
                with pytest.raises(SessionError) as outer:
                    sm.call("session::append", {"session_id": sid, "message": text("outer")})
                nesting.on = False
            finally:
                nesting.close()
                release.join()
        assert inner_codes == ["session/storage"], inner_codes
        assert outer.value.code == "session/storage"
        _check_nothing_left_armed(store.db, nesting.used)
        for i in range(3):  # (more than the pool keeps idle: an ended connection would be met)
            sm.call("session::append", {"session_id": sid, "message": text(f"after {i}")})
        assert _said(sm, sid)[:2] == ["warm 0", "warm 1"] and _said(sm, sid)[-3:] == ["after 0", "after 1", "after 2"]
        # (the server ran the statement once the lock was let go, past the deadline: the one
        # documented exception, an append answered "it may have landed"; never one answered otherwise)
        assert _said(sm, other) in ([], ["inner"]) and (in_doubt == [True] or _said(sm, other) == [])
    finally:
        sm.close()


def test_an_async_host_s_concurrent_calls_leave_nothing_armed(schema: str) -> None:
    # The aio host runs each call on an executor thread (one at a time there): many at once,
    # reads and writes, then nothing armed and every connection answering past the deadline.
    from session_manager import aio

    store = pg_support.open_store(schema, timeout_ms=TIMEOUT_MS)
    used: dict[int, Any] = {}
    real_give, real_putconn = store.db.give, store.db.putconn

    def give(conn: Any, state: Any) -> None:
        used[id(conn)] = conn
        real_give(conn, state)

    def putconn(conn: Any) -> None:
        used[id(conn)] = conn
        real_putconn(conn)

    store.db.give, store.db.putconn = give, putconn

    async def run() -> list[str]:
        host = await aio.open(store=store)
        try:
            sids = [(await host.call("session::create", {"title": f"t{i}"}))["session_id"] for i in range(4)]

            async def one(i: int) -> None:
                sid = sids[i % 4]
                await host.call("session::append", {"session_id": sid, "message": text(f"m{i}")})
                await host.call("session::get", {"session_id": sid})

            await asyncio.gather(*(one(i) for i in range(24)))
            return sids
        finally:
            await host.close()

    try:
        sids = asyncio.run(run())
        _check_nothing_left_armed(store.db, used)
        sm = session_manager.open(store=pg_support.open_store(schema, timeout_ms=TIMEOUT_MS))
        try:
            said = sorted(s for sid in sids for s in _said(sm, sid))
            assert said == sorted(f"m{i}" for i in range(24))
        finally:
            sm.close()
    finally:
        store.db.give, store.db.putconn = real_give, real_putconn
        store.close()


@pytest.mark.parametrize("fast", [True, False], ids=["take", "getconn"])
def test_a_nested_call_at_every_call_boundary_of_the_hand_out_and_hand_back_neither_hangs_nor_leaves_anything_armed(
        schema: str, fast: bool) -> None:
    # A signal handler runs where the interpreter checks for one: entering a Python function, or
    # back from a builtin; a finalizer wherever an object is made. Here the nested call runs at
    # each such point in turn (the k-th) of the outer call's connection hand-out and hand-back
    # (getconn, take, putconn, give, the watchdog's arm and disarm), not only once the connection
    # is armed. Prevents: the watchdog's lock (not reentrant) held where one lands (take and
    # arm notify the watchdog's thread under it, a Python call): the nested call's own arm waited
    # for it forever, the thread hung. At no point may the slot be left to the inner use or an
    # armed connection go back to the pool.
    store, sm = _open(schema)
    db = store.db
    hung = False
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        other = sm.call("session::create", {"title": "o"})["session_id"]
        for i in range(2):
            sm.call("session::append", {"session_id": sid, "message": text(f"warm {i}")})
        # (idle connections to spare: a nested call landing where the outer holds the pool's lock
        # takes one of them; with none, it waits on the pool's thread that needs that lock, to the
        # deadline: see docs/postgres-faults.md)
        spare = [db.getconn() for _ in range(3)]
        for conn in spare:
            db.putconn(conn)
        db._takes = db._takes and fast  # (off: every hand-out is getconn's, the watchdog's arm)
        landed: set[str] = set()
        targets = {f.__code__ for f in (type(db).getconn, type(db)._getconn, type(db).putconn, type(db).take,
                                        type(db).give, type(db.watchdog).arm, type(db.watchdog).disarm)}
        used: dict[int, Any] = {}
        real = (db.give, db.putconn)

        def give(conn: Any, state: Any) -> None:
            used[id(conn)] = conn
            real[0](conn, state)

        def putconn(conn: Any) -> None:
            used[id(conn)] = conn
            real[1](conn)

        db.give, db.putconn = give, putconn
        points: list[tuple[str, int]] = []
        appended: list[str] = []
        failures: list[BaseException] = []

        def attack() -> None:  # (on a thread of its own: a hang is seen, not waited for)
            try:
                for outer_call in ("append", "get"):
                    k = 0
                    while True:
                        seen, fired = [0], [False]

                        def profile(frame: Any, event: str, arg: Any, k: int = k, seen: list[int] = seen,
                                    fired: list[bool] = fired) -> None:
                            if fired[0] or event not in ("call", "c_return") or frame.f_code not in targets:
                                return
                            if seen[0] == k:
                                fired[0] = True
                                landed.add(frame.f_code.co_name)
                                got = sm.call("session::get", {"session_id": other})
                                assert got["meta"]["title"] == "o"
                            seen[0] += 1

                        sys.setprofile(profile)
                        try:
                            if outer_call == "append":
                                said = f"o{len(appended)}"
                                sm.call("session::append", {"session_id": sid, "message": text(said)})
                                appended.append(said)
                            else:
                                assert sm.call("session::get", {"session_id": sid})["meta"]["title"] == "t"
                        finally:
                            sys.setprofile(None)
                        if not fired[0]:
                            break  # (past the last point)
                        with db.watchdog._lock:
                            assert db.watchdog._armed == {}, (outer_call, k)
                        armed = db.local.state.armed
                        assert armed is None or not armed.held, (outer_call, k)
                        points.append((outer_call, k))
                        k += 1
            except BaseException as e:  # (reported on the test's thread)
                failures.append(e)

        worker = threading.Thread(target=attack, daemon=True)
        worker.start()
        worker.join(30)  # (the whole walk takes ~2 s; a hang is waited for this long only)
        hung = worker.is_alive()
        assert not hung, f"the thread hung with a nested call at point {len(points)}: {points[-1:]}"
        db.give, db.putconn = real
        assert not failures, failures
        assert len(points) >= 10, f"only {len(points)} points: the test proved little"
        assert {"take", "give"} <= landed if fast else {"getconn", "_getconn", "arm", "give"} <= landed, landed
        _check_nothing_left_armed(db, used)
        assert _said(sm, sid) == ["warm 0", "warm 1", *appended]
    finally:
        if not hung:  # (a hung thread holds the watchdog's lock: closing would wait on it forever)
            sm.close()


@pytest.mark.parametrize("when", ["after", "before"])
@pytest.mark.parametrize("observed", [False, True], ids=["plain", "observed"])
def test_a_one_statement_commit_left_in_doubt_fails_run_call_with_session_storage_on_every_path(
        schema: str, when: str, observed: bool) -> None:
    # 00c1780 showed the observed append (sm_apply / sm_append_at) cut after its commit; here
    # also the unobserved one (the plain append's pipeline, the common path) and a cut before
    # the statement reaches the server (nothing landed, but the silent network cannot tell):
    # each fails the store's run_call with session/storage saying it may have landed, fires no
    # event, and the chain read back afterwards holds the write only if it reached the server.
    from session_manager._wire import api
    from session_manager.store.postgres import PostgresSettings, PostgresStore
    from tests.pg_relay import PLAIN_APPEND
    from tests.unit.test_postgres_commit_lost_at_deadline import SilentOnceCut

    relay = SilentOnceCut()
    try:
        settings = PostgresSettings(dsn=relay.dsn(), schema=schema, timeout_ms=TIMEOUT_MS, connect_timeout_ms=1000)
        with session_manager.open(store=PostgresStore(settings)) as sm:
            told: list[Any] = []
            if observed:
                sm.observe({"function_id": "session::on-message-added"}, told.append)
            sid = sm.call("session::create", {"title": "t"})["session_id"]
            for i in range(2):  # (warm: the append's one statement on a pooled connection)
                sm.call("session::append", {"session_id": sid, "message": text(f"warm {i}")})
            relay.cut_at_commit(when, on=(PLAIN_APPEND,) if not observed else (b"sm_apply(", b"sm_append_at(",
                                                                               b"sm_append("))
            request = api.AppendRequest.model_validate({"session_id": sid, "message": text("two")})
            service, store = sm.service, sm.service.store
            with pytest.raises(Exception) as failed:
                store.run_call(lambda: service.append(request))
            assert relay.cuts == 1, "the relay never saw the commit: the test proved nothing"
            assert isinstance(failed.value, SessionError), repr(failed.value)
            assert failed.value.code == "session/storage"
            assert "may have landed" in str(failed.value), str(failed.value)
            assert len(told) == (2 if observed else 0)  # (the warm appends' only)
            relay.silence(False)
            said = _said(sm, sid)
            assert said == (["warm 0", "warm 1", "two"] if when == "after" else ["warm 0", "warm 1"]), said
    finally:
        relay.close()
