"""A warm linked plain append learns the session as it will be while the server writes it
(``Optimistic._learn_ahead``, run by ``PgDatastore.run_pair`` between the send and the answer):
published only once the answer says it wrote, dropped on a miss, a deadline or a failure of its
own, each of which then behaves exactly as without it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import session_manager
from tests import pg_support
from tests.pg_support import text
from tests.unit.test_postgres_instances import check_linear, open_sm
from tests.unit.test_postgres_plain import _kind, _spy_run_pair

pytestmark = pytest.mark.postgres


@pytest.fixture(name="ahead")
def ahead_fixture(monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
    """What each ``_learn_ahead`` of this process produced (its ``out``: the Known, or nothing)."""
    import session_manager.store.postgres.optimistic as opt

    made: list[list[Any]] = []
    learn_ahead = opt.Optimistic._learn_ahead

    def spy(self: Any, plan: Any, params: dict[str, Any], out: list[Any]) -> None:
        learn_ahead(self, plan, params, out)
        made.append(out)

    monkeypatch.setattr(opt.Optimistic, "_learn_ahead", spy)
    return made


def _stored(schema: str, sid: str) -> tuple[str, str, str, dict[str, tuple[int, str, int]], str]:
    """The session row's meta text, leaf and version (xmin), its entries' links, its leaf's body."""
    import psycopg

    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        row = conn.execute(f'SELECT meta, leaf, xmin::text FROM "{schema}".sessions WHERE session_id = %s',
                           (sid,)).fetchone()
        assert row is not None
        links = {e: (d, j, jd) for e, d, j, jd in conn.execute(
            f'SELECT entry_id, depth, jump_id, jump_depth FROM "{schema}".entries WHERE session_id = %s', (sid,))}
        body = conn.execute(f'SELECT body FROM "{schema}".entries WHERE session_id = %s AND entry_id = %s',
                            (sid, row[1])).fetchone()
        assert body is not None
        return row[0], row[1], row[2], links, body[0]


@pytest.fixture
def sm(schema: str) -> Iterator[session_manager.SessionManager]:
    with open_sm(schema, pool_size=1) as opened:  # (one connection: a leaked one would stall the next call)
        yield opened


