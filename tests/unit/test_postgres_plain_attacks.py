"""Attacks on the warm unobserved append as plain statements (store/postgres/plain.py):
writers in several instances and processes on one session, some on the plain path and
some on ``sm_append_at``, while observers register and leave, sessions are deleted,
entry ids are replayed, metas change, and the connection is cut after the pipeline's
Sync. Each test checks the contract of outbox.py, "Who is owed events", on read-back."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._wire import events as ev
from tests import pg_support
from tests.pg_relay import PLAIN_APPEND, Relay
from tests.pg_support import text
from tests.unit.test_postgres_instances import check_linear, open_sm, wait_for

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]


def _server(query: str, params: Any = None) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description is not None else []


class _Child:
    """tests/pg_observer_child.py: an instance in its own process (observing or not, appending or not)."""

    def __init__(self, schema: str, **options: Any) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.pg_observer_child", schema, json.dumps(options)],
                                     cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        assert self.wait(lambda: "ready" in self.lines), self._err()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.strip())
                self._cond.notify_all()

    def _err(self) -> str:
        return f"child: {self.lines[-5:]}"

    def wait(self, predicate: Any, timeout: float = 60.0) -> bool:
        end = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = end - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    return bool(predicate())
                self._cond.wait(min(left, 0.2))
            return True

    def tagged(self, tag: str) -> list[str]:
        with self._cond:
            return [line.split(" ", 1)[1] for line in self.lines if line.startswith(tag + " ")]

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


@pytest.fixture
def plain_wrote(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each plain attempt of this process wrote (True) or left it to sm_append_at."""
    import session_manager.store.postgres.optimistic as opt

    wrote: list[bool] = []
    apply_plain = opt.Optimistic._apply_plain

    def spy(self: Any, *a: Any) -> bool:
        wrote.append(apply_plain(self, *a))
        return wrote[-1]

    monkeypatch.setattr(opt.Optimistic, "_apply_plain", spy)
    return wrote


@pytest.fixture
def cut_sm(schema: str, relay: Relay) -> Iterator[session_manager.SessionManager]:
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    pg_support.require()
    with session_manager.open(store=PostgresStore(PostgresSettings(dsn=relay.dsn(), schema=schema,
                                                                   pool_size=1))) as opened:
        yield opened


@pytest.mark.parametrize("when", ["after", "before"])
def test_a_plain_append_whose_pipeline_is_cut_at_its_sync_is_settled_once(
        schema: str, cut_sm: session_manager.SessionManager, relay: Relay, plain_wrote: list[bool],
        when: str) -> None:
    # Prevents: a plain append whose answer was lost (the connection cut once the pipeline and
    # its Sync reached the server: it committed; or before: it did not) answered as a failure,
    # applied a second time through sm_append_at (two copies, a fork, a count off by one), or
    # never applied.
    sm = cut_sm
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    ids = [sm.call("session::append", {"session_id": sid, "message": text(f"w{i}")})["entry_id"]
           for i in range(8)]
    assert plain_wrote[-1] is True  # (warm: the plain path)
    relay.cut_at_commit(when, on=(PLAIN_APPEND,))
    got = sm.call("session::append", {"session_id": sid, "entry_id": "cut", "message": text("cut")})
    assert relay.cuts == 1
    assert got["entry_id"] == "cut" and got["parent_id"] == ids[-1]
    after = sm.call("session::append", {"session_id": sid, "message": text("after")})
    assert after["parent_id"] == "cut"
    path = check_linear(sm, sid)
    assert path == [*ids, "cut", after["entry_id"]]
    assert _server(f'SELECT count(*) FROM "{schema}".entries WHERE session_id = %s AND entry_id = %s',
                   (sid, "cut")) == [(1,)]
    assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 10


