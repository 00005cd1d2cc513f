"""review14's attacks on the warm plain append resolved on the known leaf (pgcli5): a miss of the
plain statement (the session changed, someone observes) switches the same append to sm_append_at
(at_leaf.hold_off), keeping the id it drew. Real second instances and threads; answers, stored
rows and events compared with what was stored."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import session_manager
from session_manager._wire import events as ev
from session_manager.store.sql.values import json_text
from tests import pg_support
from tests.pg_support import text
from tests.unit.test_postgres_attacks_review7 import _rule_ok
from tests.unit.test_postgres_instances import check_linear, wait_for

pytestmark = pytest.mark.postgres


@pytest.fixture
def schema() -> Iterator[str]:
    pg_support.require()
    name = f"sm_review14_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        pg_support.drop_schema(name)


def _open(schema: str, **kw: Any) -> session_manager.SessionManager:
    return session_manager.open(store=pg_support.open_store(schema), **kw)


def _chain(sm: session_manager.SessionManager, sid: str) -> list[str]:
    """The session's entries, one chain (each parent once, all on the active path): their ids."""
    store = sm.service.store
    entries = store.entries(sid)
    assert len({e["parent_id"] for e in entries}) == len(entries), "two entries share a parent"
    path = [e["id"] for e in store.path(sid, store.get_leaf(sid))]
    assert sorted(path) == sorted(e["id"] for e in entries)
    return path


@pytest.mark.parametrize("miss", ["changed", "observed"])
def test_append_many_of_one_onto_an_empty_session_after_a_miss_answers_without_a_parent_field(
        schema: str, miss: str) -> None:
    # Prevents: hold_off taking a response without a parent_id field (append-many's) for one
    # whose parent_id is the known leaf when that leaf is None (an empty session): the held-off
    # append then answered {"entry_ids", "last_entry_id", "parent_id": <the server's leaf>},
    # a field append-many's answer never has.
    a, b = _open(schema), _open(schema)
    try:
        sid = a.call("session::create", {})["session_id"]  # (a knows it: empty, leaf None)
        before: list[str] = []
        if miss == "changed":  # (the compare-and-set fails)
            before.append(b.call("session::append", {"session_id": sid, "message": text("theirs")})["entry_id"])
        else:  # (the statement sees an observer: sm_append_at places it on the leaf a knew, None)
            got: list[dict[str, Any]] = []
            b.observe({"function_id": ev.ON_MESSAGE_ADDED}, got.append)
            b.service.store.events_ready()
        answer = a.call("session::append-many", {"session_id": sid, "messages": [text("mine")]})
        assert set(answer) == {"entry_ids", "last_entry_id"}
        assert check_linear(a, sid) == [*before, answer["last_entry_id"]]
        if miss == "observed":
            assert wait_for(lambda: [e["entry_id"] for e in got] == answer["entry_ids"])
            assert got[0]["parent_id"] is None
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("typed", [False, True])
def test_an_append_at_a_leaf_another_instance_moved_on_is_refused_not_placed_after_it(
        schema: str, typed: bool) -> None:
    # Prevents: an append made only while the session is at (created_at, leaf) (append_at: the
    # adapters' own view of a session) checked against what this instance remembers, then left to
    # the server to place (the plain statement's miss held off for sm_append_at, which chains onto
    # whatever leaf the server has): another instance's append in between, and it landed after
    # that one instead of raising LeafMoved with nothing written.
    from session_manager._service.appending import LeafMoved

    a, b = _open(schema), _open(schema)
    try:
        made = a.call("session::ensure", {"session_id": "s"})["meta"]["created_at"]
        mine = a.call("session::append", {"session_id": "s", "custom": {"custom_type": "x"}})["entry_id"]
        mine = a.call("session::append", {"session_id": "s", "custom": {"custom_type": "x"}})["entry_id"]
        theirs = b.call("session::append", {"session_id": "s", "custom": {"custom_type": "t"}})["entry_id"]
        with pytest.raises(LeafMoved):
            if typed:
                a._append_owned("s", "y", 1, at=(made, mine))
            else:
                a._call_owned("session::append", {"session_id": "s", "custom": {"custom_type": "y"}},
                              at=(made, mine))
        assert _chain(b, "s")[-2:] == [mine, theirs]
        after = a._append_owned("s", "y", 2, at=(made, theirs))  # (at the leaf as it is: placed there)
        assert _chain(b, "s")[-3:] == [mine, theirs, after]
    finally:
        a.close()
        b.close()


