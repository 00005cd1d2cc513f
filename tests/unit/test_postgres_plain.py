"""The warm unobserved append as plain statements (issue 24, store/postgres/plain.py): one round
trip, the same rows as ``sm_append_at`` writes, and ``sm_append_at`` whenever the session changed
behind this instance's back, an entry id is taken, or someone observes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import session_manager
from session_manager._wire import events as ev
from session_manager.store.sql.values import json_text
from tests import pg_support
from tests.pg_relay import Relay
from tests.pg_support import text
from tests.unit.test_postgres_instances import check_linear, open_sm, wait_for

pytestmark = pytest.mark.postgres


@pytest.fixture
def sm(schema: str, relay: Relay) -> Iterator[session_manager.SessionManager]:
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    pg_support.require()
    # No observer: the listener never starts (nothing of this instance observes).
    with session_manager.open(store=PostgresStore(PostgresSettings(dsn=relay.dsn(), schema=schema,
                                                                   pool_size=1))) as opened:
        yield opened


def _spy_run_pair(monkeypatch: pytest.MonkeyPatch, record: Callable[[Any, dict[str, Any]], str]) -> list[str]:
    """Spies on the plain append's one round trip (``PgDatastore.run_pair``): the list it returns
    gets ``record(second, params)`` for each pair run (the statements then run as before)."""
    import session_manager.store.postgres.optimistic as opt

    seen: list[str] = []
    run_pair = opt.PgDatastore.run_pair

    def spy(self: Any, conn: Any, first: Any, second: Any, params: dict[str, Any], *rest: Any) -> Any:
        seen.append(record(second, params))
        return run_pair(self, conn, first, second, params, *rest)

    monkeypatch.setattr(opt.PgDatastore, "run_pair", spy)
    return seen


def _kind(second: Any, params: dict[str, Any]) -> str:
    """What a pair sent: "linked" (the links this instance knows) or "probed" (the server looks them up)."""
    import session_manager.store.postgres.optimistic as opt

    return "linked" if second.sql == opt._PLAIN_LINKED.sql else "probed"


def _server(query: str, params: Any = None) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description is not None else []


def _links(schema: str, sid: str) -> list[tuple[Any, ...]]:
    return _server(f'SELECT entry_id, parent_id, depth, jump_id, jump_depth, body FROM "{schema}".entries'
                   " WHERE session_id = %s ORDER BY seq", (sid,))


def test_warm_unobserved_appends_take_one_round_trip_and_store_what_the_procedure_stores(
        schema: str, sm: session_manager.SessionManager, relay: Relay, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the plain statement taking more than one round trip, writing a depth or jump
    # pointer (skew-binary), a parent, a body or a meta text other than sm_append_at's, or an
    # outbox row nobody is owed.
    import session_manager.store.postgres.optimistic as opt

    wrote: list[bool] = []
    apply_plain = opt.Optimistic._apply_plain
    monkeypatch.setattr(opt.Optimistic, "_apply_plain",
                        lambda self, *a: wrote.append(apply_plain(self, *a)) or wrote[-1])

    sid = sm.call("session::create", {"title": "t"})["session_id"]
    trips = []
    for i in range(40):
        before = relay.round_trips
        sm.call("session::append", {"session_id": sid, "message": text(str(i))})
        trips.append(relay.round_trips - before)
    assert trips[5:] == [1] * 35
    plain = _links(schema, sid)
    meta = _server(f'SELECT meta, updated_at, leaf FROM "{schema}".sessions WHERE session_id = %s', (sid,))[0]
    assert _server(f'SELECT count(*) FROM "{schema}".outbox WHERE function_id = %s', (ev.ON_MESSAGE_ADDED,)) == [(0,)]
    assert wrote.count(True) >= 35  # (not sm_append_at: see the comparison below)
    # The same appends through sm_append_at, in another session: the same links.
    monkeypatch.setattr(opt, "PLAIN", False)
    other = sm.call("session::create", {"title": "t"})["session_id"]
    for i in range(40):
        sm.call("session::append", {"session_id": other, "message": text(str(i))})
    procedure = _links(schema, other)
    assert _same_shape(plain, procedure)  # (sm_append_at as migration 10 left it: its probe a subquery)
    source = _server("SELECT pg_get_functiondef(%s::regproc)", (f'"{schema}".sm_append_at',))[0][0]
    assert "OFFSET 0) j ON true" in source
    assert [r[1] for r in plain] == [None, *[r[0] for r in plain[:-1]]]
    assert all(json.loads(r[5])["parent_id"] == r[1] for r in plain)  # the hole filled in the body too
    stored = sm.call("session::get", {"session_id": sid})["meta"]
    assert stored["message_count"] == 40 and meta[1] == stored["updated_at"] and meta[2] == plain[-1][0]
    assert meta[0] == json_text(stored)  # the client encoder's bytes
    assert len(check_linear(sm, sid)) == 40
    page = sm.call("session::messages", {"session_id": sid, "limit": 50})["messages"]
    assert [m["message"]["content"][0]["text"] for m in page] == [str(i) for i in range(40)]


def test_an_append_after_another_instance_wrote_hangs_on_its_entry(schema: str, sm: session_manager.SessionManager,
                                                                   relay: Relay) -> None:
    # Prevents: the compare-and-set writing over another instance's append (a fork, a lost
    # message_count) or answering the stale leaf; or the session staying off the one-trip path.
    other = open_sm(schema)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        for i in range(5):
            sm.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
        for i in range(3):
            theirs = other.call("session::append", {"session_id": sid, "message": text(f"o{i}")})["entry_id"]
            mine = sm.call("session::append", {"session_id": sid, "message": text(f"m{i}")})
            assert mine["parent_id"] == theirs
        assert len(check_linear(sm, sid)) == 11
        assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 11
        time.sleep(1.1)  # (past CONTENDED_S: the plain statement again)
        sm.call("session::append", {"session_id": sid, "message": text("again")})
        before = relay.round_trips
        sm.call("session::append", {"session_id": sid, "message": text("warm")})
        assert relay.round_trips - before == 1
        assert len(check_linear(sm, sid)) == 13
    finally:
        other.close()


def test_an_entry_id_already_stored_is_a_replay_not_a_second_copy(schema: str,
                                                                  sm: session_manager.SessionManager) -> None:
    # Prevents: the plain INSERT's unique violation surfacing as a storage error, or a second
    # copy of an append retried after this instance forgot its body (it remembers the last 16).
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    first = sm.call("session::append", {"session_id": sid, "entry_id": "x", "message": text("x")})
    for i in range(20):
        sm.call("session::append", {"session_id": sid, "message": text(str(i))})
    again = sm.call("session::append", {"session_id": sid, "entry_id": "x", "message": text("x")})
    assert again == first
    assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 21
    assert len(check_linear(sm, sid)) == 21


def test_an_observer_of_another_instance_gets_every_append_after_it_registered(
        schema: str, sm: session_manager.SessionManager) -> None:
    # Prevents: the plain statement writing while someone observes (no outbox row, no
    # NOTIFY: the observer misses the append), or staying off once nobody observes.
    watcher = open_sm(schema)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        for i in range(3):
            sm.call("session::append", {"session_id": sid, "message": text(f"q{i}")})
        seen: list[str] = []
        watcher.observe({"function_id": ev.ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
        watcher.service.store.events_ready()
        loud = [sm.call("session::append", {"session_id": sid, "message": text(f"l{i}")})["entry_id"]
                for i in range(3)]
        assert wait_for(lambda: seen == loud)
        assert len(check_linear(sm, sid)) == 6
    finally:
        watcher.close()


def _same_shape(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> bool:
    """Both chains' depths and jump pointers alike, entry by entry (ids differ: by position)."""
    pos_a = {r[0]: i for i, r in enumerate(a)}
    pos_b = {r[0]: i for i, r in enumerate(b)}
    return [(r[2], pos_a[r[3]], r[4]) for r in a] == [(r[2], pos_b[r[3]], r[4]) for r in b]


