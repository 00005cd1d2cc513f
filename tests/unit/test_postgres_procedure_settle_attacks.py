"""Attacks on the in-doubt settle of appends the server places (``sm_append_at``: an
instance that observes, a multi-entry append), as tests/unit/test_postgres_plain_attacks.py
attacks the plain path's (issue 24, "no commit left in doubt").

The connection carrying the ``CALL`` is cut right after it reached the server (it ran:
it landed, or raised ``SM409`` and wrote nothing) or right before (it never ran), and
another writer acts between the lost answer and the settle (the settle wrapped to
run it first) or just before the call: it stores the same entry id with another body
(a replayed id, or two instances whose id generators draw the same ids), appends
(the count moves), deletes the session and creates it again under the same id. The
rule on read-back: the answer is the stored truth (this call's entry if it landed,
else the stored original's or a fresh write), the call's messages are stored if it
answered them, and its events fire once and only for what it applied."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import session_manager
from session_manager._wire import events as ev
from session_manager.ids import SequentialIds
from tests import pg_support
from tests.pg_relay import Relay
from tests.pg_support import text
from tests.unit.test_postgres_instances import check_linear, wait_for

pytestmark = pytest.mark.postgres


@pytest.fixture
def schema() -> Iterator[str]:
    pg_support.require()
    name = f"review3_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        pg_support.drop_schema(name)


def _open(dsn: str, schema: str, ids: Any = None) -> session_manager.SessionManager:
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    settings = PostgresSettings(dsn=dsn, schema=schema, timeout_ms=10_000, connect_timeout_ms=2000)
    return session_manager.open(store=PostgresStore(settings), ids=ids)


class Seen:
    """Every on-message-added this instance fired or was handed (its id and text)."""

    def __init__(self, sm: session_manager.SessionManager) -> None:
        self.added: list[tuple[str, str]] = []
        sm.observe({"function_id": ev.ON_MESSAGE_ADDED}, self._note)
        sm.service.store.events_ready()  # (registered: the other instance records its events for it)

    def _note(self, e: dict[str, Any]) -> None:
        self.added.append((e["entry_id"], e["message"]["content"][0]["text"]))

    def of(self, entry_id: str) -> list[str]:
        return [t for i, t in self.added if i == entry_id]


def observed_with_three(sm: session_manager.SessionManager) -> tuple[str, Seen, list[str]]:
    """A new session with three appends, observed here: its id, the observer, the appends' ids."""
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    seen = Seen(sm)
    return sid, seen, [sm.call("session::append", {"session_id": sid, "message": text(f"w{i}")})["entry_id"]
                       for i in range(3)]


def stored_texts(sm: session_manager.SessionManager, sid: str) -> dict[str, str]:
    return {e["id"]: e["message"]["content"][0]["text"] for e in sm.service.store.entries(sid)}


def wait_stored(schema: str, sid: str, entry_id: str) -> None:
    """Until the cut CALL (forwarded whole: the server runs it) has committed its entry."""
    import psycopg

    def there() -> bool:
        with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
            return conn.execute(f'SELECT 1 FROM "{schema}".entries WHERE session_id = %s AND entry_id = %s',
                                (sid, entry_id)).fetchone() is not None

    assert wait_for(there)


@pytest.fixture
def gap(monkeypatch: pytest.MonkeyPatch) -> list[Callable[[], None]]:
    """What another writer does between a lost answer and its settle (each run once, first)."""
    import session_manager.store.postgres.optimistic as opt

    todo: list[Callable[[], None]] = []

    def run_first(settle: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any, **k: Any) -> Any:
            while todo:
                todo.pop(0)()
            return settle(*a, **k)
        return run

    for name in ("settle_apply", "settle_placed"):  # (the sm_apply and plain settle; sm_append_at's)
        if hasattr(opt, name):
            monkeypatch.setattr(opt, name, run_first(getattr(opt, name)))
    return todo


@pytest.mark.parametrize("when", ["after", "before"])
def test_an_append_whose_id_another_instance_drew_first_is_not_answered_as_landed(
        schema: str, relay: Relay, when: str) -> None:
    # Prevents: two instances drawing the same ids (both SequentialIds here; any generator that
    # repeats), the observed one's append (sm_append_at: its new id assumed unused, SM409 on the
    # server since the other stored it) whose answer was lost settled as "landed" because an
    # entry with its id exists: answered with the other's entry id, its own message never
    # stored, its event fired for a write that never happened.
    sm = _open(relay.dsn(), schema, ids=SequentialIds())
    other = _open(pg_support.DSN, schema, ids=SequentialIds())
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        seen = Seen(sm)
        theirs = other.call("session::append", {"session_id": sid, "message": text("theirs")})["entry_id"]
        assert wait_for(lambda: seen.of(theirs) == ["theirs"])  # (handed on by this instance's listener)
        relay.cut_at_commit(when)
        mine = sm.call("session::append", {"session_id": sid, "message": text("mine")})
        assert relay.cuts == 1
        stored = stored_texts(sm, sid)
        assert stored.get(mine["entry_id"]) == "mine", (mine, stored)
        assert seen.of(mine["entry_id"]) == ["mine"]
        assert seen.of(theirs) == ["theirs"]
        assert check_linear(sm, sid) == [theirs, mine["entry_id"]]
        assert mine["parent_id"] == theirs
    finally:
        other.close()
        sm.close()


