"""The warm reads' own steps (issue 24, the warm tail's second pass): the embedded host runs an
unobserved pure read (``session::get``, ``messages``, ``messages-tail``, ``get-message``) through
``PostgresStore.run_read`` (the call's deadline, no call runner); ``PgDatastore.rows`` serves a
call's read outside any mutation through ``take`` / ``give`` with the warm statement's exchange
inline; the tail asks the store ``leaf_since`` (the meta's text not decoded). Whatever these
decline goes the general way; answers, errors, the deadline and a connection found lost or out of
step behave as before."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import session_manager
from session_manager.errors import SessionError
from session_manager.store.memory import MemoryStore
from tests import pg_support
from tests.pg_support import text
from tests.unit.test_postgres_instances import open_sm

pytestmark = pytest.mark.postgres

PURE = ("session::get", "session::messages", "session::messages-tail", "session::get-message")


@pytest.fixture
def schema() -> Iterator[str]:
    pg_support.require()
    name = f"smtest_pgtail2_{uuid.uuid4().hex[:10]}"
    try:
        yield name
    finally:
        pg_support.drop_schema(name)


@pytest.fixture
def sm(schema: str) -> Iterator[session_manager.SessionManager]:
    with open_sm(schema, pool_size=1) as opened:  # (one connection: a leaked one would stall the next call)
        yield opened


def _outcome(sm: session_manager.SessionManager, function: str, body: dict[str, Any]) -> Any:
    try:
        return ("ok", sm.call(function, body))
    except SessionError as e:
        return ("error", e.code, e.detail)


def _requests(sid: str, eid: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("session::get", {"session_id": sid}),
        ("session::messages", {"session_id": sid, "limit": 3}),
        ("session::messages", {"session_id": sid, "from_entry_id": eid}),
        ("session::messages-tail", {"session_id": sid, "limit": 2}),
        ("session::messages-tail", {"session_id": sid, "limit": 50, "include_custom": False}),
        ("session::get-message", {"session_id": sid, "entry_id": eid}),
        ("session::get-message", {"session_id": sid, "entry_id": "no-such-entry"}),
    ]


def test_pure_reads_answer_as_the_general_path_does(sm: session_manager.SessionManager) -> None:
    # Prevents: the pure-read dispatch (run_read, rows' fast path, leaf_since) answering, or
    # refusing, otherwise than run_and_deliver's: a hit, a miss, a missing session or entry.
    sid = sm.call("session::create", {"title": "t", "metadata": {"k": [1, 2]}})["session_id"]
    ids = [sm.call("session::append", {"session_id": sid, "message": text(f"m{i}")})["entry_id"] for i in range(5)]
    sm.call("session::append", {"session_id": sid, "custom": {"custom_type": "note", "data": {"x": None}}})
    calls = [*_requests(sid, ids[2]), *_requests("no-such-session", ids[2])]
    run_read = sm._run_read
    assert run_read is not None
    seen: list[str] = []

    def spy(handler: Any, service: Any, request: Any) -> Any:
        seen.append(type(request).__name__)
        return run_read(handler, service, request)

    for _ in range(3):  # (the tail's page kept, then answered from the memo: hits as well as misses)
        sm._run_read = spy
        fast = [_outcome(sm, f, b) for f, b in calls]
        sm._run_read = None  # (the general way: run_and_deliver, run_outer, the optimistic attempt)
        general = [_outcome(sm, f, b) for f, b in calls]
        assert fast == general
    assert len(seen) == 3 * len(calls)
    assert fast[0][1]["meta"]["title"] == "t"
    assert [m["entry_id"] for m in fast[3][1]["messages"]][-1] != ids[-1]  # (the custom entry is the newest)
    assert [m["entry_id"] for m in fast[4][1]["messages"]] == ids
    assert fast[5][1]["entry"]["id"] == ids[2]
    missing = fast[len(calls) // 2:]
    assert missing[0] == ("ok", None)  # get: null when unknown
    assert missing[1][:2] == ("error", "session/not_found") and missing[3][:2] == ("error", "session/not_found")
    # A mutation never takes the pure-read way.
    sm._run_read = spy
    sm.call("session::append", {"session_id": sid, "message": text("after")})
    assert len(seen) == 3 * len(calls)
    sm._run_read = run_read


def test_an_observed_read_takes_serve_and_answers_alike(sm: session_manager.SessionManager) -> None:
    # Prevents: a pure read run through run_read while someone observes (serve's path delivers).
    sid = sm.call("session::create", {})["session_id"]
    eid = sm.call("session::append", {"session_id": sid, "message": text("m")})["entry_id"]
    before = [_outcome(sm, f, b) for f, b in _requests(sid, eid)]
    used: list[int] = []
    run_read = sm._run_read
    assert run_read is not None

    def spy(handler: Any, service: Any, request: Any) -> Any:
        used.append(1)
        return run_read(handler, service, request)

    sm._run_read = spy
    observation = sm.observe({"function_id": "session::on-message-added"}, lambda event: None)
    try:
        observed = [_outcome(sm, f, b) for f, b in _requests(sid, eid)]
    finally:
        observation.dispose()
        sm._run_read = run_read
    assert observed == before and used == []


def test_run_read_sets_the_calls_deadline_and_clears_it_and_the_window(
        sm: session_manager.SessionManager, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a pure read without the call's deadline (its statement unarmed: a stalled server
    # would hold the caller), or one leaving the deadline or the path's window set for the next call.
    import session_manager._service.tail as tail

    sid = sm.call("session::create", {})["session_id"]
    sm.call("session::append", {"session_id": sid, "message": text("m")})
    store = sm.service.store
    state = store.db.local.state
    real = tail.messages_tail
    during: list[Any] = []

    def spy(core: Any, req: Any) -> Any:
        during.append(state.deadline)
        return real(core, req)

    monkeypatch.setattr(tail, "messages_tail", spy)
    start = time.monotonic()
    sm.call("session::messages-tail", {"session_id": sid})
    timeout = store.db.settings.timeout_ms / 1000
    assert during[0] is not None and start + timeout <= during[0] <= time.monotonic() + timeout
    assert state.deadline is None and state.window is None


def test_a_read_past_its_deadline_answers_storage_and_the_next_one_answers(
        sm: session_manager.SessionManager, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: rows' fast path (take) reading past a deadline already spent: session/storage naming
    # timeout_ms, as getconn answers it; the connection not lost to the pool (pool_size=1).
    import session_manager._service.tail as tail

    sid = sm.call("session::create", {})["session_id"]
    sm.call("session::append", {"session_id": sid, "message": text("m")})
    page = sm.call("session::messages-tail", {"session_id": sid})
    state = sm.service.store.db.local.state
    real = tail.messages_tail

    def spent(core: Any, req: Any) -> Any:
        state.deadline = time.monotonic() - 0.001
        return real(core, req)

    monkeypatch.setattr(tail, "messages_tail", spent)
    with pytest.raises(SessionError) as late:
        sm.call("session::messages-tail", {"session_id": sid})
    assert late.value.code == "session/storage" and "timeout_ms" in late.value.detail
    monkeypatch.setattr(tail, "messages_tail", real)
    assert state.deadline is None
    assert sm.call("session::messages-tail", {"session_id": sid}) == page


def test_run_read_inside_another_call_takes_run_and_deliver(
        sm: session_manager.SessionManager, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: run_read, reached inside a call in progress (a deadline set), replacing that call's
    # deadline with its own or clearing it when it returns.
    store = sm.service.store
    sid = sm.call("session::create", {})["session_id"]
    state = store.db.local.state
    general: list[int] = []
    real = type(store).run_and_deliver

    def spy(self: Any, call: Any, deliver: Any) -> Any:
        general.append(1)
        return real(self, call, deliver)

    monkeypatch.setattr(type(store), "run_and_deliver", spy)
    outer = time.monotonic() + 30
    state.deadline = outer
    try:
        def handler(service: Any, request: Any) -> Any:
            assert state.deadline == outer
            return service.store.get_meta(request), []

        meta = store.run_read(handler, sm.service, sid)
        assert state.deadline == outer
    finally:
        state.deadline = None
    assert general == [1] and meta is not None and meta["session_id"] == sid


def _pooled_backend(sm: session_manager.SessionManager) -> Any:
    pool = sm.service.store.db.pool
    assert len(pool._pool) == 1  # (pool_size=1, idle between calls)
    return pool._pool[0]


def test_a_read_on_a_connection_lost_while_idle_runs_again_on_a_live_one(sm: session_manager.SessionManager) -> None:
    # Prevents: rows' fast path answering session/storage for a read whose idle pooled connection
    # the server ended (a restart, an idle timeout): the read runs again on a new connection.
    import psycopg

    sid = sm.call("session::create", {"title": "lost"})["session_id"]
    sm.call("session::append", {"session_id": sid, "message": text("m")})
    answers = [sm.call("session::get", {"session_id": sid}), sm.call("session::messages-tail", {"session_id": sid})]
    for i, function in enumerate(("session::get", "session::messages-tail")):
        pid = _pooled_backend(sm).info.backend_pid
        with psycopg.connect(pg_support.DSN, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        body = {"session_id": sid}
        assert sm.call(function, body) == answers[i]
        assert _pooled_backend(sm).info.backend_pid != pid


def test_a_warm_statement_whose_name_the_server_lost_is_prepared_again(sm: session_manager.SessionManager) -> None:
    # Prevents: rows' inline exchange failing a read whose prepared statement the connection no
    # longer has (a DEALLOCATE ALL: psycopg's on a prepared-cache reset) instead of preparing it again.
    sid = sm.call("session::create", {})["session_id"]
    sm.call("session::append", {"session_id": sid, "message": text("m")})
    page = sm.call("session::messages-tail", {"session_id": sid})
    conn = _pooled_backend(sm)
    assert conn.statements  # (the tail's statement prepared on it, by our names)
    conn.pgconn.exec_(b"DEALLOCATE ALL")
    assert sm.call("session::messages-tail", {"session_id": sid}) == page  # (a hit: the memo's page)
    sm.call("session::append", {"session_id": sid, "message": text("n")})
    conn.pgconn.exec_(b"DEALLOCATE ALL")
    after = sm.call("session::messages-tail", {"session_id": sid})  # (a miss: the window read)
    assert [m["message"]["content"][0]["text"] for m in after["messages"]] == ["m", "n"]


def test_leaf_since_is_meta_and_leaf_since_without_the_meta(sm: session_manager.SessionManager) -> None:
    # Prevents: the tail's read (leaf_since: the meta's text not decoded) telling a session's
    # presence, leaf or version otherwise than meta_and_leaf_since: unknown, fresh, at a version.
    store = sm.service.store
    sid = sm.call("session::create", {})["session_id"]
    eid = sm.call("session::append", {"session_id": sid, "message": text("m")})["entry_id"]
    meta, leaf, version = store.meta_and_leaf_since(sid, None)
    assert meta is not None and leaf == eid
    assert store.leaf_since(sid, None) == (True, eid, version)
    assert store.leaf_since(sid, version) == (True, eid, version)  # (at that version: nothing but the row)
    assert store.leaf_since("no-such-session", None) == (False, None, None)
    assert store.leaf_since("no-such-session", version) == (False, None, None)
    empty = sm.call("session::create", {})["session_id"]
    assert store.leaf_since(empty, None)[:2] == (True, None)


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_leaf_since_elsewhere_follows_meta_and_leaf_since(tmp_path: Any, kind: str) -> None:
    # Prevents: sqlite's leaf_since (its meta's text not decoded) or the base class's default
    # (the memory store's) answering the tail otherwise than meta_and_leaf_since says.
    with (session_manager.open(f"sqlite:///{tmp_path / 'db.sqlite'}") if kind == "sqlite"
          else session_manager.open(store=MemoryStore())) as sm:
        store = sm.service.store
        sid = sm.call("session::create", {})["session_id"]
        eid = sm.call("session::append", {"session_id": sid, "message": text("m")})["entry_id"]
        meta, leaf, version = store.meta_and_leaf_since(sid, None)
        assert store.leaf_since(sid, None) == (meta is not None, leaf, version) == (True, eid, version)
        assert store.leaf_since(sid, version) == (True, eid, version)
        assert store.leaf_since("nope", None) == (False, None, None)
        empty = sm.call("session::create", {})["session_id"]
        assert store.leaf_since(empty, None)[:2] == (True, None)
        with pytest.raises(SessionError) as gone:
            sm.call("session::messages-tail", {"session_id": "nope"})
        assert gone.value.code == "session/not_found"
        sm.call("session::delete", {"session_id": sid})
        assert store.meta_and_leaf_since(sid, version)[0] is None
        assert store.leaf_since(sid, version) == (False, None, None)  # (deleted: gone, whatever version)