def test_a_linked_append_publishes_what_it_learned_ahead_once_written_as_stored(
        schema: str, sm: session_manager.SessionManager, ahead: list[list[Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the session learned ahead differing from what the server stored (meta text,
    # leaf, row version, the links of the leaf's chain, the leaf's body), so the next linked
    # append's compare-and-set misses or sends wrong links; or it not being used at all.
    sent = _spy_run_pair(monkeypatch, _kind)
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    answers = [sm.call("session::append", {"session_id": sid, "message": text(str(i))}) for i in range(20)]
    assert sent == ["linked"] * 20 and len(ahead) == 20 and all(len(out) == 1 for out in ahead)
    known = sm.service.store.optimistic._known[sid]
    assert known is ahead[-1][0]
    meta, leaf, version, links, body = _stored(schema, sid)
    assert (known.text, known.leaf, known.row) == (meta, leaf, version)
    assert known.links and all(links[e] == link for e, link in known.links.items())
    assert known.bodies[leaf][1] == body and known.bodies[leaf][0]["parent_id"] == answers[-2]["entry_id"]
    assert [a["parent_id"] for a in answers] == [None, *[a["entry_id"] for a in answers[:-1]]]
    assert len(check_linear(sm, sid)) == 20


def test_a_linked_miss_drops_what_it_learned_ahead_and_keeps_the_procedures_answer(
        schema: str, sm: session_manager.SessionManager, ahead: list[list[Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the session learned ahead (on the leaf this instance knew) surviving a
    # compare-and-set that missed (another instance appended): the response or the Known then
    # naming the stale leaf as the parent, the count one short, or the next append forking.
    sent = _spy_run_pair(monkeypatch, _kind)
    other = open_sm(schema)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        for i in range(5):
            sm.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
        theirs = other.call("session::append", {"session_id": sid, "message": text("theirs")})["entry_id"]
        ahead.clear()
        sent.clear()
        mine = sm.call("session::append", {"session_id": sid, "message": text("mine")})
        assert sent == ["linked"] and len(ahead) == 1 and len(ahead[0]) == 1  # learned ahead, then missed
        assert mine["parent_id"] == theirs  # (sm_append_at placed it)
        known = sm.service.store.optimistic._known[sid]
        assert known is not ahead[0][0] and known.row is None  # (learned from sm_append_at's answer)
        meta, leaf, _, _, body = _stored(schema, sid)
        assert (known.text, known.leaf, leaf) == (meta, mine["entry_id"], mine["entry_id"])
        assert known.bodies[leaf][1] == body and known.meta["message_count"] == 7
        nxt = sm.call("session::append", {"session_id": sid, "message": text("next")})
        assert nxt["parent_id"] == mine["entry_id"]
        assert len(check_linear(sm, sid)) == 8
    finally:
        other.close()


def test_a_deadline_while_learning_ahead_answers_storage_and_discards_the_connection(
        schema: str, ahead: list[list[Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the session learned ahead being published for an append whose answer never
    # came (the server waited on the session's lock past the call's deadline), or the
    # connection, cut mid-exchange, going back to the pool.
    import psycopg

    import session_manager.store.postgres.optimistic as opt

    conns: list[Any] = []
    run_pair = opt.PgDatastore.run_pair

    def spy(self: Any, conn: Any, *rest: Any) -> Any:
        conns.append(conn)
        return run_pair(self, conn, *rest)

    monkeypatch.setattr(opt.PgDatastore, "run_pair", spy)
    sm = open_sm(schema, timeout_ms=1500, pool_size=1)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        for i in range(6):
            sm.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
        ahead.clear()
        conns.clear()
        with psycopg.connect(pg_support.DSN, autocommit=True) as holder:
            holder.execute(f'SET search_path TO "{schema}"')
            holder.execute("BEGIN")
            holder.execute("SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ':' || %s, 0))",
                           (sid,))
            with pytest.raises(session_manager.SessionError) as failed:
                sm.call("session::append", {"session_id": sid, "entry_id": "late", "message": text("late")})
            holder.execute("ROLLBACK")
        assert failed.value.code == "session/storage"
        assert len(ahead) == 1 and len(ahead[0]) == 1  # (it was learned ahead, then dropped)
        assert conns[0].closed and sid not in sm.service.store.optimistic._known
        after = sm.call("session::append", {"session_id": sid, "message": text("after")})
        landed = [e["id"] for e in sm.service.store.entries(sid) if e["id"] == "late"]  # (in doubt: it may have)
        path = check_linear(sm, sid)
        assert len(path) == 7 + len(landed) and after["parent_id"] == path[-2]
    finally:
        sm.close()


def test_a_failure_while_learning_ahead_leaves_the_append_as_without_it(
        schema: str, sm: session_manager.SessionManager, ahead: list[list[Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a failure of the work done ahead (run mid-exchange) failing an append the server
    # committed, or leaving the connection half read and out of the pool (pool_size=1: the next
    # call would wait for it): it is dropped, and the after-work runs after the answer.
    import session_manager.store.postgres.optimistic as opt

    sent = _spy_run_pair(monkeypatch, _kind)
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    for i in range(4):
        sm.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
    learned = opt.Optimistic._learned
    calls: list[bool] = []

    def failing_once(*a: Any) -> Any:
        calls.append(True)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return learned(*a)

    monkeypatch.setattr(opt.Optimistic, "_learned", staticmethod(failing_once))
    ahead.clear()
    sent.clear()
    answer = sm.call("session::append", {"session_id": sid, "message": text("x")})
    assert ahead == [[]] and len(calls) == 2  # (dropped ahead; learned after the answer)
    meta, leaf, version, _, body = _stored(schema, sid)
    known = sm.service.store.optimistic._known[sid]
    assert (known.text, known.leaf, known.row, known.bodies[leaf][1]) == (meta, answer["entry_id"], version, body)
    nxt = sm.call("session::append", {"session_id": sid, "message": text("y")})
    assert nxt["parent_id"] == answer["entry_id"] and sent == ["linked", "linked"]
    assert len(check_linear(sm, sid)) == 6