@pytest.mark.parametrize("when", ["after", "before"])
def test_append_many_whose_ids_another_instance_drew_first_stores_its_messages(
        schema: str, relay: Relay, when: str) -> None:
    # Prevents: the same for a multi-entry append (sm_append_at whether observed or not): its
    # first id found stored (the other instance's) settled as "landed", its batch answered
    # with the other's ids and never stored.
    sm = _open(relay.dsn(), schema, ids=SequentialIds())
    other = _open(pg_support.DSN, schema, ids=SequentialIds())
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        theirs = other.call("session::append-many", {"session_id": sid,
                                                      "messages": [text("t0"), text("t1")]})["entry_ids"]
        relay.cut_at_commit(when)
        mine = sm.call("session::append-many", {"session_id": sid, "messages": [text("m0"), text("m1")]})
        assert relay.cuts == 1
        stored = stored_texts(sm, sid)
        assert [stored.get(i) for i in mine["entry_ids"]] == ["m0", "m1"], (mine, stored)
        assert check_linear(sm, sid) == [*theirs, *mine["entry_ids"]]
        assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 4
    finally:
        other.close()
        sm.close()


@pytest.mark.parametrize("when", ["after", "before"])
def test_a_replay_whose_procedure_answer_was_lost_answers_the_stored_original(
        schema: str, relay: Relay, when: str) -> None:
    # Prevents: a retried append (its entry id stored meanwhile by another instance, with
    # another body) whose sm_append_at wrote nothing (SM409) or never ran, settled as "landed":
    # answered with its own timestamp (not the original's) and its event fired for the
    # original's id with its own text (the original's was handed on already).
    sm = _open(relay.dsn(), schema)
    other = _open(pg_support.DSN, schema)
    try:
        sid, seen, _ = observed_with_three(sm)
        original = other.call("session::append", {"session_id": sid, "entry_id": "dup", "message": text("first")})
        assert wait_for(lambda: seen.of("dup") == ["first"])
        relay.cut_at_commit(when)
        again = sm.call("session::append", {"session_id": sid, "entry_id": "dup", "message": text("again")})
        assert relay.cuts == 1
        assert again == original
        assert seen.of("dup") == ["first"]
        assert stored_texts(sm, sid)["dup"] == "first"
        assert len(check_linear(sm, sid)) == 4
    finally:
        other.close()
        sm.close()


def test_a_replay_stored_between_a_call_that_never_ran_and_its_settle_is_not_this_call(
        schema: str, relay: Relay, gap: list[Callable[[], None]]) -> None:
    # Prevents: the CALL cut before the server ran it, the same id stored by another instance
    # (another body, on another parent) before the settle looks: "landed" because the id
    # exists, answered with this call's timestamp and its event fired.
    sm = _open(relay.dsn(), schema)
    other = _open(pg_support.DSN, schema)
    try:
        sid, seen, _ = observed_with_three(sm)
        got: dict[str, Any] = {}

        def theirs() -> None:
            got["x"] = other.call("session::append", {"session_id": sid, "message": text("x")})
            got["dup"] = other.call("session::append", {"session_id": sid, "entry_id": "dup",
                                                         "message": text("theirs")})

        gap.append(theirs)
        relay.cut_at_commit("before")
        mine = sm.call("session::append", {"session_id": sid, "entry_id": "dup", "message": text("mine")})
        assert relay.cuts == 1 and not gap
        assert mine == got["dup"] and mine["parent_id"] == got["x"]["entry_id"]
        assert stored_texts(sm, sid)["dup"] == "theirs"
        assert wait_for(lambda: seen.of("dup") == ["theirs"])
        assert seen.of("dup") == ["theirs"]
        assert len(check_linear(sm, sid)) == 5
    finally:
        other.close()
        sm.close()


