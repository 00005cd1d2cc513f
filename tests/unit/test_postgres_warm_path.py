"""The warm append's own steps (issue 24, the client's third pass): ``Optimistic.commit``'s warm
path (one chained append on the known leaf, resolve's checks inline), ``PgDatastore.take`` / ``give``
(the pool's fast path and the watchdog's arming on the thread's own ``Armed``, used again).
Whatever the warm path declines goes the general way with the same answer; the deadline and a
connection it ended behave as through ``getconn`` / ``putconn``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import session_manager
from session_manager.errors import SessionError
from tests import pg_support
from tests.pg_support import text
from tests.unit.test_postgres_instances import check_linear, open_sm

pytestmark = pytest.mark.postgres


@pytest.fixture
def sm(schema: str) -> Iterator[session_manager.SessionManager]:
    with open_sm(schema, pool_size=1) as opened:  # (one connection: a leaked one would stall the next call)
        yield opened


@pytest.fixture
def general(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The entry ids of the optimistic commits the general path decided (``resolve_at_leaf``, which
    ``Optimistic.commit``'s warm path does without): an append missing here took the warm path."""
    import session_manager.store.postgres.optimistic as opt

    decided: list[str] = []
    resolve_at_leaf = opt.resolve_at_leaf

    def spy(plan: Any, commit: Any, *a: Any) -> Any:
        decided.append(commit.entries[0]["id"] if commit.entries else "")
        return resolve_at_leaf(plan, commit, *a)

    monkeypatch.setattr(opt, "resolve_at_leaf", spy)
    return decided