def _rule_links(schema: str, sid: str) -> list[tuple[Any, ...]]:
    """Each stored entry's (id, depth, jump_id, jump_depth) beside what the skew-binary rule
    gives from its parent (entries in insertion order; links.py's rule, as plain.next_link)."""
    from session_manager.store.postgres import plain

    links: dict[str, plain.Link] = {}
    out = []
    for eid, parent, depth, jump, jump_depth, _ in _links(schema, sid):
        expect = plain.next_link(links, parent if parent in links else None, eid)
        links[eid] = (depth, jump, jump_depth)
        out.append(((eid, depth, jump, jump_depth), (eid, *expect) if expect is not None else None))
    return out


def test_warm_appends_send_the_links_they_know_and_store_what_the_server_would(
        schema: str, sm: session_manager.SessionManager, relay: Relay, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the plain append probing the parent and its jump target on the server every
    # time (two primary-key lookups, ~85k server instructions) although this instance wrote
    # them; or sending a depth or jump pointer other than the rule's: after its own appends,
    # after another instance's (its knowledge stale: the compare-and-set refuses it), after a
    # rewrite (update-message) and after a fork (an append naming its parent, through sm_apply).
    from session_manager.store.postgres import plain

    sent = _spy_run_pair(monkeypatch, _kind)
    other = open_sm(schema)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        ids = [sm.call("session::append", {"session_id": sid, "message": text(str(i))})["entry_id"]
               for i in range(30)]
        assert sent == ["linked"] * 30  # (the first: a root, whose links need no parent's)
        sent.clear()
        theirs = other.call("session::append", {"session_id": sid, "message": text("theirs")})["entry_id"]
        mine = sm.call("session::append", {"session_id": sid, "message": text("mine")})
        assert mine["parent_id"] == theirs  # (the stale knowledge refused: sm_append_at placed it)
        time.sleep(1.1)  # (past CONTENDED_S: the plain statement again)
        first = sm.call("session::append", {"session_id": sid, "message": text("a")})["entry_id"]
        sm.call("session::update-message", {"session_id": sid, "entry_id": first,
                                             "content": [{"type": "text", "text": "a2"}]})
        sm.call("session::append", {"session_id": sid, "parent_id": ids[10], "message": text("fork")})
        for i in range(20):
            sm.call("session::append", {"session_id": sid, "message": text(f"b{i}")})
        assert sent.count("linked") >= 15
        checked = _rule_links(schema, sid)
        assert len(checked) == 54 and all(stored == expect for stored, expect in checked)
        page = sm.call("session::messages", {"session_id": sid, "limit": 100})["messages"]
        assert [m["message"]["content"][0]["text"] for m in page] == [
            *[str(i) for i in range(11)], "fork", *[f"b{i}" for i in range(20)]]  # (the fork's branch)
        known = sm.service.store.optimistic._known[sid]
        assert plain.chain(known.links, known.leaf) == known.links and known.leaf in known.links
    finally:
        other.close()


def test_links_known_for_a_leaf_are_never_sent_for_another_one(schema: str, sm: session_manager.SessionManager,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: an instance whose knowledge of a session is stale (another instance appended)
    # writing its entry with links computed for the leaf it knew: the compare-and-set on the
    # meta text and leaf runs in the same statement, so nothing is written and sm_append_at
    # places the entry (its links probed by the server).
    other = open_sm(schema)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        for i in range(6):
            sm.call("session::append", {"session_id": sid, "message": text(str(i))})
        for i in range(6):
            other.call("session::append", {"session_id": sid, "message": text(f"o{i}")})
        sm.call("session::append", {"session_id": sid, "message": text("late")})
        checked = _rule_links(schema, sid)
        assert len(checked) == 13 and all(stored == expect for stored, expect in checked)
        assert len(check_linear(sm, sid)) == 13
    finally:
        other.close()


def test_a_linked_miss_is_told_observed_or_changed_by_where_the_procedure_places_the_entry(
        schema: str, sm: session_manager.SessionManager, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: plain.LINKED, which does not say why it wrote nothing, leaving an instance on the
    # plain path while another instance observes (two round trips per append, every append),
    # or sending every session to sm_append_at when only one session changed behind its back.
    tried = _spy_run_pair(monkeypatch, lambda second, params: params["sid"])
    other = open_sm(schema)
    try:
        a, b = (sm.call("session::create", {"title": t})["session_id"] for t in "ab")
        for sid in (a, b, a, b):
            sm.call("session::append", {"session_id": sid, "message": text("warm")})
        # Changed: another instance appended to a; b stays on the plain path.
        other.call("session::append", {"session_id": a, "message": text("theirs")})
        tried.clear()
        sm.call("session::append", {"session_id": a, "message": text("mine")})
        sm.call("session::append", {"session_id": a, "message": text("mine again")})
        sm.call("session::append", {"session_id": b, "message": text("b")})
        assert tried == [a, b]  # (a's second append: sm_append_at directly, for a while)
        time.sleep(1.1)  # (past CONTENDED_S)
        # Observed: another instance observes; the miss sends every session to sm_append_at.
        got: list[str] = []
        other.observe({"function_id": ev.ON_MESSAGE_ADDED}, lambda e: got.append(e["entry_id"]))
        other.service.store.events_ready()
        tried.clear()
        first = sm.call("session::append", {"session_id": a, "message": text("seen")})["entry_id"]
        second = sm.call("session::append", {"session_id": b, "message": text("seen too")})["entry_id"]
        assert tried == [a]  # (b's: sm_append_at directly, someone observes)
        assert wait_for(lambda: {first, second} <= set(got))
        assert len(check_linear(sm, a)) == 6 and len(check_linear(sm, b)) == 4
    finally:
        other.close()


def test_a_session_learned_by_a_read_probes_once_and_learns_the_leafs_chain(
        schema: str, sm: session_manager.SessionManager, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: an instance that knows a session's meta and leaf but not its links (read, not
    # written, by it) probing on every append, or learning a chain that is not the server's
    # (plain.APPEND answers the parent's chain of jump pointers: the next appends send links).
    writer = open_sm(schema)
    try:
        sid = writer.call("session::create", {"title": "t"})["session_id"]
        for i in range(37):
            writer.call("session::append", {"session_id": sid, "message": text(str(i))})
    finally:
        writer.close()
    sent = _spy_run_pair(monkeypatch, _kind)
    for i in range(12):
        sm.call("session::append", {"session_id": sid, "message": text(f"r{i}")})
    assert sent == ["probed"] + ["linked"] * 11
    checked = _rule_links(schema, sid)
    assert len(checked) == 49 and all(stored == expect for stored, expect in checked)


def test_a_plain_append_that_misses_is_held_off_with_the_id_it_drew_and_answers_the_servers_parent(
        schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: an append resolved on the known leaf for the plain statement, which then wrote
    # nothing (the session changed behind this instance), answering or announcing the leaf it knew
    # instead of the one sm_append_at chose, storing a parent that is not the response's, or
    # deciding the call again (an id drawn twice: with a generator another instance repeats, the
    # next id may be that one's, and a transactional write overwrites it).
    from session_manager.ids import SequentialIds

    tried = _spy_run_pair(monkeypatch, lambda second, params: params["id"])
    mine = session_manager.open(store=pg_support.open_store(schema), ids=SequentialIds())
    other = open_sm(schema)
    try:
        sid = mine.call("session::create", {})["session_id"]
        for i in range(3):
            mine.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
        theirs = other.call("session::append", {"session_id": sid, "message": text("theirs")})["entry_id"]
        got: list[dict[str, Any]] = []
        tried.clear()
        answer = mine.call("session::append", {"session_id": sid, "message": text("mine")})
        assert tried == ["e_004"] and answer["entry_id"] == "e_004"  # (tried plain once, the id it drew kept)
        assert answer["parent_id"] == theirs  # the server's choice, not the leaf this instance knew
        stored = _server(f'SELECT parent_id FROM "{schema}".entries WHERE session_id = %s AND entry_id = %s',
                         (sid, "e_004"))
        assert stored == [(theirs,)]
        # Observed by the other instance: the plain statement misses again; its event, recorded by
        # sm_append_at, names the parent and text stored.
        other.observe({"function_id": ev.ON_MESSAGE_ADDED}, got.append)
        other.service.store.events_ready()
        time.sleep(1.1)  # (past CONTENDED_S: the changed session's appends try the plain statement again)
        tried.clear()
        after = mine.call("session::append", {"session_id": sid, "message": text("after")})
        assert tried == ["e_005"] and after["entry_id"] == "e_005" and after["parent_id"] == "e_004"
        assert wait_for(lambda: [e["entry_id"] for e in got] == ["e_005"])
        assert got[0]["parent_id"] == "e_004" and got[0]["message"]["content"][0]["text"] == "after"
        assert check_linear(mine, sid)[-3:] == [theirs, "e_004", "e_005"]
    finally:
        other.close()
        mine.close()
