"""Appends record their events only while some instance observes (issue 24, schema version 9).

An unobserved append (``sm_append_at``) is one transaction with no outbox row, no
NOTIFY and no lock left behind; an observer registers (a row in ``observers``, or a
read-only listener's lock) behind a gate every such append holds from its check to its
commit, so it is owed, and gets once, a session's in commit order, exactly the appends
that commit after its registration: per session, a suffix of the chain.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import session_manager
from session_manager._wire import events as ev
from session_manager.store.postgres.outbox import channel_of
from tests import pg_support
from tests.pg_support import text
from tests.unit.test_postgres_instances import check_linear, open_sm, wait_for

pytestmark = pytest.mark.postgres


def _server(query: str, params: Any = None) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description is not None else []


def _rows(schema: str, function_id: str = ev.ON_MESSAGE_ADDED) -> list[str]:
    return [r[0] for r in _server(f'SELECT payload FROM "{schema}".outbox WHERE function_id = %s ORDER BY id',
                                  (function_id,))]


def _observers(schema: str) -> list[str]:
    return [r[0] for r in _server(f'SELECT instance FROM "{schema}".observers WHERE expires > now()')]


def _advisory_locks(schema: str) -> int:
    return int(_server("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity s ON s.pid = l.pid"
                       " WHERE l.locktype = 'advisory' AND s.application_name = %s",
                       (f"session-manager:{schema}"[:63],))[0][0])


def test_an_unobserved_append_records_and_notifies_nothing_and_an_observed_one_does(schema: str) -> None:
    # Prevents: every append paying for an outbox row, a NOTIFY and a second transaction when
    # no instance observes; or an observed deployment's appends no longer recording their events.
    import psycopg
    from psycopg import sql

    writer, watcher = open_sm(schema), open_sm(schema)
    try:
        sid = writer.call("session::create", {"title": "t"})["session_id"]
        with psycopg.connect(pg_support.DSN, autocommit=True) as raw:
            raw.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel_of(schema))))
            quiet = [writer.call("session::append", {"session_id": sid, "message": text(f"q{i}")})["entry_id"]
                     for i in range(3)]
            assert [n.payload for n in raw.notifies(timeout=0.5, stop_after=1)] == []
            assert _rows(schema) == [] and _observers(schema) == []
            assert _advisory_locks(schema) == 0
            seen: list[str] = []
            watcher.observe({"function_id": ev.ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
            watcher.service.store.events_ready()
            assert _observers(schema) == [watcher.service.store.db.instance]
            loud = [writer.call("session::append", {"session_id": sid, "message": text(f"l{i}")})["entry_id"]
                    for i in range(3)]
            assert wait_for(lambda: seen == loud)
            assert [n.payload.partition("|")[0] for n in raw.notifies(timeout=2, stop_after=3)] == \
                [writer.service.store.outbox.unheard] * 3  # (the writer's, nobody's there: see Outbox.begin_call)
            assert len(_rows(schema)) == 3 and all(eid in r for eid, r in zip(loud, _rows(schema), strict=True))
        assert check_linear(writer, sid) == quiet + loud
        assert _advisory_locks(schema) == 0
        watcher.close()  # its row goes with its listener: appends record nothing again
        assert _observers(schema) == []
        writer.call("session::append", {"session_id": sid, "message": text("after")})
        assert len(_rows(schema)) == 3
        time.sleep(0.2)
        assert seen == loud
    finally:
        writer.close()
        watcher.close()


def test_a_dead_observers_row_counts_until_it_expires(schema: str) -> None:
    # Prevents: a killed process's registration pinning every later append to record (and
    # notify) for ever, or an unexpired one being ignored (its listener, reconnecting within
    # the retention, replays what it missed from these rows).
    writer = open_sm(schema)
    try:
        sid = writer.call("session::create", {"title": "t"})["session_id"]
        _server(f'INSERT INTO "{schema}".observers VALUES (%s, now() + interval \'1 second\')', ("killed",))
        first = writer.call("session::append", {"session_id": sid, "message": text("a")})["entry_id"]
        assert len(_rows(schema)) == 1 and first in _rows(schema)[0]
        assert wait_for(lambda: _observers(schema) == [], timeout=5)
        writer.call("session::append", {"session_id": sid, "message": text("b")})
        assert len(_rows(schema)) == 1
        assert len(check_linear(writer, sid)) == 2
    finally:
        writer.close()


def owed_suffix(path: list[str], started: dict[str, float], ready: float) -> list[str]:
    """What an observer listening (registration committed) at ``ready`` is owed of a session
    whose chain is ``path`` (commit order): from the first entry sent after ``ready`` on, every
    one, including those sent before ``ready`` that committed after it (an append sent earlier
    may commit later: a writer held up, or retrying a conflict). The entries sent after ``ready``
    alone are no suffix of the chain then."""
    first = next((i for i, eid in enumerate(path) if started[eid] > ready), len(path))
    return path[first:]


def test_owed_suffix_counts_an_append_sent_before_the_registration_that_committed_after_a_later_one() -> None:
    # Prevents: the concurrent test below expecting the appends sent after the registration to be
    # the chain's tail (it failed under load with nothing missing: "(61, 63, [])"), when an append
    # sent just before commits after one sent just after. Its order as seen in such a failure.
    path = ["w2-61", "w0-63", "w0-64", "w2-62", "w0-65"]
    started = {"w2-61": 1.0, "w0-63": 2.0, "w2-62": 2.5, "w0-64": 3.5, "w0-65": 4.0}
    assert owed_suffix(path, started, ready=3.0) == ["w0-64", "w2-62", "w0-65"]
    assert owed_suffix(path, started, ready=0.0) == path
    assert owed_suffix(path, started, ready=5.0) == []


@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
def test_an_observer_registering_amid_concurrent_appends_gets_each_later_one_once_in_order(
        schema: str, read_only: bool) -> None:
    # Prevents: an append that checked for observers just before one registered committing
    # after it unrecorded (a gap in the observer's stream), an event twice, or a session's
    # events out of commit order, with four writer instances appending to two sessions at once.
    writers = [open_sm(schema) for _ in range(4)]
    sids = [writers[0].call("session::create", {"title": f"s{k}"})["session_id"] for k in range(2)]
    stop = threading.Event()
    started: dict[str, float] = {}  # entry id -> when its append was sent
    errors: list[BaseException] = []
    lock = threading.Lock()

    def write(sm: session_manager.SessionManager, sid: str, tag: str) -> None:
        i = 0
        try:
            while not stop.is_set():
                eid = f"{tag}-{i}"
                i += 1
                with lock:
                    started[eid] = time.monotonic()
                sm.call("session::append", {"session_id": sid, "entry_id": eid, "message": text(eid)})
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(sm, sids[k % 2], f"w{k}")) for k, sm in enumerate(writers)]
    observers: list[session_manager.SessionManager] = []
    try:
        for t in threads:
            t.start()
        rounds: list[tuple[dict[str, list[str]], float]] = []
        for _ in range(3):  # three registrations, each amid the appends
            time.sleep(0.3)
            seen: dict[str, list[str]] = {sid: [] for sid in sids}
            watcher = open_sm(schema, read_only=read_only)
            observers.append(watcher)
            watcher.observe({"function_id": ev.ON_MESSAGE_ADDED},
                            lambda e, seen=seen: seen[e["session_id"]].append(e["entry_id"]))
            watcher.service.store.events_ready()
            # (events_ready's wait is bounded: on a loaded machine the registration may come later)
            assert wait_for(lambda watcher=watcher: watcher.service.store.outbox.listening)
            rounds.append((seen, time.monotonic()))
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(timeout=60)
        assert errors == []
        paths = {sid: check_linear(writers[0], sid) for sid in sids}
        for seen, ready in rounds:
            for sid in sids:
                path = paths[sid]
                owed = owed_suffix(path, started, ready)
                assert owed, "no append after the registration: the test proves nothing"
                assert wait_for(lambda seen=seen, sid=sid, owed=owed: seen[sid][-len(owed):] == owed), \
                    (len(owed), len(seen[sid]), [e for e in owed if e not in seen[sid]][:5])
                got = seen[sid]
                # Exactly a suffix of the chain: nothing missed after the first one delivered,
                # nothing twice, in commit order.
                assert got == path[len(path) - len(got):], (len(got), len(path))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        for sm in [*observers, *writers]:
            sm.close()


def test_a_listener_whose_registration_lapsed_registers_again_and_resyncs(schema: str) -> None:
    # Prevents: a listener whose row expired (or was pruned) while it was held up going on
    # as if appends had recorded its events meanwhile (a silent gap): it registers again and
    # resyncs (duplicates allowed, as after any resync), and later appends reach it.
    writer = open_sm(schema)
    watcher = open_sm(schema, outbox_retention_s=2.0)  # renewed every 0.5 s
    try:
        created: list[str] = []
        added: list[str] = []
        watcher.observe({"function_id": ev.ON_CREATED}, lambda e: created.append(e["session_id"]))
        watcher.observe({"function_id": ev.ON_MESSAGE_ADDED}, lambda e: added.append(e["entry_id"]))
        watcher.service.store.events_ready()
        sid = writer.call("session::create", {"title": "t"})["session_id"]
        assert wait_for(lambda: created == [sid])
        instance = watcher.service.store.db.instance
        _server(f'DELETE FROM "{schema}".observers')  # as if it had expired unrenewed
        quiet = writer.call("session::append", {"session_id": sid, "message": text("unrecorded")})["entry_id"]
        assert _rows(schema) == []
        # The next renewal finds no row: registered again, then every session re-announced.
        assert wait_for(lambda: created.count(sid) >= 2, timeout=10)
        assert _observers(schema) == [instance]
        loud = writer.call("session::append", {"session_id": sid, "message": text("recorded")})["entry_id"]
        assert wait_for(lambda: loud in added)
        assert quiet in added  # (told by the resync: the gap is covered)
        assert added.count(loud) == 1 and added.index(quiet) < added.index(loud)
    finally:
        writer.close()
        watcher.close()


@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
def test_an_append_committed_between_the_registration_and_the_listener_starting_is_delivered(
        schema: str, read_only: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the listener's first snapshot (what it counts as before its time) taken after its
    # registration committed, so that an append committing in between, recorded for it (it saw
    # the registration), is marked seen and never delivered: a gap in what it is owed.
    # What the store hands its sink is checked, the sink subscribed before the listener starts:
    # an embedded host's observer is added only once events_ready has returned (an event handed
    # on meanwhile, committed while observe() ran, is not its), and the append here lands inside
    # that wait, so checked through watcher.observe the listener's delivery raced the host adding
    # its observer (under load it won 1 run in ~30: ['after'], 'between' dropped by the host).
    from session_manager.store.postgres import outbox as outbox_module

    writer, watcher = open_sm(schema), open_sm(schema, read_only=read_only)
    sid = writer.call("session::create", {"title": "t"})["session_id"]
    between: list[str] = []
    register = outbox_module.Outbox._register

    def register_then_append(self: Any, listen: Any, fetch: Any) -> bool:
        lapsed = register(self, listen, fetch)
        if self is watcher.service.store.outbox and not between:
            between.append(writer.call("session::append", {"session_id": sid, "message": text("between")})["entry_id"])
        return lapsed

    monkeypatch.setattr(outbox_module.Outbox, "_register", register_then_append)
    try:
        seen: list[str] = []
        watcher.service.store.subscribe(
            lambda events: seen.extend(e.payload["entry_id"] for e in events
                                       if e.function_id == ev.ON_MESSAGE_ADDED),
            lambda f: f == ev.ON_MESSAGE_ADDED)
        watcher.service.store.events_ready()
        assert wait_for(lambda: watcher.service.store.outbox.listening) and len(between) == 1
        assert len(_rows(schema)) == 1 and between[0] in _rows(schema)[0]  # (recorded: it saw the registration)
        after = writer.call("session::append", {"session_id": sid, "message": text("after")})["entry_id"]
        assert wait_for(lambda: seen == [*between, after]), seen
        time.sleep(0.2)
        assert seen == [*between, after]
        assert check_linear(writer, sid) == [*between, after]
    finally:
        writer.close()
        watcher.close()


def test_an_own_call_begun_before_the_listener_listened_never_hands_a_later_call_its_turn(
        schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: this instance's listener taking the notification of an own call begun before it
    # listened (noted by no turn) for a later observed call's with the same event functions, so
    # that the later call delivered its events ahead of another instance's commit made between
    # the two (the come-and-go race, forced here): an own notification names its call exactly.
    # And the early call's events, handed to nobody as it began, missing for the observer added
    # before it committed.
    from session_manager.store.postgres import outbox as outbox_module

    pg_support.require()
    monkeypatch.setattr(outbox_module, "TURN_WAIT_S", 3600.0)  # the listener waits on a call: it never times out
    a, b = open_sm(schema), open_sm(schema)
    try:
        sid = a.call("session::create", {})["session_id"]
        a.call("session::append", {"session_id": sid, "message": text("w"), "entry_id": "w"})  # (warm)
        store = a.service.store
        held: dict[str, threading.Event] = {}
        run_outer = store.optimistic.run_outer  # (run_and_deliver's way in, once it noted the call or not)

        def holding(call: Any, state: Any) -> Any:  # a call held after it was noted (or not), before it sends anything
            gate = held.get(threading.current_thread().name)
            if gate is not None:
                assert gate.wait(60)
            return run_outer(call, state)

        monkeypatch.setattr(store.optimistic, "run_outer", holding)

        def append(entry_id: str) -> threading.Thread:
            held[entry_id] = threading.Event()
            t = threading.Thread(target=a.call, name=entry_id, daemon=True, args=(
                "session::append", {"session_id": sid, "message": text(entry_id), "entry_id": entry_id}))
            t.start()
            return t

        unnoted = append("unnoted")  # begun while nothing listens in this instance: noted by no turn
        assert wait_for(lambda: store.outbox._thread is None and unnoted.is_alive())
        seen: list[str] = []
        a.observe({"function_id": ev.ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
        assert store.outbox.listening
        noted = append("noted")  # noted (observed), held before it sends anything
        time.sleep(0.2)
        held["unnoted"].set()  # it commits now: its notification comes first
        unnoted.join(60)
        assert not unnoted.is_alive()
        b.call("session::append", {"session_id": sid, "message": text("theirs"), "entry_id": "theirs"})
        held["noted"].set()  # committed after theirs
        noted.join(60)
        assert not noted.is_alive()
        assert check_linear(a, sid) == ["w", "unnoted", "theirs", "noted"]
        assert wait_for(lambda: "theirs" in seen and "noted" in seen)
        time.sleep(0.2)  # (no duplicate may follow: a short grace for one to show)
        # Unnoted too (it committed after the observer registered: owed), by the listener, at its place.
        assert seen == ["unnoted", "theirs", "noted"]
    finally:
        b.close()
        a.close()