def _read_back(schema: str, sid: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The session's meta and its entries as a fresh instance reads them."""
    with open_sm(schema) as fresh:
        store = fresh.service.store
        return store.get_meta(sid), store.entries(sid)


def test_what_the_warm_path_declines_the_general_path_answers_alike(
        schema: str, sm: session_manager.SessionManager, general: list[str]) -> None:
    # Prevents: the warm path taking a commit it must leave to resolve (an entry id past the length
    # check_id looks at, a named parent, an append made at a leaf), or answering one it takes
    # otherwise than the general path would: a parent, a count or a body not as stored.
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    answers = [sm.call("session::append", {"session_id": sid, "message": text(f"w{i}")}) for i in range(3)]
    assert general == [""]  # (the create; every append after it warm: its session known since)
    long_id = "x" * 300  # (over ID_BYTES // 4 code points: check_id measures it; it fits)
    answers.append(sm.call("session::append", {"session_id": sid, "entry_id": long_id, "message": text("long")}))
    assert general[-1] == long_id
    answers.append(sm.call("session::append", {"session_id": sid, "entry_id": "mine", "message": text("mine")}))
    assert general[-1] == long_id  # (a caller's id, read as absent: the same commit, chained, warm)
    answers.append(sm.call("session::append", {"session_id": sid, "parent_id": "mine", "message": text("named")}))
    assert general[-1] == answers[-1]["entry_id"]  # (a named parent: not chained, the general path)
    answers.append(sm.call("session::append", {"session_id": sid, "message": text("after")}))
    assert general[-1] == answers[-2]["entry_id"]
    ids = [a["entry_id"] for a in answers]
    assert [a["parent_id"] for a in answers] == [None, *ids[:-1]]
    assert answers[3]["entry_id"] == long_id and answers[4]["entry_id"] == "mine"
    meta, entries = _read_back(schema, sid)
    assert meta is not None and meta["message_count"] == 7
    assert [e["id"] for e in entries] == ids and [e["parent_id"] for e in entries] == [None, *ids[:-1]]
    assert [e["message"]["content"][0]["text"] for e in entries] == ["w0", "w1", "w2", "long", "mine", "named",
                                                                     "after"]
    assert check_linear(sm, sid) == ids
    # The same replay answer either way (nothing written, nothing counted).
    again = sm.call("session::append", {"session_id": sid, "entry_id": "mine", "message": text("other")})
    assert again == {"entry_id": "mine", "parent_id": ids[3], "timestamp": answers[4]["timestamp"]}
    assert (_read_back(schema, sid)[0] or {})["message_count"] == 7


def test_an_entry_id_past_the_limit_is_refused_naming_the_field(
        schema: str, sm: session_manager.SessionManager, general: list[str]) -> None:
    # Prevents: the warm path storing (or failing at the server on) an id whose key is past the
    # index row limit: check_id's refusal, naming entry_id, is the general path's.
    sid = sm.call("session::create", {})["session_id"]
    sm.call("session::append", {"session_id": sid, "message": text("w")})
    with pytest.raises(SessionError) as refused:
        sm.call("session::append", {"session_id": sid, "entry_id": "\u00e9" * 600, "message": text("x")})
    assert refused.value.code == "session/invalid_request" and "entry_id" in refused.value.detail
    meta, entries = _read_back(schema, sid)
    assert meta is not None and meta["message_count"] == 1 and len(entries) == 1


def test_a_drawn_id_of_an_entry_this_instance_remembers_is_drawn_again(
        schema: str, sm: session_manager.SessionManager, general: list[str]) -> None:
    # Prevents: the warm path writing a new entry under the id of one it remembers (an id generator
    # that repeats): resolve's conflict ("already exists") on the general path, the id drawn again;
    # the remembered entry untouched.
    sid = sm.call("session::create", {})["session_id"]
    first = sm.call("session::append", {"session_id": sid, "message": text("first")})
    second = sm.call("session::append", {"session_id": sid, "message": text("second")})
    ids = sm.service.core.ids
    real = ids.entry_id
    drawn: list[str] = []

    def repeating() -> str:
        drawn.append(first["entry_id"] if not drawn else real())
        return drawn[-1]

    ids.entry_id = repeating  # type: ignore[method-assign]
    general.clear()
    try:
        third = sm.call("session::append", {"session_id": sid, "message": text("third")})
    finally:
        del ids.entry_id
    assert general[0] == first["entry_id"] and len(drawn) == 2 and third["entry_id"] == drawn[1] != first["entry_id"]
    assert third["parent_id"] == second["entry_id"]
    meta, entries = _read_back(schema, sid)
    assert meta is not None and meta["message_count"] == 3
    assert [(e["id"], e["message"]["content"][0]["text"]) for e in entries] == [
        (first["entry_id"], "first"), (second["entry_id"], "second"), (third["entry_id"], "third")]


def _warmed(db: Any, state: Any) -> None:
    """Until a connection is idle in the pool and ``take`` serves it (armed on the thread's spare)."""
    deadline = time.monotonic() + 30
    while state.spare is None and time.monotonic() < deadline:
        state.deadline = time.monotonic() + 30
        db.give(db.take(state), state)
        time.sleep(0.01)
    assert state.spare is not None


def test_take_arms_the_threads_own_armed_again_and_never_one_still_armed(schema: str) -> None:
    # Prevents: take() re-arming an Armed the watchdog still holds (a connection never given back:
    # its deadline would then watch the new connection's socket), or give() leaving one armed.
    from session_manager.store.postgres.core import PgDatastore

    store = pg_support.open_store(schema, pool_size=2)
    try:
        db: PgDatastore = store.db
        state = db.local.state
        _warmed(db, state)
        state.deadline = time.monotonic() + 30
        a = db.take(state)
        first = state.armed
        assert first is state.spare
        b = db.take(state)  # (a not given back: its Armed still armed)
        second = state.armed
        assert first is not None and second is not None and first is not second
        assert {first.key, second.key} <= set(db.watchdog._armed)
        db.give(b, state)
        state.armed = first
        db.give(a, state)
        assert not db.watchdog._armed
        c = db.take(state)  # (idle again: the pool's fast path, the thread's spare armed again)
        assert state.armed is first and first.fired is False
        assert c.execute("SELECT 1").fetchone() == (1,)
        db.give(c, state)
        assert not db.watchdog._armed
    finally:
        state.deadline = None
        store.close()


def test_a_connection_the_deadline_ended_is_closed_and_not_pooled_and_the_spare_serves_again(schema: str) -> None:
    # Prevents: give() returning a connection whose deadline fired (its socket shut down) to the
    # pool, or the reused Armed still saying fired for the next call's connection.
    from session_manager.store.postgres.core import PgDatastore

    store = pg_support.open_store(schema, pool_size=1)
    try:
        db: PgDatastore = store.db
        state = db.local.state
        _warmed(db, state)
        state.deadline = time.monotonic() + 0.05
        conn = db.take(state)
        armed = state.armed
        assert armed is not None and armed is state.spare
        deadline = time.monotonic() + 10
        while not armed.fired and time.monotonic() < deadline:
            time.sleep(0.01)
        assert armed.fired
        db.give(conn, state)
        assert conn.closed
        state.deadline = time.monotonic() + 30
        fresh = db.take(state)  # (the pool replaces the one discarded: getconn's wait, its own Armed)
        assert fresh is not conn and state.armed is not None and not state.armed.fired
        assert fresh.execute("SELECT 1").fetchone() == (1,)
        db.give(fresh, state)
        again = db.take(state)  # (idle: the fast path, on the spare that fired, armed again)
        assert again is fresh and state.armed is armed and not armed.fired
        assert again.execute("SELECT 1").fetchone() == (1,)
        db.give(again, state)
        assert not db.watchdog._armed
        state.deadline = time.monotonic() - 1  # passed: no connection, the deadline's error
        with pytest.raises(Exception) as late:
            db.take(state)
        assert "timeout_ms" in str(late.value)
    finally:
        state.deadline = None
        store.close()


def test_a_warm_append_past_its_deadline_answers_storage_and_writes_nothing(schema: str) -> None:
    # Prevents: the warm path's take() ignoring a deadline already passed (the call's whole budget
    # spent before it reached the pool): session/storage naming timeout_ms, nothing written.
    import session_manager.store.postgres.optimistic as opt

    with open_sm(schema, pool_size=1) as sm:
        sid = sm.call("session::create", {})["session_id"]
        sm.call("session::append", {"session_id": sid, "message": text("w")})
        real = opt.Optimistic._apply_plain

        def spent(self: Any, plan: Any, events: Any, response: Any, state: Any) -> Any:
            state.deadline = time.monotonic() - 0.001
            return real(self, plan, events, response, state)

        opt.Optimistic._apply_plain = spent  # type: ignore[method-assign]
        try:
            with pytest.raises(SessionError) as late:
                sm.call("session::append", {"session_id": sid, "message": text("late")})
        finally:
            opt.Optimistic._apply_plain = real  # type: ignore[method-assign]
        assert late.value.code == "session/storage" and "timeout_ms" in late.value.detail
        after = sm.call("session::append", {"session_id": sid, "message": text("after")})
    meta, entries = _read_back(schema, sid)
    assert meta is not None and meta["message_count"] == 2
    assert [e["message"]["content"][0]["text"] for e in entries] == ["w", "after"]
    assert entries[-1]["id"] == after["entry_id"]