def test_plain_writers_in_processes_while_observers_register_and_leave(
        schema: str, plain_wrote: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a plain append (no outbox row, no NOTIFY) committed after an observer's
    # registration (in another process), or one delivered twice or out of its session's
    # commit order, while two non-listening processes and an instance of this one append on
    # the plain path (each to a session of its own: uncontended, so the plain path is the one
    # taken) and observers come and go (each arrival switching every writer to sm_append_at
    # mid-stream; this one's back on the plain path before the next arrives).
    import session_manager.store.postgres.plain as plain

    monkeypatch.setattr(plain, "OBSERVED_S", 0.2)
    sm, local = open_sm(schema), open_sm(schema)
    writers: list[_Child] = []
    stop = threading.Event()
    local_acks: list[str] = []
    failures: list[BaseException] = []

    def write_locally(sid: str) -> None:
        i = 0
        try:
            while not stop.is_set():
                local.call("session::append", {"session_id": sid, "entry_id": f"t-{i}", "message": text(f"t-{i}")})
                local_acks.append(f"t-{i}")
                i += 1
        except BaseException as e:
            failures.append(e)

    sids = [sm.call("session::create", {"title": f"s{k}"})["session_id"] for k in range(3)]
    thread = threading.Thread(target=write_locally, args=(sids[2],))
    try:
        writers = [_Child(schema, observe=False, append=sids[k], tag=f"p{k}") for k in range(2)]
        thread.start()
        for round_ in range(3):
            for w in writers:  # (some plain appends before each observer arrives)
                n = len(w.tagged("ack"))
                assert w.wait(lambda w=w, n=n: len(w.tagged("ack")) >= n + 5), w._err()
            mark = len(plain_wrote)
            assert wait_for(lambda mark=mark: True in plain_wrote[mark:]), "never back on the plain path"
            watcher = open_sm(schema)
            seen: list[tuple[str, str]] = []
            lock = threading.Lock()

            def note(e: dict[str, Any], seen: list[tuple[str, str]] = seen, lock: threading.Lock = lock) -> None:
                with lock:
                    seen.append((e["session_id"], e["entry_id"]))

            try:
                watcher.observe({"function_id": ev.ON_MESSAGE_ADDED}, note)
                watcher.service.store.events_ready()  # registered
                # Every entry not yet in its session now commits after the registration.
                before = {sid: len(sm.service.store.entries(sid)) for sid in sids}
                for w in writers:
                    n = len(w.tagged("ack"))
                    assert w.wait(lambda w=w, n=n: len(w.tagged("ack")) >= n + 10), w._err()
                n = len(local_acks)
                assert wait_for(lambda n=n: len(local_acks) >= n + 10)
                owed = {(sid, e["id"]) for sid in sids for e in sm.service.store.entries(sid)[before[sid]:]}
                assert wait_for(lambda owed=owed, seen=seen: owed <= set(seen), timeout=30), (
                    round_, sorted(owed - set(seen))[:5])
            finally:
                watcher.close()
            with lock:
                got = list(seen)
            assert len(got) == len(set(got)), ("delivered twice", Counter(got).most_common(3))
            for sid in sids:
                mine = [e for s, e in got if s == sid]
                final = [e["id"] for e in sm.service.store.entries(sid)]  # (in commit order; writers still run)
                start = final.index(mine[0])
                assert mine == final[start:start + len(mine)], ("a gap or the wrong order", round_, sid)
                assert start <= before[sid]
        stop.set()
        thread.join(60)
        assert not failures, failures
        for w in writers:
            w.stop()
        assert True in plain_wrote
        assert len(check_linear(sm, sids[2])) == len(local_acks)
        for k, w in enumerate(writers):
            acked = w.tagged("ack")
            assert check_linear(sm, sids[k]) == acked
            assert sm.call("session::get", {"session_id": sids[k]})["meta"]["message_count"] == len(acked)
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(60)
        for w in writers:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
        local.close()
        sm.close()

def test_an_entry_id_replayed_by_three_instances_at_once_is_stored_once(schema: str, plain_wrote: list[bool]) -> None:
    # Prevents: a replay racing the original (other instances, all warm on the plain path)
    # storing a second copy, answering a different parent than the stored entry's, or
    # surfacing the plain INSERT's unique violation as an error.
    sms = [open_sm(schema) for _ in range(3)]
    try:
        sid = sms[0].call("session::create", {"title": "t"})["session_id"]
        for k, s in enumerate(sms):  # each instance warm (knows the session)
            for i in range(3):
                s.call("session::append", {"session_id": sid, "message": text(f"warm{k}{i}")})
        n = 25
        answers: list[list[dict[str, Any]]] = [[] for _ in sms]
        failures: list[BaseException] = []
        start = threading.Barrier(len(sms))

        def run(k: int) -> None:
            try:
                start.wait()
                for i in range(n):
                    answers[k].append(sms[k].call("session::append", {"session_id": sid, "entry_id": f"r{i}",
                                                                     "message": text(f"r{i}")}))
            except BaseException as e:
                failures.append(e)

        threads = [threading.Thread(target=run, args=(k,)) for k in range(len(sms))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not failures, failures
        stored = {e["id"]: e for e in sms[0].service.store.entries(sid)}
        for i in range(n):
            mine = [a[i] for a in answers]
            assert all(m["entry_id"] == f"r{i}" for m in mine)
            assert {m["parent_id"] for m in mine} == {stored[f"r{i}"]["parent_id"]}, (i, mine)
        path = check_linear(sms[0], sid)
        assert len(path) == 9 + n
        assert sms[0].call("session::get", {"session_id": sid})["meta"]["message_count"] == 9 + n
        assert True in plain_wrote
    finally:
        for s in sms:
            s.close()


def test_a_delete_racing_plain_appends_never_resurrects_the_session(schema: str, plain_wrote: list[bool]) -> None:
    # Prevents: a plain append racing session::delete (another instance) writing its entry
    # (or the session row) after the delete: an orphan entry, a session back from the dead.
    writer, deleter = open_sm(schema), open_sm(schema)
    try:
        for round_ in range(6):
            sid = writer.call("session::create", {"title": "t"})["session_id"]
            for i in range(6):
                writer.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
            deleter.call("session::get", {"session_id": sid})
            stop = threading.Event()
            outcomes: list[str] = []

            def append(sid: str = sid, outcomes: list[str] = outcomes, stop: threading.Event = stop) -> None:
                i = 0
                while not stop.is_set():
                    try:
                        writer.call("session::append", {"session_id": sid, "message": text(f"x{i}")})
                        outcomes.append("ok")
                    except session_manager.SessionError as e:
                        outcomes.append(type(e).__name__ + ":" + str(getattr(e, "code", "")))
                        if outcomes[-5:] == [outcomes[-1]] * 5:
                            return
                    i += 1

            t = threading.Thread(target=append)
            t.start()
            time.sleep(0.05 * (round_ % 3))
            deleter.call("session::delete", {"session_id": sid})
            time.sleep(0.1)
            stop.set()
            t.join(60)
            assert not t.is_alive()
            assert _server(f'SELECT count(*) FROM "{schema}".entries WHERE session_id = %s', (sid,)) == [(0,)], (
                round_, outcomes[-5:])
            assert _server(f'SELECT count(*) FROM "{schema}".sessions WHERE session_id = %s', (sid,)) == [(0,)]
            assert writer.call("session::get", {"session_id": sid}) is None
            assert outcomes[-1].endswith("not_found"), outcomes[-5:]
        assert True in plain_wrote
    finally:
        writer.close()
        deleter.close()


def test_set_meta_racing_plain_appends_keeps_both(schema: str, plain_wrote: list[bool]) -> None:
    # Prevents: the plain compare-and-set writing a stale meta text over another instance's
    # set-meta (a lost title) or a count off by one when both race.
    writer, renamer = open_sm(schema), open_sm(schema)
    try:
        sid = writer.call("session::create", {"title": "t"})["session_id"]
        for i in range(6):
            writer.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
        failures: list[BaseException] = []

        def rename() -> None:
            try:
                for i in range(40):
                    renamer.call("session::set-meta", {"session_id": sid, "title": f"title-{i}"})
            except BaseException as e:
                failures.append(e)

        t = threading.Thread(target=rename)
        t.start()
        n = 0
        while t.is_alive() or n < 30:
            writer.call("session::append", {"session_id": sid, "message": text(f"a{n}")})
            n += 1
        t.join()
        assert not failures, failures
        meta = writer.call("session::get", {"session_id": sid})["meta"]
        assert meta["title"] == "title-39"
        assert meta["message_count"] == 6 + n
        assert len(check_linear(writer, sid)) == 6 + n
        assert True in plain_wrote
    finally:
        writer.close()
        renamer.close()


def test_a_plain_append_waiting_on_the_session_lock_meets_its_deadline_and_never_lands_later(
        schema: str, plain_wrote: list[bool]) -> None:
    # Prevents: the plain pipeline waiting forever on the session's advisory lock (no deadline),
    # or, cut at its deadline, committing later anyway (the caller told it failed).
    import psycopg

    sm = open_sm(schema, timeout_ms=1500)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        for i in range(6):
            sm.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
        assert plain_wrote[-1] is True
        with psycopg.connect(pg_support.DSN, autocommit=True) as holder:
            holder.execute(f'SET search_path TO "{schema}"')
            holder.execute("BEGIN")
            holder.execute("SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ':' || %s, 0))",
                           (sid,))
            outcome: Any
            try:
                outcome = sm.call("session::append", {"session_id": sid, "entry_id": "late",
                                                      "message": text("late")})
            except session_manager.SessionError as e:
                outcome = e
            holder.execute("COMMIT")
        time.sleep(0.5)
        landed = _server(f'SELECT count(*) FROM "{schema}".entries WHERE session_id = %s AND entry_id = %s',
                         (sid, "late"))[0][0]
        if not isinstance(outcome, Exception):
            assert landed == 1
        elif "may have landed" not in str(outcome):  # (in doubt: its backend was still at work)
            assert landed == 0, outcome
        assert len(check_linear(sm, sid)) == 6 + landed
    finally:
        sm.close()


def test_a_replay_whose_plain_answer_was_lost_answers_the_stored_original(
        schema: str, cut_sm: session_manager.SessionManager, relay: Relay, plain_wrote: list[bool]) -> None:
    # Prevents: a retried append (its entry id stored meanwhile by another instance, on top of
    # an entry this one never saw) whose plain pipeline wrote nothing (the compare-and-set
    # missed) and whose answer was lost, settled as "landed" because the id exists: answered
    # with the parent and count this instance assumed, not the stored original's.
    sm = cut_sm
    other = open_sm(schema)
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        for i in range(8):
            sm.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
        assert plain_wrote[-1] is True
        theirs = other.call("session::append", {"session_id": sid, "message": text("theirs")})["entry_id"]
        original = other.call("session::append", {"session_id": sid, "entry_id": "dup", "message": text("dup")})
        assert original["parent_id"] == theirs
        relay.cut_at_commit("after", on=(PLAIN_APPEND,))
        again = sm.call("session::append", {"session_id": sid, "entry_id": "dup", "message": text("dup")})
        assert relay.cuts == 1
        assert again == original
        assert len(check_linear(sm, sid)) == 10
        assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 10
    finally:
        other.close()


def test_a_read_only_observer_in_another_process_gets_every_plain_append_after_it_registered(
        schema: str, plain_wrote: list[bool]) -> None:
    # Prevents: the plain statement missing a read-only observer (it has no observers row,
    # only its advisory lock) and writing appends it is owed with no outbox row.
    sm = open_sm(schema)
    child: _Child | None = None
    try:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        for i in range(6):
            sm.call("session::append", {"session_id": sid, "message": text(f"w{i}")})
        assert plain_wrote[-1] is True
        child = _Child(schema, read_only=True)  # ready: registered
        loud = [sm.call("session::append", {"session_id": sid, "message": text(f"l{i}")})["entry_id"]
                for i in range(10)]
        assert child.wait(lambda: len(child.tagged("seen")) >= 10, timeout=30), child.tagged("seen")
        time.sleep(0.2)
        assert child.tagged("seen") == loud
        assert len(check_linear(sm, sid)) == 16
    finally:
        if child is not None:
            child.stop()
        sm.close()


def test_plain_appends_under_generic_plans_link_as_the_procedure_does(
        schema: str, plain_wrote: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the plain statement's generic plan (every run of it on a connection forced
    # generic, from the first: a session's first entry, a NULL parent, included) writing
    # another depth or jump pointer than sm_append_at, or another parent.
    import psycopg

    import session_manager.store.postgres.optimistic as opt
    from tests.unit.test_postgres_plain import _links, _same_shape

    own = str(psycopg.conninfo.conninfo_to_dict(pg_support.DSN).get("options") or "")
    dsn = psycopg.conninfo.make_conninfo(pg_support.DSN, options=f"{own} -c plan_cache_mode=force_generic_plan")
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    sm = session_manager.open(store=PostgresStore(PostgresSettings(dsn=dsn, schema=schema, pool_size=1)))
    try:
        sids = [sm.call("session::create", {"title": f"g{k}"})["session_id"] for k in range(2)]
        for i in range(37):  # interleaved: each statement's plan serves both sessions
            for sid in sids:
                sm.call("session::append", {"session_id": sid, "message": text(f"{sid}-{i}")})
        assert plain_wrote.count(True) >= 70
        monkeypatch.setattr(opt, "PLAIN", False)
        ref = sm.call("session::create", {"title": "ref"})["session_id"]
        for i in range(37):
            sm.call("session::append", {"session_id": ref, "message": text(str(i))})
        want = _links(schema, ref)
        for sid in sids:
            got = _links(schema, sid)
            assert _same_shape(got, want)
            assert [r[1] for r in got] == [None, *[r[0] for r in got[:-1]]]
            assert len(check_linear(sm, sid)) == 37
    finally:
        sm.close()
