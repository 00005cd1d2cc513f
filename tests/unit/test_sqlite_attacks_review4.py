"""Attacks on the sqlite adapter's own-append memo (review 4, issue 23) under real concurrency.

An append that follows its connection's own append to the same session takes what that
commit left (meta, leaf and its links, list key, outbox position) instead of reading the
session row, while ``PRAGMA data_version`` (read in the write transaction) says no other
connection committed since (writes.py stages it, core.py keeps it at the COMMIT, reads.py
takes it). Each test below mixes memo hits with what must end them (another process's or
thread's commit, this connection's writes of every other kind, a rollback, a failed COMMIT,
a refused append, a delete and recreate, a durability reload, a follower coming and going,
SIGKILL) and checks the whole contract on read-back: one chain holding every acknowledged
append once, in each writer's order, with links (depth, jump pointer) as the skew-binary rule
gives them, exact counts, compare-and-set revisions, and events once each in commit order.
No timing is asserted: waits are bounded correctness waits.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.store.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parents[2]

# A child process: THREADS threads over one store (each its own connection, so its own memo),
# each making ROUNDS rounds of a burst of appends to the shared session (memo hits) and one
# write of another kind picked at random (what must end the memo). Every acknowledged entry
# of the shared session is printed, in its thread's order, as JSON lines.
CHILD = r'''
import json, random, sys, threading
import session_manager
from session_manager import SessionError

uri, sid, prefix = sys.argv[1:4]
rounds, seed, threads = map(int, sys.argv[4:7])
out_lock = threading.Lock()


def say(**kw):
    with out_lock:
        print(json.dumps(kw), flush=True)


def user(text):
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def chain(sm, session):
    store = sm.service.store
    return [e["id"] for e in store.path(session, store.get_leaf(session))]


def run(sm, t):
    rng = random.Random(seed * 100 + t)
    pfx = f"{prefix}t{t}"
    own = f"{pfx}-own"
    sm.ensure(own)
    own_ids = []
    mine = []
    n = 0
    store = sm.service.store
    for r in range(rounds):
        for _ in range(rng.randint(1, 6)):
            eid = f"{pfx}-{n}"
            n += 1
            got = sm.append(sid, message=user(eid), entry_id=eid)
            assert got.entry_id == eid
            mine.append(eid)
            say(a=eid)
        op = rng.choice(["update", "meta", "fork", "many", "replay", "refused", "other", "durability", "recreate"])
        if op == "update":  # only this thread revises its entries: the compare-and-set must hold
            res = sm.call("session::update-message", {"session_id": sid, "entry_id": mine[-1],
                          "content": [{"type": "text", "text": mine[-1] + "!"}], "expected_revision": 0})
            assert res == {"updated": True, "revision": 1}, res
            stale = sm.call("session::update-message", {"session_id": sid, "entry_id": mine[-1],
                            "content": [{"type": "text", "text": "stale"}], "expected_revision": 0})
            assert stale == {"updated": False, "revision": 1}, stale
            say(u=mine[-1])
        elif op == "meta":
            sm.set_meta(sid, title=f"{pfx} round {r}")
        elif op == "fork":
            fork = sm.fork(sid, entry_id=mine[-1]).session_id
            assert sm.get(fork).meta.message_count == len(chain(sm, fork))
        elif op == "many":
            ids = sm.call("session::append-many", {"session_id": sid, "messages": [user("x"), user("y")]})["entry_ids"]
            mine += ids
            for eid in ids:
                say(a=eid)
        elif op == "replay":  # nothing written: the memo of the last append stays true or is dropped
            first = mine[0]
            assert sm.append(sid, message=user("replayed"), entry_id=first).entry_id == first
        elif op == "refused":
            try:
                sm.append(sid, message=user("refused"), parent_id="e_nope")
            except SessionError:
                pass
            else:
                raise AssertionError("an append naming no such parent was taken")
        elif op == "other":
            own_ids.append(sm.append(own, message=user("own")).entry_id)
        elif op == "durability":
            store.durability = "fsync" if store.durability == "flush" else "flush"
        elif op == "recreate":
            sm.delete(own)
            sm.ensure(own)
            own_ids = [sm.append(own, message=user("again")).entry_id for _ in range(2)]
    assert chain(sm, own) == own_ids
    assert sm.get(own).meta.message_count == len(own_ids)
    say(done=pfx, order=mine)


with session_manager.open(uri) as sm:
    failed = []
    def guard(t):
        try:
            run(sm, t)
        except BaseException as e:
            failed.append(repr(e))
            raise
    workers = [threading.Thread(target=guard, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if failed:
        sys.exit("failed: " + "; ".join(failed))
'''


def _child(*args: str, stdin: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stdin=subprocess.PIPE if stdin else None,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def user(text: str) -> Any:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def _expected_links(path: list[str]) -> dict[str, tuple[int, str, int]]:
    """Each entry's (depth, jump_id, jump_depth) along one chain, by writes.link's rule."""
    links: dict[str, tuple[int, str, int]] = {}
    for i, eid in enumerate(path):
        if i == 0:
            links[eid] = (0, eid, 0)
            continue
        parent = path[i - 1]
        p_depth, p_jump, p_jump_depth = links[parent]
        j = links[p_jump]
        if p_jump != parent and p_depth - p_jump_depth == p_jump_depth - j[2]:
            links[eid] = (p_depth + 1, j[1], j[2])
        else:
            links[eid] = (p_depth + 1, parent, p_depth)
    return links


def run_threads(work: Callable[[int], None], n: int) -> None:
    """``work(0)`` .. ``work(n - 1)`` on threads of their own, each joined (bounded: a hang fails)."""
    threads = [threading.Thread(target=work, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
        assert not th.is_alive(), "a thread hung"


def read_back(file: Path, sid: str) -> list[str]:
    """The session's active path, checked whole: every stored entry on it once, the count exact,
    each entry's links as the rule gives them (a memo carrying a wrong parent or jump shows here),
    and the file sound. Read by a store of its own and by plain SQL."""
    with session_manager.open(f"sqlite:///{file}") as sm:
        store = sm.service.store
        assert isinstance(store, SqliteStore)
        path = [e["id"] for e in store.path(sid, store.get_leaf(sid))]
        got = sm.get(sid)
        assert got is not None
        assert len(path) == len(set(path)) == len(store.entries(sid)) == got.meta.message_count
        assert store.integrity_check() == []
    conn = sqlite3.connect(file)
    try:
        rows = conn.execute("SELECT e.entry_id, e.depth, e.jump_id, e.jump_depth, e.parent_id FROM entries e"
                            " JOIN sessions s ON s.sk = e.sk WHERE s.session_id = ?", (sid,)).fetchall()
    finally:
        conn.close()
    stored = {r[0]: (r[1], r[2], r[3]) for r in rows}
    parents = {r[0]: r[4] for r in rows}
    assert stored == _expected_links(path)
    assert [parents[e] for e in path] == [None, *path[:-1]]
    return path


def _collect(proc: subprocess.Popen[str]) -> tuple[list[str], dict[str, list[str]], list[str]]:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-2000:]
    acked: list[str] = []
    orders: dict[str, list[str]] = {}
    updated: list[str] = []
    for line in out.splitlines():
        rec = json.loads(line)
        if "a" in rec:
            acked.append(rec["a"])
        elif "u" in rec:
            updated.append(rec["u"])
        elif "done" in rec:
            orders[rec["done"]] = rec["order"]
    return acked, orders, updated


def test_processes_and_threads_bursting_appends_between_writes_of_every_kind_form_one_chain(tmp_path: Path) -> None:
    """Prevents: an append taking its connection's memo after anything the memo does not cover
    (another process's or another thread's commit, this connection's update-message, set-meta,
    fork, append-many, append to another session, delete and recreate, a refused append, an
    idempotent replay, a durability reload), which would parent it on a stale leaf (a fork
    nobody asked for), carry a stale count or meta, or write wrong links; and the update
    compare-and-set or the idempotent replay going wrong next to memo hits."""
    file = tmp_path / "mix.db"
    uri = f"sqlite:///{file}"
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id
    procs = [_child(uri, sid, f"p{n}", "40", str(n), "2") for n in range(3)]
    acked: list[str] = []
    orders: dict[str, list[str]] = {}
    updated: list[str] = []
    for p in procs:
        a, o, u = _collect(p)
        acked += a
        orders.update(o)
        updated += u
    assert len(orders) == 6
    path = read_back(file, sid)
    assert sorted(path) == sorted(acked)
    for order in orders.values():  # each thread's appends keep its order along the one chain
        mine = set(order)
        assert [e for e in path if e in mine] == order
    with session_manager.open(uri) as sm:
        for eid in updated:  # each revised once, the stale second revision refused
            entry = sm.service.store.get_entry(sid, eid)
            assert entry is not None
            assert entry["revision"] == 1 and entry["message"]["content"][0]["text"] == eid + "!"


def _ours(store: SqliteStore, run: Any) -> str:
    """How the append ``run`` makes found the session: "read" (its row read) or "memo"."""
    seen: list[str] = []
    conn = store.db.conn()
    conn.set_trace_callback(seen.append)
    try:
        run()
    finally:
        conn.set_trace_callback(None)
    return "read" if any(s.startswith("SELECT s.meta, s.leaf, p.depth") for s in seen) else "memo"


def test_a_commit_refused_or_failed_after_the_memo_was_staged_leaves_no_memo(tmp_path: Path) -> None:
    """Prevents: the memo of an append whose transaction did not commit (its COMMIT refused
    because the file was swapped, its outbox write failing after the entry was written, the
    COMMIT itself failing) kept for the next append, which would then name a rolled-back
    entry as its parent (a chain with a hole) and count it."""
    file = tmp_path / "f.db"
    with session_manager.open(f"sqlite:///{file}") as sm:
        store = sm.service.store
        assert isinstance(store, SqliteStore)
        sid = sm.create().session_id
        for i in range(5):
            sm.append(sid, message=user(f"m{i}"))
        assert _ours(store, lambda: sm.append(sid, message=user("hit"))) == "memo"

        # 1. The COMMIT refused (still_ours): rolled back after write() staged the memo.
        real = store.db.still_ours
        calls = {"n": 0}

        def refuse_once() -> None:
            calls["n"] += 1
            if calls["n"] == 1:
                raise session_manager.errors.StoreError("refused for the test")
            real()

        store.db.still_ours = refuse_once  # type: ignore[method-assign]
        with pytest.raises(session_manager.SessionError):
            sm.append(sid, message=user("refused at commit"), entry_id="gone-1")
        store.db.still_ours = real  # type: ignore[method-assign]
        assert store.get_entry(sid, "gone-1") is None
        assert _ours(store, lambda: sm.append(sid, message=user("after refusal"))) == "read"
        assert _ours(store, lambda: sm.append(sid, message=user("hit again"))) == "memo"

        # 2. The outbox write failing after the entry was written (a store following itself:
        # record runs for every call with events).
        seen: list[str] = []
        observed_from = len(store.entries(sid))
        sm.observe({"function_id": "session::on-message-added"}, lambda e: seen.append(e["entry_id"]))
        for i in range(3):
            sm.append(sid, message=user(f"o{i}"))
        assert _ours(store, lambda: sm.append(sid, message=user("observed hit"))) == "memo"
        record = store.outbox.record

        def fail_record(conn: sqlite3.Connection, events: list[Any]) -> Any:
            raise sqlite3.OperationalError("disk I/O error (test)")

        store.outbox.record = fail_record  # type: ignore[method-assign]
        with pytest.raises(session_manager.SessionError):
            sm.append(sid, message=user("lost in the outbox"), entry_id="gone-2")
        store.outbox.record = record  # type: ignore[method-assign]
        assert store.get_entry(sid, "gone-2") is None
        assert _ours(store, lambda: sm.append(sid, message=user("after outbox failure"))) == "read"

        # 3. The COMMIT statement itself failing (sqlite3 error at COMMIT).
        state = store.db.local.state
        cur = state.cur
        assert cur is not None

        class FailingCommit:
            def __init__(self, inner: sqlite3.Cursor) -> None:
                self.inner = inner

            def execute(self, sql: str, *args: Any) -> Any:
                if sql == "COMMIT":
                    self.inner.execute("ROLLBACK")
                    raise sqlite3.OperationalError("disk I/O error at COMMIT (test)")
                return self.inner.execute(sql, *args)

        assert _ours(store, lambda: sm.append(sid, message=user("hit before commit failure"))) == "memo"
        state.cur = FailingCommit(cur)  # type: ignore[assignment]
        try:
            with pytest.raises(session_manager.SessionError):
                sm.append(sid, message=user("failed commit"), entry_id="gone-3")
        finally:
            state.cur = cur
        assert store.get_entry(sid, "gone-3") is None
        assert _ours(store, lambda: sm.append(sid, message=user("after commit failure"))) == "read"
        for i in range(40):  # past jump pointers' spans, with memo hits
            sm.append(sid, message=user(f"tail{i}"))
        path = read_back(file, sid)
        # Events: every committed append observed once, in commit order; none for the failed ones
        # (a lone store hands its own events on before each call returns).
        assert seen == path[observed_from:]
    assert read_back(file, sid)[-1] == path[-1]


# A writer with its own observer (so it follows the outbox, and its memo carries the outbox
# position its own events are ordered by), driven over stdin: ``a ID`` appends and prints
# ``ok``; ``wait N`` waits (bounded) until it has seen N on-message-added events and prints
# them with how many of its appends took the memo.
OBSERVING_WRITER = r'''
import json, sys, time
import session_manager

uri, sid = sys.argv[1], sys.argv[2]
seen = []
hits = 0
with session_manager.open(uri) as sm:
    store = sm.service.store
    sm.observe({"function_id": "session::on-message-added"}, lambda e: seen.append(e["entry_id"]))
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, arg = line.split()
        if cmd == "a":
            statements = []
            conn = store.db.conn()
            conn.set_trace_callback(statements.append)
            sm.append(sid, message={"role": "user", "content": [{"type": "text", "text": arg}], "timestamp": 1},
                      entry_id=arg)
            conn.set_trace_callback(None)
            hits += not any(s.startswith("SELECT s.meta, s.leaf, p.depth") for s in statements)
            print("ok", flush=True)
        elif cmd == "r":  # an idempotent replay: nothing written, nothing fired
            assert sm.append(sid, message={"role": "user", "content": [{"type": "text", "text": "again"}],
                             "timestamp": 1}, entry_id=arg).entry_id == arg
            print("ok", flush=True)
        elif cmd == "x":  # a refused append (no such parent): rolled back, nothing fired
            try:
                sm.append(sid, message={"role": "user", "content": [{"type": "text", "text": "no"}], "timestamp": 1},
                          parent_id=arg)
            except session_manager.SessionError:
                print("ok", flush=True)
        elif cmd == "wait":
            deadline = time.monotonic() + 120
            while len(seen) < int(arg) and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.3)  # (a duplicate, if any, would land meanwhile: it must not)
            print(json.dumps({"seen": list(seen), "hits": hits}), flush=True)
'''


def _wait_for(done: Any, what: str) -> None:
    deadline = time.monotonic() + 120  # a bounded correctness wait on a loaded box, not a timing claim
    while not done():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def test_memo_appends_of_an_observing_writer_and_another_process_reach_every_observer_once_in_order(
        tmp_path: Path) -> None:
    """Prevents: the memo carrying a stale outbox position or "nobody else follows" past a change
    (another process's commit, a follower registering, then leaving): own events handed on out
    of commit order with the other process's, rows not written for a follower that registered
    after the memo was staged (its observer missing appends), or written twice. The writer's
    observer sees every append of both processes once, in chain (commit) order, and nothing for
    an idempotent replay or a refused append; an observer that came and went sees exactly the
    appends committed while it followed."""
    file = tmp_path / "ev.db"
    uri = f"sqlite:///{file}"
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id
    a = subprocess.Popen([sys.executable, "-c", OBSERVING_WRITER, uri, sid], cwd=ROOT, text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert a.stdin is not None and a.stdout is not None
    assert a.stdout.readline().strip() == "ready"
    rng = random.Random(4)
    acked: list[str] = []
    late: session_manager.SessionManager | None = None
    late_seen: list[str] = []
    late_from = late_to = 0
    try:
        with session_manager.open(uri) as b:
            step = 0
            joined = False
            while step < 240:
                if step >= 80 and not joined:  # a follower registers between memo appends
                    joined = True
                    late = session_manager.open(uri)
                    late.observe({"function_id": "session::on-message-added"},
                                 lambda e: late_seen.append(e["entry_id"]))
                    late_from = len(acked)
                if step >= 160 and late is not None:  # and leaves: the writer's memo may resume
                    late_to = len(acked)
                    want = late_to - late_from
                    _wait_for(lambda want=want: len(late_seen) >= want, "the late observer caught up")
                    late.close()
                    late = None
                roll = rng.random()
                if roll < 0.1 and acked:  # a replay or a refusal between memo appends: no event either way
                    a.stdin.write(f"r {rng.choice(acked)}\n" if roll < 0.05 else "x e_nope\n")
                    a.stdin.flush()
                    assert a.stdout.readline().strip() == "ok"
                elif roll < 0.7:
                    for _ in range(rng.randint(1, 8)):  # a burst: memo hits in the writer
                        eid = f"a{step}"
                        step += 1
                        a.stdin.write(f"a {eid}\n")
                        a.stdin.flush()
                        assert a.stdout.readline().strip() == "ok"
                        acked.append(eid)
                else:
                    eid = f"b{step}"
                    step += 1
                    assert b.append(sid, message=user(eid), entry_id=eid).entry_id == eid
                    acked.append(eid)
        a.stdin.write(f"wait {len(acked)}\n")
        a.stdin.flush()
        report = json.loads(a.stdout.readline())
    finally:
        if late is not None:
            late.close()
        a.stdin.close()
        a.wait(timeout=60)
    path = read_back(file, sid)
    assert path == acked  # one writer at a time here: the chain is the acknowledgement order
    assert report["seen"] == path
    assert joined and 0 < late_from < late_to
    assert late_seen == path[late_from:late_to]
    assert report["hits"] > 0  # the memo was taken (else this attacks nothing)


# A child looping over one session until killed, stopped by a not_found, or done with COUNT:
# ``append``: appends (entry ids PREFIX-i), every 7th followed by an update-message of it and
# every 11th by an append to a session of its own (both end the memo), printing each
# acknowledged id; ``cas``: appends too, and between them races update-message with
# expected_revision (the revision it just read) on TARGET, printing each revision it won.
LOOPER = r'''
import json, os, sys
import session_manager
from session_manager import SessionError

mode, uri, sid, prefix, count = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
target = sys.argv[6] if len(sys.argv) > 6 else None


def user(text):
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


with session_manager.open(uri) as sm:
    own = sm.create().session_id
    store = sm.service.store
    i = 0
    stop = os.environ.get("LOOPER_STOP")  # (a file whose appearance ends the loop between appends)
    while (count < 0 or i < count) and not (stop and os.path.exists(stop)):
        eid = f"{prefix}-{i}"
        try:
            sm.append(sid, message=user(eid), entry_id=eid)
        except SessionError as e:
            if e.code != "session/not_found":
                raise
            print(json.dumps({"gone": eid}), flush=True)
            if mode == "until-gone":
                break
            i += 1
            continue
        print(json.dumps({"a": eid}), flush=True)
        if mode == "cas":
            for _ in range(2):
                revision = store.get_entry(sid, target)["revision"]
                res = sm.call("session::update-message", {"session_id": sid, "entry_id": target,
                              "content": [{"type": "text", "text": f"{prefix}@{revision}"}],
                              "expected_revision": revision})
                if res["updated"]:
                    assert res["revision"] == revision + 1, res
                    print(json.dumps({"won": revision}), flush=True)
                else:
                    assert res["revision"] > revision, res
        elif i % 7 == 6:
            try:
                sm.call("session::update-message", {"session_id": sid, "entry_id": eid,
                        "content": [{"type": "text", "text": eid + "!"}]})
            except SessionError as e:  # (the session deleted since the append: the delete tests)
                if e.code not in ("session/not_found", "session/entry_not_found"):
                    raise
        elif i % 11 == 10:
            sm.append(own, message=user("own"))
        i += 1
'''


def _looper(*args: str, stop: Path | None = None) -> subprocess.Popen[str]:
    """The looper in a process of its own; with ``stop``, it ends (between appends) once that file exists."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if stop is not None:
        env["LOOPER_STOP"] = str(stop)
    return subprocess.Popen([sys.executable, "-c", LOOPER, *args], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                            env=env)


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_memo_writers_killed_at_random_instants_lose_nothing_acknowledged(tmp_path: Path, durability: str) -> None:
    """Prevents: a kill between a memo-hit append's COMMIT and the next leaving the file with
    a chain, count or links that disagree (what the memo assumed is what is stored), or an
    acknowledged append lost; the next process (a fresh memo) chains on the true leaf."""
    file = tmp_path / "k.db"
    uri = f"sqlite:///{file}"
    with session_manager.open(uri, durability=durability) as sm:  # type: ignore[arg-type]
        sid = sm.create().session_id
    rng = random.Random(23)
    acked: list[str] = []
    for round_ in range(4):
        p = _looper("append", uri, sid, f"k{round_}", "-1")
        assert p.stdout is not None
        got = [p.stdout.readline()]  # up and appending
        reader = threading.Thread(target=lambda out=p.stdout, got=got: got.extend(out))
        reader.start()
        time.sleep(rng.random() * 0.4)  # a random instant mid-stream (where is not asserted)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
        reader.join(timeout=60)
        acked += [rec["a"] for rec in _lines("".join(got))]
    last = _looper("append", uri, sid, "after", "30")
    out, _ = last.communicate(timeout=300)
    assert last.returncode == 0
    acked += [rec["a"] for rec in _lines(out)]
    path = read_back(file, sid)
    assert set(acked) <= set(path)
    assert len(path) - len(acked) <= 4  # only an append in flight at each kill may land unacknowledged
    assert path[-30:] == [f"after-{i}" for i in range(30)]


def test_a_delete_racing_memo_appends_of_another_process_never_resurrects_the_session(tmp_path: Path) -> None:
    """Prevents: an append taking its memo of a session another process deleted meanwhile
    (the memo's row key and leaf name rows that are gone): entries written under a deleted
    session's key, the session row coming back, or a count carried over."""
    file = tmp_path / "d.db"
    uri = f"sqlite:///{file}"
    with session_manager.open(uri) as sm:
        for attempt in range(3):
            sid = sm.create().session_id
            p = _looper("until-gone", uri, sid, f"d{attempt}", "-1")
            assert p.stdout is not None
            for _ in range(5 + 20 * attempt):  # the writer is well into its memo hits
                assert "a" in json.loads(p.stdout.readline())
            assert sm.delete(sid).deleted
            out, _ = p.communicate(timeout=120)
            assert p.returncode == 0
            assert "gone" in _lines(out)[-1]
            assert sm.get(sid) is None
    conn = sqlite3.connect(file)
    try:
        assert conn.execute("SELECT count(*) FROM entries WHERE sk NOT IN (SELECT sk FROM sessions)").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM sessions WHERE meta IS NULL").fetchone()[0] == 0
    finally:
        conn.close()


def test_a_delete_and_recreate_racing_memo_appends_leaves_only_appends_made_after_it(tmp_path: Path) -> None:
    """Prevents: appends after another process deleted and re-created the session under the same
    id carrying the old session over (entries under a reused row key, a parent from before the
    delete, the old count): the new session holds exactly the appends acknowledged after it."""
    file = tmp_path / "r.db"
    uri = f"sqlite:///{file}"
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id
        # (Looping until told to stop, once the new session holds 30 of its appends: a fixed
        # count raced the delete, all of it landing before, under load or when appends got faster.)
        p = _looper("append", uri, sid, "r", "-1", stop=tmp_path / "stop")
        assert p.stdout is not None
        before = [json.loads(p.stdout.readline()) for _ in range(60)]
        assert all("a" in rec for rec in before)
        sm.delete(sid)
        sm.ensure(sid)
        got: list[str] = []
        reader = threading.Thread(target=lambda out=p.stdout: got.extend(out))
        reader.start()
        deadline = time.monotonic() + 120
        while (got_meta := sm.get(sid)) is not None and got_meta.meta.message_count < 30:
            assert time.monotonic() < deadline and p.poll() is None, "the looper stopped appending"
            time.sleep(0.01)
        (tmp_path / "stop").touch()
        p.wait(timeout=300)
        reader.join(timeout=60)
        out = "".join(got)
        assert p.returncode == 0
        recs = before + _lines(out)
        acked = [rec["a"] for rec in recs if "a" in rec]
    path = read_back(file, sid)
    assert path and path == acked[len(acked) - len(path):]
    with session_manager.open(uri) as sm:
        store = sm.service.store
        assert all(store.get_entry(sid, e) is None for e in acked[:len(acked) - len(path)])
        assert len(acked) - len(path) >= 60


def test_update_message_compare_and_set_holds_across_processes_between_memo_appends(tmp_path: Path) -> None:
    """Prevents: two processes both winning one expected_revision of an entry (the compare-and-set
    decided on a stale read next to memo appends), or an append after an update taking the
    memo of the append before it (the update's meta lost)."""
    file = tmp_path / "c.db"
    uri = f"sqlite:///{file}"
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id
        target = sm.append(sid, message=user("target")).entry_id
    procs = [_looper("cas", uri, sid, f"c{n}", "60", target) for n in range(3)]
    won: list[int] = []
    winners: dict[int, str] = {}
    acked: list[str] = []
    for n, p in enumerate(procs):
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0
        for rec in _lines(out):
            if "won" in rec:
                won.append(rec["won"])
                winners[rec["won"]] = f"c{n}"
            elif "a" in rec:
                acked.append(rec["a"])
    path = read_back(file, sid)
    assert sorted(path[1:]) == sorted(acked)
    with session_manager.open(uri) as sm:
        entry = sm.service.store.get_entry(sid, target)
        assert entry is not None
        final = entry["revision"]
        assert sorted(won) == list(range(final))  # each revision won exactly once
        assert entry["message"]["content"][0]["text"] == f"{winners[final - 1]}@{final - 1}"


def test_memo_appends_hand_back_big_integer_metadata_exactly(tmp_path: Path) -> None:
    """Prevents: the meta a memo hit hands the append (the text this connection wrote, decoded
    again) differing from what a read would give: big integers past 64 bits and floats changed
    in the stored meta, the count, or the events' session_metadata."""
    metadata = {"big": 2**70 + 1, "neg": -(2**65), "f": 0.1, "nested": {"n": [2**64, 1.5e300]}}
    file = tmp_path / "b.db"
    with session_manager.open(f"sqlite:///{file}") as sm:
        store = sm.service.store
        assert isinstance(store, SqliteStore)
        sid = sm.create(metadata=metadata).session_id
        seen: list[Any] = []
        sm.observe({"function_id": "session::on-message-added"}, lambda e: seen.append(e["session_metadata"]))
        how = [_ours(store, lambda i=i: sm.append(sid, message=user(f"m{i}"))) for i in range(20)]
        # (the first reads; one after its own append hits, unless the follower's beat committed
        # between: a miss then, so only some hit is required)
        assert how[0] == "read" and "memo" in how
        got = sm.get(sid)
        assert got is not None and got.meta.metadata == metadata and got.meta.message_count == 20
        assert seen == [metadata] * 20
        assert all(type(m["big"]) is int for m in seen)
    read_back(file, sid)


@pytest.mark.parametrize("kind", ["foreign", "newer"])
def test_a_refused_rollback_journal_database_keeps_its_journal_mode_and_bytes(tmp_path: Path, kind: str) -> None:
    """Prevents: a database the store refuses (another application's, or a newer schema
    version's) left switched to WAL mode by the open that refused it: its header rewritten and
    -wal/-shm files made beside it, where the refusal says nothing was written (the other
    program may rely on its rollback journal: an older SQLite, a network file system)."""
    target = tmp_path / "theirs.db"
    conn = sqlite3.connect(target)
    try:
        if kind == "foreign":
            conn.execute("CREATE TABLE orders (id INTEGER)")
            conn.execute("INSERT INTO orders VALUES (1)")
        else:
            conn.execute("CREATE TABLE sessions (session_id TEXT)")
            conn.execute("PRAGMA user_version = 999")
        conn.commit()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        conn.close()
    before = target.read_bytes()
    with pytest.raises(session_manager.SessionError) as refused:
        session_manager.open(f"sqlite:///{target}")
    assert refused.value.code == "session/storage"
    assert ("not a session-manager database" if kind == "foreign" else "schema version 999") in str(refused.value)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs.db"]


def test_threads_of_one_store_with_its_own_observer_get_every_event_once(tmp_path: Path) -> None:
    """Prevents: threads of one process (each its own connection, so its own memo) losing or
    doubling an event or an entry when their memo appends interleave with each other's commits
    and with another process's: each thread's own session gets its events in commit order,
    the shared session one chain with every append, each event once, in commit order with the
    other process's appends too."""
    file = tmp_path / "t.db"
    uri = f"sqlite:///{file}"
    added: list[tuple[str, str]] = []
    with session_manager.open(uri) as sm:
        shared = sm.create().session_id
        own = [sm.create().session_id for _ in range(4)]
        ours = {shared, *own}  # (the other process appends to a session of its own too)
        sm.observe({"function_id": "session::on-message-added"},
                   lambda e: added.append((e["session_id"], e["entry_id"])) if e["session_id"] in ours else None)
        other = _looper("append", uri, shared, "proc", "150")  # another process on the shared session
        errors: list[BaseException] = []

        def work(t: int) -> None:
            try:
                rng = random.Random(t)
                for i in range(120):
                    target = own[t] if rng.random() < 0.5 else shared
                    sm.append(target, message=user(f"t{t}-{i}"), entry_id=f"t{t}-{i}")
            except BaseException as e:  # handed to the test's thread
                errors.append(e)

        run_threads(work, 4)
        other.communicate(timeout=300)
        assert other.returncode == 0 and not errors, errors
        total = 4 * 120 + 150
        _wait_for(lambda: len(added) >= total, "every append observed")
        time.sleep(0.3)  # (a duplicate would land meanwhile: it must not)
    chains = {sid: read_back(file, sid) for sid in [shared, *own]}
    assert sum(map(len, chains.values())) == total == len(added) == len(set(added))
    for sid in own:
        assert [e for s, e in added if s == sid] == chains[sid]
    assert [e for s, e in added if s == shared] == chains[shared]
    assert [e for e in chains[shared] if e.startswith("proc-")] == [f"proc-{i}" for i in range(150)]


def test_threads_appending_to_one_session_are_observed_in_its_commit_order(tmp_path: Path) -> None:
    """Prevents: a store's own calls on several threads handing their events on in the order
    they reached the delivery queue, not the order they committed: one thread's append
    committed first but observed after another thread's append chained onto it (the window
    between a call's COMMIT and its delivery; the thread switch interval is shortened here to
    widen it, as a loaded machine does). In-process observers get each session's events in
    its commit order, which for one session's appends is its chain."""
    file = tmp_path / "o.db"
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        with session_manager.open(f"sqlite:///{file}") as sm:
            sid = sm.create().session_id
            seen: list[str] = []
            sm.observe({"function_id": "session::on-message-added"}, lambda e: seen.append(e["entry_id"]))
            errors: list[BaseException] = []

            def work(t: int) -> None:
                try:
                    for i in range(150):
                        sm.append(sid, message=user(f"t{t}-{i}"), entry_id=f"t{t}-{i}")
                except BaseException as e:  # handed to the test's thread
                    errors.append(e)

            run_threads(work, 4)
            assert not errors, errors
            _wait_for(lambda: len(seen) >= 600, "every append observed")
    finally:
        sys.setswitchinterval(switch)
    assert seen == read_back(file, sid)


def _delete_amid_appends(sm: session_manager.SessionManager, attempt: int) -> None:
    """One session appended to by a thread and deleted by this one mid-stream; its events checked."""
    sid = sm.create().session_id
    seen: list[str] = []

    def note(e: dict[str, Any]) -> None:
        seen.append(e.get("entry_id") or "deleted")

    for fid in ("session::on-message-added", "session::on-deleted"):
        sm.observe({"function_id": fid, "filters": {"input.session_id": {"$eq": sid}}}, note)
    acked: list[str] = []
    started = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(10_000):
                eid = f"w{i}"
                try:
                    sm.append(sid, message=user(eid), entry_id=eid)
                except session_manager.SessionError as e:
                    assert e.code == "session/not_found", e
                    return
                acked.append(eid)
                if i == 20 + 10 * attempt:
                    started.set()
        except BaseException as e:  # handed to the test's thread
            errors.append(e)
        finally:
            started.set()

    th = threading.Thread(target=writer)
    th.start()
    started.wait(timeout=120)
    assert sm.delete(sid).deleted
    th.join(timeout=300)
    assert not errors, errors
    _wait_for(lambda: "deleted" in seen, "on-deleted observed")
    time.sleep(0.2)  # (a late event would land meanwhile: it must not)
    assert seen == [*acked, "deleted"]
    assert sm.get(sid) is None


def test_a_delete_on_another_thread_is_observed_after_every_append_it_followed(tmp_path: Path) -> None:
    """Prevents: a session's on-deleted observed before an append that committed before the
    delete (two threads of one store, each its own connection and memo), or an append after
    the delete taken (the memo of a deleted session): the session's events are its acknowledged
    appends in order, then on-deleted, then nothing; and the session stays gone."""
    file = tmp_path / "del.db"
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # (widens the window between a call's COMMIT and its delivery)
    try:
        with session_manager.open(f"sqlite:///{file}") as sm:
            for attempt in range(5):
                _delete_amid_appends(sm, attempt)
    finally:
        sys.setswitchinterval(switch)
    conn = sqlite3.connect(file)
    try:
        assert conn.execute("SELECT count(*) FROM entries WHERE sk NOT IN (SELECT sk FROM sessions)").fetchone()[0] == 0
    finally:
        conn.close()