def test_a_landed_append_settled_after_others_moved_the_session_answers_its_own_write(
        schema: str, relay: Relay, gap: list[Callable[[], None]]) -> None:
    # Guards: the CALL ran (it landed), then, before the settle, another instance replays its id
    # with another body (a replay: nothing written) and appends (the leaf and count move): the
    # settle answers this call's write (its parent as stored, its timestamp), fires its event
    # once, and the count read back is every entry's.
    sm = _open(relay.dsn(), schema)
    other = _open(pg_support.DSN, schema)
    try:
        sid, seen, ids = observed_with_three(sm)
        got: dict[str, Any] = {}

        def theirs() -> None:
            wait_stored(schema, sid, "dup")
            got["dup"] = other.call("session::append", {"session_id": sid, "entry_id": "dup",
                                                         "message": text("theirs")})
            got["x"] = other.call("session::append", {"session_id": sid, "message": text("x")})

        gap.append(theirs)
        relay.cut_at_commit("after")
        mine = sm.call("session::append", {"session_id": sid, "entry_id": "dup", "message": text("mine")})
        assert relay.cuts == 1 and not gap
        assert mine["parent_id"] == ids[-1] and got["dup"] == mine
        assert got["x"]["parent_id"] == "dup"
        assert stored_texts(sm, sid)["dup"] == "mine"
        assert seen.of("dup") == ["mine"]
        assert check_linear(sm, sid) == [*ids, "dup", got["x"]["entry_id"]]
        after = sm.call("session::append", {"session_id": sid, "message": text("after")})
        assert after["parent_id"] == got["x"]["entry_id"]
        assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 6
    finally:
        other.close()
        sm.close()


class _SameSession(SequentialIds):
    """Ids whose session id is a given one (a session created again under its old id)."""

    def __init__(self, sid: str) -> None:
        super().__init__()
        self.sid = sid

    def session_id(self) -> str:
        return self.sid


def test_a_landed_append_whose_session_was_deleted_and_created_again_answers_what_is_stored(
        schema: str, relay: Relay, gap: list[Callable[[], None]]) -> None:
    # Prevents: the CALL ran (it landed), then the session was deleted and created again under
    # its id, and the same entry id stored there with another body, before the settle: settled
    # "landed" on the id, answered with the new entry's parent and this call's timestamp (a mix
    # of two writes), or failed reading the parent of an entry gone between two queries.
    sm = _open(relay.dsn(), schema)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        other = _open(pg_support.DSN, schema, ids=_SameSession(sid))
        Seen(sm)
        for i in range(3):
            sm.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
        got: dict[str, Any] = {}

        def again() -> None:
            wait_stored(schema, sid, "dup")
            other.call("session::delete", {"session_id": sid})
            assert other.call("session::create", {"title": "again"})["session_id"] == sid
            got["x"] = other.call("session::append", {"session_id": sid, "message": text("x")})
            got["dup"] = other.call("session::append", {"session_id": sid, "entry_id": "dup",
                                                         "message": text("theirs")})

        gap.append(again)
        relay.cut_at_commit("after")
        try:
            mine: Any = sm.call("session::append", {"session_id": sid, "entry_id": "dup", "message": text("mine")})
        except session_manager.SessionError as e:
            mine = e
        assert relay.cuts == 1 and not gap
        # Its write landed and was deleted: answering the stored entry (a replay) is the truth now.
        assert mine == got["dup"], mine
        assert stored_texts(sm, sid) == {got["x"]["entry_id"]: "x", "dup": "theirs"}
        other.close()
    finally:
        sm.close()


def test_a_landed_append_revised_by_another_instance_before_its_settle_still_fires_once(
        schema: str, relay: Relay, gap: list[Callable[[], None]]) -> None:
    # Prevents: the CALL ran (it landed), then another instance revised the entry
    # (update-message: its text and revision) before the settle looked: the stored text no
    # longer this call's, settled "not landed", applied again as a replay: answered right but
    # its event never fired here, for an append that did land.
    sm = _open(relay.dsn(), schema)
    other = _open(pg_support.DSN, schema)
    try:
        sid, seen, ids = observed_with_three(sm)
        revised: dict[str, Any] = {}

        def revise() -> None:
            wait_stored(schema, sid, "dup")
            revised["r"] = other.call("session::update-message", {
                "session_id": sid, "entry_id": "dup", "content": [{"type": "text", "text": "revised"}]})

        gap.append(revise)
        relay.cut_at_commit("after")
        mine = sm.call("session::append", {"session_id": sid, "entry_id": "dup", "message": text("mine")})
        assert relay.cuts == 1 and not gap
        assert revised["r"] == {"updated": True, "revision": 1}
        assert mine["parent_id"] == ids[-1]
        assert sm.call("session::append", {"session_id": sid, "entry_id": "dup", "message": text("x")}) == mine
        assert seen.of("dup") == ["mine"]
        assert stored_texts(sm, sid)["dup"] == "revised"
        assert check_linear(sm, sid) == [*ids, "dup"]
    finally:
        other.close()
        sm.close()