def _plain(value: Any) -> Any:
    """An answer without what two stores may tell apart for the same history (times, revisions,
    opaque cursors)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()
                if k not in ("timestamp", "revision", "next_cursor", "cursor", "created_at", "updated_at")}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _reads(sm: session_manager.SessionManager, sid: str, ids: list[str]) -> list[Any]:
    """Path reads that walk the jump pointers: pages from the root, from the middle entries, the
    tail before an entry, each entry by id."""
    out: list[Any] = [sm.call("session::messages", {"session_id": sid, "limit": 500})]
    for at in ids[:: max(1, len(ids) // 9)]:
        out.append(sm.call("session::messages", {"session_id": sid, "from_entry_id": at, "limit": 7}))
        out.append(sm.call("session::messages", {"session_id": sid, "after_entry_id": at, "limit": 5}))
        out.append(sm.call("session::messages-tail", {"session_id": sid, "before_entry_id": at, "limit": 4}))
    out += [sm.call("session::get-message", {"session_id": sid, "entry_id": i}) for i in ids]
    return _plain(out)


def _same_as_fs(schema: str, sid: str, tmp_path: Any) -> list[str]:
    """The session read by a fresh instance equals the fs store's answers for the same history
    (each entry appended there with its id and stored message); its stored links are the rule's."""
    fresh = _open(schema)
    try:
        path = _chain(fresh, sid)
        entries = {e["id"]: e for e in fresh.service.store.entries(sid)}
        _rule_ok(schema, sid, len(path))
        with session_manager.open(tmp_path / "fs") as fs:
            fs.call("session::ensure", {"session_id": sid})
            for i in path:
                fs.call("session::append", {"session_id": sid, "entry_id": i, "message": entries[i]["message"]})
            assert _reads(fresh, sid, path) == _reads(fs, sid, path)
        meta = fresh.call("session::get", {"session_id": sid})["meta"]
        assert meta["message_count"] == len(path)
        return path
    finally:
        fresh.close()