@pytest.mark.parametrize("when", ["after", "before"])
def test_an_update_message_settled_after_another_instance_revised_the_entry_answers_its_own_outcome(
        schema: str, relay: Relay, gap: list[Callable[[], None]], when: str) -> None:
    # Guards (sm_apply: settled by its first outbox row, this instance's, that payload): the
    # compare-and-set at revision 0 cut after it was sent or before, then another instance
    # edits the entry at whatever revision it finds before the settle looks. Landed (revision
    # 1, the other's 2): answered updated, fired once; not landed (the other's is revision 1):
    # applied again, it loses its compare-and-set (updated: false) and fires nothing. (Sent
    # whole, the statement may still not have run when its old backend is ended: either
    # outcome is the truth, as long as the answer, the stored revision and the events agree.)
    sm = _open(relay.dsn(), schema)
    other = _open(pg_support.DSN, schema)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        sm.call("session::append", {"session_id": sid, "entry_id": "e1", "message": text("old")})
        updated: list[str] = []
        sm.observe({"function_id": ev.ON_MESSAGE_UPDATED},
                   lambda e: updated.append(e["message"]["content"][0]["text"]))
        sm.service.store.events_ready()
        gap.append(lambda: other.call("session::update-message", {
            "session_id": sid, "entry_id": "e1", "content": [{"type": "text", "text": "theirs"}]}))
        relay.cut_at_commit(when)
        got = sm.call("session::update-message", {"session_id": sid, "entry_id": "e1", "expected_revision": 0,
                                                  "content": [{"type": "text", "text": "mine"}]})
        assert relay.cuts == 1 and not gap
        entry = sm.call("session::get-message", {"session_id": sid, "entry_id": "e1"})["entry"]
        assert entry["message"]["content"][0]["text"] == "theirs"
        if got["updated"]:
            assert when == "after"
            assert got == {"updated": True, "revision": 1} and entry["revision"] == 2
            want = ["mine", "theirs"]
        else:
            assert got == {"updated": False, "revision": 1} and entry["revision"] == 1
            want = ["theirs"]
        assert wait_for(lambda: updated == want), updated
    finally:
        other.close()
        sm.close()


@pytest.mark.parametrize("when", ["after", "before"])
def test_a_create_whose_session_id_another_instance_drew_first_makes_its_own_session_once(
        schema: str, relay: Relay, when: str) -> None:
    # Guards (sm_apply, no session yet: checked absent): two instances drawing the same session
    # ids; the create's id taken by the other (SM409 on the server, or never ran), its answer
    # lost: settled "not landed" by its own outbox row (not by the id), applied again under
    # the next id, once: one answer, one on-created, the other's session untouched.
    sm = _open(relay.dsn(), schema, ids=SequentialIds())
    other = _open(pg_support.DSN, schema, ids=SequentialIds())
    try:
        theirs = other.call("session::create", {"title": "theirs"})["session_id"]
        created: list[str] = []
        sm.observe({"function_id": ev.ON_CREATED}, lambda e: created.append(e["session_id"]))
        sm.service.store.events_ready()
        relay.cut_at_commit(when)
        mine = sm.call("session::create", {"title": "mine"})
        assert relay.cuts == 1
        titles = {s["session_id"]: s["title"] for s in sm.call("session::list", {})["sessions"]}
        assert titles == {theirs: "theirs", mine["session_id"]: "mine"}
        assert created == [mine["session_id"]]
    finally:
        other.close()
        sm.close()


def test_a_create_on_the_transactional_path_never_takes_an_existing_session(
        schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: create's commit (expect_meta None: the session must not exist) written on the
    # transactional path (a lost answer applied again, a call upgraded mid-way) without that
    # check: it upserted over another instance's session when both drew the same id (found by
    # review3's settle attacks: "theirs" became "mine"). Now the id taken is a conflict, and
    # the create draws the next id, as every other adapter's does.
    from session_manager.store.postgres.optimistic import Optimistic

    monkeypatch.setattr(Optimistic, "run_outer", lambda self, call, state: self.calls.run_call(call))
    sm = _open(pg_support.DSN, schema, ids=SequentialIds())
    other = _open(pg_support.DSN, schema, ids=SequentialIds())
    try:
        theirs = other.call("session::create", {"title": "theirs"})["session_id"]
        created: list[str] = []
        sm.observe({"function_id": ev.ON_CREATED}, lambda e: created.append(e["session_id"]))
        sm.service.store.events_ready()
        mine = sm.call("session::create", {"title": "mine"})["session_id"]
        assert mine != theirs
        titles = {s["session_id"]: s["title"] for s in other.call("session::list", {})["sessions"]}
        assert titles == {theirs: "theirs", mine: "mine"}
        assert wait_for(lambda: created == [mine])
        # ensure on the same path still answers an existing session as it is (its read decides)
        again = sm.call("session::ensure", {"session_id": theirs, "title": "x"})
        assert again["created"] is False and again["meta"]["title"] == "theirs"
    finally:
        other.close()
        sm.close()