@pytest.fixture
def held_off(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each at_leaf.hold_off's answer (a plain append the plain statement did not write, switched)."""
    from session_manager.store.postgres import at_leaf, optimistic

    out: list[bool] = []

    def spy(*args: Any) -> bool:
        out.append(at_leaf.hold_off(*args))
        return out[-1]

    monkeypatch.setattr(optimistic, "hold_off", spy)
    return out


def test_two_instances_appending_concurrently_through_misses_answer_store_and_announce_alike(
        schema: str, tmp_path: Any, held_off: list[bool]) -> None:
    # Prevents: an append whose plain statement missed (the other instance wrote, an observer
    # registered mid-stream) answering a parent that is not the stored one, storing an entry
    # twice or not at all, an event fired twice, for a replay, or naming another parent, and what
    # an instance then knows of the session writing wrong links (read back through the jump
    # pointers by a fresh instance and compared with the fs store's answers).
    import threading

    a, b, c = _open(schema), _open(schema), _open(schema)
    sid = "s"
    registered = threading.Event()
    got: list[dict[str, Any]] = []
    owed: list[str] = []  # entries appended (not replayed) in calls begun after the observer registered
    answers: list[tuple[str, list[str], str | None]] = []  # (kind, ids, parent answered)
    lock = threading.Lock()
    try:
        a.call("session::ensure", {"session_id": sid})
        for sm in (a, b):  # both warm: each knows the session
            sm.call("session::append", {"session_id": sid, "message": text("warm")})

        def work(k: int) -> None:
            sm = (a, b)[k % 2]
            last: str | None = None
            for i in range(30):
                after = registered.is_set()
                op = (i + k) % 5
                if op in (0, 1):
                    req: dict[str, Any] = {"session_id": sid, "message": text(f"{k}.{i}")}
                    if op == 1:
                        req["entry_id"] = f"r{i % 7}"  # (every thread replays these: stored once)
                    r = sm.call("session::append", req)
                    ids, parent = [r["entry_id"]], r["parent_id"]
                    kind = "append" if op == 0 else "replayable"
                elif op in (2, 3):
                    msgs = [text(f"{k}.{i}.{j}") for j in range(op - 1)]
                    r = sm.call("session::append-many", {"session_id": sid, "messages": msgs})
                    assert set(r) == {"entry_ids", "last_entry_id"} and r["last_entry_id"] == r["entry_ids"][-1]
                    ids, parent, kind = r["entry_ids"], None, "many"
                else:
                    if last is not None:
                        sm.call("session::update-message", {"session_id": sid, "entry_id": last,
                                                            "content": [{"type": "text", "text": f"u{k}.{i}"}]})
                    continue
                last = ids[-1]
                with lock:
                    answers.append((kind, ids, parent))
                    if after and kind != "replayable":
                        owed.extend(ids)
                if k == 0 and i == 12:
                    c.observe({"function_id": ev.ON_MESSAGE_ADDED}, got.append)
                    c.service.store.events_ready()
                    registered.set()

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        path = _same_as_fs(schema, sid, tmp_path)
        parents = {e["id"]: e["parent_id"] for e in a.service.store.entries(sid)}
        for kind, ids, parent in answers:
            assert all(i in parents for i in ids)
            if kind != "many":
                assert parent == parents[ids[0]], (kind, ids)
            assert all(parents[ids[j]] == ids[j - 1] for j in range(1, len(ids)))
        assert wait_for(lambda: set(owed) <= {e["entry_id"] for e in got})
        seen = [e["entry_id"] for e in got]
        assert len(seen) == len(set(seen)), "an append announced twice"
        assert all(parents[e["entry_id"]] == e["parent_id"] for e in got)
        assert len(path) == len(parents)
        assert held_off and all(held_off)  # (the miss path taken, each time switched to sm_append_at)
    finally:
        for sm in (a, b, c):
            sm.close()


@pytest.mark.parametrize("when", ["after", "before"])
@pytest.mark.parametrize("given_id", [True, False])
def test_a_held_off_append_whose_procedure_call_is_cut_is_stored_once_on_the_servers_leaf(
        schema: str, relay: Any, held_off: list[bool], when: str, given_id: bool) -> None:
    # Prevents: a plain append that missed (another instance wrote), switched to sm_append_at,
    # whose connection was cut as that call reached the server (it committed, its answer lost;
    # or it never ran) answered with the leaf this instance knew, stored twice, or not at all;
    # a pool of one (the settlement needs the connection the cut one left).
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    mine = session_manager.open(store=PostgresStore(PostgresSettings(dsn=relay.dsn(), schema=schema, pool_size=1)))
    other = _open(schema)
    try:
        sid = mine.call("session::create", {"title": "t"})["session_id"]
        ids = [mine.call("session::append", {"session_id": sid, "message": text(f"w{i}")})["entry_id"]
               for i in range(5)]
        theirs = other.call("session::append", {"session_id": sid, "message": text("theirs")})["entry_id"]
        relay.cut_at_commit(when, on=(b"sm_append_at(",))
        req: dict[str, Any] = {"session_id": sid, "message": text("cut")}
        if given_id:
            req["entry_id"] = "cut"
        got = mine.call("session::append", req)
        assert relay.cuts == 1 and held_off == [True]
        assert got["parent_id"] == theirs and (got["entry_id"] == "cut" or not given_id)
        after = mine.call("session::append", {"session_id": sid, "message": text("after")})
        assert after["parent_id"] == got["entry_id"]
        assert check_linear(other, sid) == [*ids, theirs, got["entry_id"], after["entry_id"]]
        _rule_ok(schema, sid, 8)
    finally:
        mine.close()
        other.close()


def test_a_caller_id_another_instance_stored_meanwhile_is_a_replay_across_the_miss(
        schema: str, held_off: list[bool]) -> None:
    # Prevents: an entry id this instance assumed unused (its plain statement then missed: the
    # other instance had appended that very id) stored a second time by the held-off
    # sm_append_at, or answered with this call's own parent instead of the stored original's.
    a, b = _open(schema), _open(schema)
    try:
        sid = a.call("session::create", {})["session_id"]
        for i in range(3):
            a.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
        first = b.call("session::append", {"session_id": sid, "entry_id": "same", "message": text("b")})
        b.call("session::append", {"session_id": sid, "message": text("b after")})
        again = a.call("session::append", {"session_id": sid, "entry_id": "same", "message": text("a")})
        assert held_off == [True]
        assert again == first
        stored = a.call("session::get-message", {"session_id": sid, "entry_id": "same"})["entry"]
        assert stored["message"]["content"][0]["text"] == "b"
        assert len(check_linear(b, sid)) == 5
    finally:
        a.close()
        b.close()


def test_meta_texts_with_odd_keys_non_ascii_and_huge_numbers_are_cut_exactly_across_misses(
        schema: str, tmp_path: Any, held_off: list[bool]) -> None:
    # Prevents: a held-off append's meta text taken from the known text's cut (not encoded again)
    # differing from the meta's own encoding when the meta is unusual (keys out of order, nested,
    # non-ASCII, integers past 64 bits, escapes): the stored text would decode to another meta,
    # or the next plain statement's compare-and-set would never match (every append a miss).
    a, b = _open(schema), _open(schema)
    metadata = {"z": 1, "a": {"\u00e9t\u00e9": [2**70, -(2**65), 1.5]}, "\u65e5\u672c": "\"q\"\\\n\u2028",
                "message_count": 7, "updated_at": "x"}
    try:
        sid = a.call("session::create", {"title": "t\u00eftre \U0001f600", "metadata": metadata})["session_id"]
        for i in range(4):
            a.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
            b.call("session::append", {"session_id": sid, "message": text(f"b{i}")})  # (a's next one misses)
        assert held_off and all(held_off)
        rows = _server_rows(f'SELECT meta FROM "{schema}".sessions WHERE session_id = %s', (sid,))
        stored = json.loads(rows[0][0])
        assert json_text(stored) == rows[0][0]  # (the text is the meta's own encoding)
        meta = a.call("session::get", {"session_id": sid})["meta"]
        assert meta["metadata"] == metadata and meta["message_count"] == 8
        assert list(meta["metadata"]) == list(metadata)
        held_off.clear()
        for i in range(3):  # (alone now: the plain statement writes, its text matching)
            a.call("session::append", {"session_id": sid, "message": text(f"x{i}")})
        assert held_off == []
        assert a.call("session::get", {"session_id": sid})["meta"]["message_count"] == 11
        _same_as_fs(schema, sid, tmp_path)
    finally:
        a.close()
        b.close()


def _server_rows(query: str, params: Any = None) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


def test_a_held_off_append_meeting_its_deadline_on_the_session_lock_never_lands_later(
        schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the second round trip of a miss (sm_append_at, after the plain statement wrote
    # nothing) waiting past the call's deadline (its connection armed with a fresh one, not the
    # call's), or, ended at the deadline, committing later anyway (the caller told it failed).
    import time

    import psycopg

    from session_manager.store.postgres import at_leaf, optimistic

    mine, other = _open_with(schema, timeout_ms=1500), _open(schema)
    holder = psycopg.connect(pg_support.DSN, autocommit=True)
    try:
        sid = mine.call("session::create", {"title": "t"})["session_id"]
        for i in range(4):
            mine.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
        other.call("session::append", {"session_id": sid, "message": text("theirs")})
        holder.execute(f'SET search_path TO "{schema}"')

        def held(*args: Any) -> bool:  # (the plain statement has missed: the session's lock taken now)
            holder.execute("BEGIN")
            holder.execute("SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ':' || %s, 0))",
                           (sid,))
            return at_leaf.hold_off(*args)

        monkeypatch.setattr(optimistic, "hold_off", held)
        outcome: Any
        try:
            outcome = mine.call("session::append", {"session_id": sid, "entry_id": "late", "message": text("late")})
        except session_manager.SessionError as e:
            outcome = e
        holder.execute("COMMIT")
        monkeypatch.undo()
        time.sleep(0.5)
        landed = _server_rows(f'SELECT count(*) FROM "{schema}".entries WHERE session_id = %s AND entry_id = %s',
                              (sid, "late"))[0][0]
        assert isinstance(outcome, session_manager.SessionError) and outcome.code == "session/storage", outcome
        if "may have landed" not in str(outcome):
            assert landed == 0, outcome
        after = mine.call("session::append", {"session_id": sid, "message": text("after")})
        path = check_linear(other, sid)
        assert len(path) == 6 + landed and path[-1] == after["entry_id"]
        _rule_ok(schema, sid, len(path))
    finally:
        holder.close()
        mine.close()
        other.close()


def _open_with(schema: str, **overrides: Any) -> session_manager.SessionManager:
    return session_manager.open(store=pg_support.open_store(schema, **overrides))


def test_appends_from_an_observer_callback_to_another_store_and_back_land_once_on_the_right_leaf(
        schema: str) -> None:
    # Prevents: the thread state handed down a call (its deadline, its sender, the optimistic
    # plan) of one store leaking into another store's call on the same thread, or into a call of
    # the same store made from its observer's callback: an append there answered or stored on a
    # wrong leaf, lost, or stored twice, while a third instance moves the other store's session on.
    a, b, c = _open(schema), _open(schema), _open(schema)
    made: list[tuple[Any, str, dict[str, Any]]] = []
    try:
        sa, sb, sc = (a.call("session::create", {"title": t})["session_id"] for t in ("a", "b", "c"))
        for i in range(3):
            b.call("session::append", {"session_id": sb, "message": text(f"warm{i}")})

        def callback(e: dict[str, Any]) -> None:
            if e["session_id"] != sa:
                return
            n = e["message"]["content"][0]["text"]
            made.append((b, sb, b.call("session::append", {"session_id": sb, "message": text(f"cb{n}")})))
            made.append((a, sc, a.call("session::append", {"session_id": sc, "message": text(f"cb{n}")})))

        a.observe({"function_id": ev.ON_MESSAGE_ADDED}, callback)
        for i in range(6):
            a.call("session::append", {"session_id": sa, "message": text(f"{i}")})
            c.call("session::append", {"session_id": sb, "message": text(f"c{i}")})
        assert wait_for(lambda: len(made) == 12)
        for _sm, sid, answer in made:
            stored = c.call("session::get-message", {"session_id": sid, "entry_id": answer["entry_id"]})["entry"]
            assert stored["parent_id"] == answer["parent_id"]
        assert len(check_linear(c, sb)) == 15 and len(check_linear(c, sc)) == 6 and len(check_linear(c, sa)) == 6
        _rule_ok(schema, sb, 15)
    finally:
        for sm in (a, b, c):
            sm.close()


def test_ids_near_a_known_sessions_are_their_own_and_overlong_ones_are_refused(schema: str) -> None:
    # Prevents: check_id skipped for a session this instance knows being skipped for an id that
    # only resembles a known one (another Unicode normalisation, case, an escaped NUL's stored
    # form): an append there landing on the known session, or an overlong id reaching the server.
    a = _open(schema)
    try:
        known = ["caf\u00e9", "S", "a\x00b", "\U0001f600" * 256]  # (the last: 1,024 bytes, the most allowed)
        for sid in known:
            a.call("session::ensure", {"session_id": sid})
            for i in range(2):  # warm: the plain statement
                a.call("session::append", {"session_id": sid, "message": text(f"{i}")})
        for near in ["cafe\u0301", "s", "a\x01\x01b", "\U0001f600" * 255]:
            with pytest.raises(session_manager.SessionError) as caught:
                a.call("session::append", {"session_id": near, "message": text("x")})
            assert caught.value.code == "session/not_found", near
        for long in ["\U0001f600" * 257, "\U0001f600" * 256 + "x"]:
            with pytest.raises(session_manager.SessionError) as refused:
                a.call("session::append", {"session_id": long, "message": text("x")})
            assert refused.value.code in ("session/invalid_request", "session/not_found"), refused.value.code
        for sid in known:
            assert len(check_linear(a, sid)) == 2
    finally:
        a.close()


def test_fork_set_meta_status_update_and_delete_by_another_instance_between_warm_appends(
        schema: str, tmp_path: Any, held_off: list[bool]) -> None:
    # Prevents: a warm append made on what this instance knows (meta text, leaf, links) after
    # another instance changed the session some other way (its meta beyond the two numbers an
    # append changes, its status, an entry's text, a fork of it appended to, its deletion)
    # answering or storing a wrong parent, count or meta, undoing the other's change, or landing
    # in a deleted session.
    a, b = _open(schema), _open(schema)
    try:
        sid = a.call("session::create", {"title": "t"})["session_id"]
        ids = [a.call("session::append", {"session_id": sid, "message": text(f"w{i}")})["entry_id"]
               for i in range(6)]
        fork = b.call("session::fork", {"session_id": sid, "entry_id": ids[3]})["session_id"]
        for i in range(2):  # (a learns the fork, then appends warm)
            ids.append(a.call("session::append", {"session_id": fork, "message": text(f"f{i}")})["entry_id"])
        theirs = b.call("session::append", {"session_id": fork, "message": text("theirs")})["entry_id"]
        r = a.call("session::append", {"session_id": fork, "message": text("mine")})
        assert r["parent_id"] == theirs
        b.call("session::set-meta", {"session_id": sid, "title": "T\u00e9", "metadata": {"k": [1]}})
        r = a.call("session::append", {"session_id": sid, "message": text("after meta")})
        assert r["parent_id"] == ids[5]
        b.call("session::set-status", {"session_id": sid, "status": "done"})
        b.call("session::update-message", {"session_id": sid, "entry_id": r["entry_id"],
                                           "content": [{"type": "text", "text": "edited"}]})
        r2 = a.call("session::append", {"session_id": sid, "message": text("after status")})
        assert r2["parent_id"] == r["entry_id"]
        meta = b.call("session::get", {"session_id": sid})["meta"]
        assert (meta["title"], meta["metadata"], meta["status"], meta["message_count"]) == ("T\u00e9", {"k": [1]},
                                                                                              "done", 8)
        got = b.call("session::get-message", {"session_id": sid, "entry_id": r["entry_id"]})["entry"]
        assert got["message"]["content"][0]["text"] == "edited"
        assert len(check_linear(b, fork)) == 4 + 2 + 2
        _same_as_fs(schema, fork, tmp_path / "f")
        _same_as_fs(schema, sid, tmp_path / "s")
        b.call("session::delete", {"session_id": sid})
        with pytest.raises(session_manager.SessionError) as gone:
            a.call("session::append", {"session_id": sid, "message": text("into the void")})
        assert gone.value.code == "session/not_found"
        assert _server_rows(f'SELECT count(*) FROM "{schema}".entries WHERE session_id = %s', (sid,)) == [(0,)]
    finally:
        a.close()
        b.close()


_CHILD = """
import json, sys
import session_manager
from tests import pg_support
schema, sid, tag, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def text(s):
    return {"role": "user", "content": [{"type": "text", "text": s}], "timestamp": 1}
with session_manager.open(store=pg_support.open_store(schema)) as sm:
    sm.call("session::append", {"session_id": sid, "message": text(tag + "-warm")})
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(n):
        if i % 3 == 0:
            r = sm.call("session::append-many", {"session_id": sid, "messages": [text(f"{tag}-{i}")]})
            assert set(r) == {"entry_ids", "last_entry_id"}, r
            print("many", json.dumps(r["entry_ids"]), flush=True)
        else:
            req = {"session_id": sid, "message": text(f"{tag}-{i}")}
            if i % 3 == 2:
                req["entry_id"] = f"shared-{i}"
            r = sm.call("session::append", req)
            print("one", json.dumps([r["entry_id"], r["parent_id"]]), flush=True)
"""


def test_processes_appending_to_one_session_at_once_answer_what_is_stored(schema: str, tmp_path: Any) -> None:
    # Prevents: processes whose warm appends keep missing each other (each plain statement's
    # compare-and-set beaten by another process) answering a parent that is not the stored one,
    # storing a shared id twice, forking the chain or leaving links off the rule.
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sm = _open(schema)
    procs: list[Any] = []
    try:
        sid = sm.call("session::create", {})["session_id"]
        for tag in ("p", "q", "r"):
            proc = subprocess.Popen([sys.executable, "-c", _CHILD, schema, sid, tag, "24"], cwd=root,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append(proc)
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outs = []
        for proc in procs:
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err
            outs.append(out)
        path = _same_as_fs(schema, sid, tmp_path)
        parents = {e["id"]: e["parent_id"] for e in sm.service.store.entries(sid)}
        for out in outs:
            for line in out.splitlines():
                kind, raw = line.split(" ", 1)
                if kind == "one":
                    eid, parent = json.loads(raw)
                    assert parents[eid] == parent, line
                elif kind == "many":
                    assert all(i in parents for i in json.loads(raw))
        assert len(path) == 3 + 3 * 16 + 8  # (warm ones, own ones, each shared id once)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        sm.close()


@pytest.mark.parametrize("miss", ["changed", "observed"])
def test_a_miss_whose_meta_cannot_be_cut_stays_on_the_known_leaf_checked_by_the_server(
        schema: str, monkeypatch: pytest.MonkeyPatch, miss: str) -> None:
    # Prevents: hold_off's other answer (the meta text cannot be cut: the append stays on the leaf
    # it knew, sm_apply checking it) sending the hole, a body or event naming no parent, or a stale
    # leaf written over another instance's append (changed: a conflict, decided again and placed
    # after theirs; observed: on the known leaf, announced once with it).
    from session_manager.store.postgres import at_leaf

    a, b = _open(schema), _open(schema)
    try:
        sid = a.call("session::create", {})["session_id"]
        ids = [a.call("session::append", {"session_id": sid, "message": text(f"w{i}")})["entry_id"]
               for i in range(3)]
        got: list[dict[str, Any]] = []
        if miss == "changed":
            ids.append(b.call("session::append", {"session_id": sid, "message": text("theirs")})["entry_id"])
        else:
            b.observe({"function_id": ev.ON_MESSAGE_ADDED}, got.append)
            b.service.store.events_ready()
        monkeypatch.setattr(at_leaf, "segments", lambda *args: None)  # (no cut: as for an odd stored text)
        r = a.call("session::append", {"session_id": sid, "message": text("mine")})
        assert r["parent_id"] == ids[-1]
        path = check_linear(b, sid)
        assert path == [*ids, r["entry_id"]]
        body = _server_rows(f'SELECT body FROM "{schema}".entries WHERE session_id = %s AND entry_id = %s',
                            (sid, r["entry_id"]))[0][0]
        assert json.loads(body)["parent_id"] == ids[-1] and at_leaf.HOLE_JSON[1:-1] not in body
        if miss == "observed":
            assert wait_for(lambda: len(got) == 1)
            assert got[0]["entry_id"] == r["entry_id"] and got[0]["parent_id"] == ids[-1]
    finally:
        a.close()
        b.close()


def test_a_deep_session_grown_by_linked_appends_between_misses_keeps_the_rules_links(
        schema: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the links a linked append learns by growing its parent's chain (plain.grown, in
    # the window while the server writes) drifting from the rule over many depths (a skew-binary
    # jump taken at the wrong depth, a chain kept for another leaf after a miss): every later
    # path read by jump pointers would skip or repeat entries.
    from session_manager.store.postgres import optimistic, plain

    grown: list[bool] = []
    real = plain.grown

    def spy(links: Any, params: Any) -> Any:
        out = real(links, params)
        grown.append(out is not None)
        return out

    monkeypatch.setattr(plain, "grown", spy)
    monkeypatch.setattr(optimistic, "CONTENDED_S", 0.0)  # (after a miss, the plain statement at once)
    a, b = _open(schema), _open(schema)
    try:
        sid = a.call("session::create", {})["session_id"]
        for i in range(260):
            a.call("session::append", {"session_id": sid, "message": text(f"{i}")})
            if i % 53 == 17:
                b.call("session::append", {"session_id": sid, "message": text(f"b{i}")})
        assert sum(grown) > 200
        path = _same_as_fs(schema, sid, tmp_path)
        assert len(path) == 260 + 5
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("where", ["this instance", "another instance"])
def test_an_observer_registering_between_an_appends_decision_and_its_send_gets_it_once(
        schema: str, monkeypatch: pytest.MonkeyPatch, held_off: list[bool], where: str) -> None:
    # Prevents: an append resolved on the known leaf for the plain statement, which may no longer
    # be tried when it is sent (an observer registered meanwhile, here or elsewhere), written
    # without its event (the observer registered before the write: it is owed it), announced
    # twice, or with a parent that is not the stored one.
    from session_manager.store.postgres import optimistic

    a = _open(schema)
    watcher = a if where == "this instance" else _open(schema)
    got: list[dict[str, Any]] = []
    real = optimistic.Optimistic._apply
    armed = [True]

    def apply(self: Any, plan: Any, events: Any, response: Any, *rest: Any) -> None:
        if armed[0] and self is a.service.store.optimistic:
            armed[0] = False
            watcher.observe({"function_id": ev.ON_MESSAGE_ADDED}, got.append)
            watcher.service.store.events_ready()
        real(self, plan, events, response, *rest)

    try:
        sid = a.call("session::create", {})["session_id"]
        ids = [a.call("session::append", {"session_id": sid, "message": text(f"w{i}")})["entry_id"]
               for i in range(3)]
        monkeypatch.setattr(optimistic.Optimistic, "_apply", apply)
        r = a.call("session::append", {"session_id": sid, "message": text("mine")})
        assert held_off == [True] and r["parent_id"] == ids[-1]
        assert wait_for(lambda: len(got) >= 1)
        nxt = a.call("session::append", {"session_id": sid, "message": text("next")})
        assert wait_for(lambda: len(got) >= 2)
        import time

        time.sleep(0.3)  # (a second copy of either would have arrived by now)
        assert [(e["entry_id"], e["parent_id"]) for e in got] == [(r["entry_id"], ids[-1]),
                                                                   (nxt["entry_id"], r["entry_id"])]
        assert check_linear(a, sid) == [*ids, r["entry_id"], nxt["entry_id"]]
    finally:
        a.close()
        if watcher is not a:
            watcher.close()


@pytest.mark.parametrize("at", ["plain statement", "held off"])
def test_a_warm_append_into_a_silent_network_fails_at_its_deadline_and_the_next_ones_chain_on(
        schema: str, relay: Any, monkeypatch: pytest.MonkeyPatch, at: str) -> None:
    # Prevents: a warm append whose statement (the plain one, or the held-off sm_append_at after a
    # miss) meets a peer that never answers hanging past the call's deadline, answering success,
    # or leaving what this instance knows of the session such that its next appends (the network
    # back) fork the chain, skip the other instance's entry or store links off the rule.
    from session_manager.store.postgres import PostgresSettings, PostgresStore, at_leaf, optimistic

    mine = session_manager.open(store=PostgresStore(PostgresSettings(
        dsn=relay.dsn(), schema=schema, timeout_ms=1500, connect_timeout_ms=1000, pool_timeout_ms=1500)))
    other = _open(schema)
    try:
        sid = mine.call("session::create", {})["session_id"]
        for i in range(4):
            mine.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
        if at == "held off":
            other.call("session::append", {"session_id": sid, "message": text("theirs")})

            def silenced(*args: Any) -> bool:
                relay.silence()
                return at_leaf.hold_off(*args)

            monkeypatch.setattr(optimistic, "hold_off", silenced)
        else:
            relay.silence()
        with pytest.raises(session_manager.SessionError) as failed:
            mine.call("session::append", {"session_id": sid, "entry_id": "lost", "message": text("lost")})
        assert failed.value.code == "session/storage"
        monkeypatch.undo()
        relay.silence(False)
        landed = _server_rows(f'SELECT count(*) FROM "{schema}".entries WHERE session_id = %s AND entry_id = %s',
                              (sid, "lost"))[0][0]
        assert landed == 0
        other.call("session::append", {"session_id": sid, "message": text("theirs again")})
        after: list[str] = []

        def first_after() -> bool:  # (the pool reconnects by itself, its connects made in the silence timed out)
            try:
                after.append(mine.call("session::append", {"session_id": sid, "entry_id": "a0",
                                                           "message": text("a0")})["entry_id"])
                return True
            except session_manager.SessionError as e:
                assert e.code == "session/storage"
                return False

        assert wait_for(first_after, timeout=60)
        after += [mine.call("session::append", {"session_id": sid, "message": text(f"a{i}")})["entry_id"]
                  for i in (1, 2)]
        path = check_linear(other, sid)
        assert path[-3:] == after and len(path) == 4 + (at == "held off") + 1 + 3
        _rule_ok(schema, sid, len(path))
    finally:
        relay.silence(False)
        mine.close()
        other.close()
