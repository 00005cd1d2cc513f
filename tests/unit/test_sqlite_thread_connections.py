"""The sqlite store's connections per thread: an ended thread's connection goes to the next new
thread (kept idle up to a bound), out of any transaction and at the store's durability, instead
of staying open until the store closes. LangGraph runs a graph's checkpoint writes on a thread
pool it makes per ``invoke``: every turn's threads opened connections of their own (~2.8 a
turn, two file descriptors each), so a long-running app ran out of descriptors and every turn
paid the opens (issue 29)."""

from __future__ import annotations

import gc
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.store.sqlite import SqliteSettings, SqliteStore
from session_manager.store.sqlite.core import _IDLE_MAX


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def in_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` on a new thread that ends before this returns (its answer, or its exception raised)."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(("ok", fn()))
        except BaseException as e:  # (handed to the caller)
            out.append(("raised", e))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    gc.collect()  # (the thread's state is freed as it ends; collected here to leave no doubt)
    kind, value = out[0]
    if kind == "raised":
        raise value
    return value


def test_threads_that_end_hand_their_connection_to_the_next_and_every_write_reads_back(tmp_path: Path) -> None:
    # Prevents: each short-lived thread (a LangGraph invoke's pool) opening a connection kept
    # until the store closed: 200 threads left 200 connections (400 descriptors) open.
    with session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db") as sm:
        db = sm.service.store.db
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        conns = set()
        for i in range(200):
            conns.add(in_thread(lambda i=i: (sm.call("session::append", {"session_id": sid, "message": user(f"m{i}")}),
                                             id(db.local.state.conn))[1]))
        assert len(db._conns) <= 2  # the opening thread's, and the one the threads took in turn
        assert len(conns) == 1
        entries = sm.service.store.entries(sid)
    assert [e["message"]["content"][0]["text"] for e in entries] == [f"m{i}" for i in range(200)]


def test_past_the_idle_bound_an_ended_threads_connection_is_closed(tmp_path: Path) -> None:
    # Prevents: a burst of threads (a wide pool) leaving every connection it opened open for good.
    store = SqliteStore(SqliteSettings(path=str(tmp_path / "d.db")))
    with session_manager.open(store=store) as sm:
        db = store.db
        ready, go = threading.Barrier(_IDLE_MAX + 4), threading.Event()
        opened: list[sqlite3.Connection] = []

        def hold() -> None:
            opened.append(db.conn())
            sm.list()
            ready.wait()
            go.wait()

        threads = [threading.Thread(target=hold) for _ in range(_IDLE_MAX + 3)]
        for t in threads:
            t.start()
        ready.wait()
        assert len(db._conns) == _IDLE_MAX + 4
        go.set()
        for t in threads:
            t.join()
        gc.collect()
        assert len(db._idle) == _IDLE_MAX and len(db._conns) == _IDLE_MAX + 1
        closed = [c for c in opened if not any(c is k for k in db._conns)]
        assert len(closed) == 3
        for conn in closed:
            with pytest.raises(sqlite3.ProgrammingError):
                conn.execute("SELECT 1")
        assert sm.call("session::create", {"title": "after"})["meta"]["title"] == "after"  # the store still writes


def test_a_connection_handed_back_inside_a_transaction_is_rolled_back_and_the_lock_let_go(tmp_path: Path) -> None:
    # Prevents: a thread that ended inside a transaction (by a bug) handing on a connection that
    # holds the write lock and half a write: every other writer would wait, then fail.
    path = tmp_path / "d.db"
    with session_manager.open(f"sqlite:///{path.resolve()}") as sm:
        db = sm.service.store.db

        def half() -> None:
            conn = db.conn()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO sessions (session_id) VALUES ('half')")

        in_thread(half)
        assert len(db._idle) == 1 and not db._idle[0].in_transaction
        other = sqlite3.connect(path, timeout=0)
        other.execute("BEGIN IMMEDIATE")  # the write lock is free
        other.execute("ROLLBACK")
        assert other.execute("SELECT count(*) FROM sessions WHERE session_id = 'half'").fetchone() == (0,)
        other.close()
        assert in_thread(lambda: sm.call("session::create", {"title": "next"})["meta"]["title"]) == "next"


def test_a_connection_that_cannot_be_rolled_back_is_dropped_not_kept(tmp_path: Path) -> None:
    # Prevents: a broken (here: closed) connection of an ended thread handed to the next thread.
    with session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db") as sm:
        db = sm.service.store.db
        broken = in_thread(lambda: (db.conn().close(), db.local.state.conn)[1])
        assert db._idle == [] and not any(c is broken for c in db._conns)
        assert in_thread(lambda: sm.call("session::create", {"title": "fresh"})["meta"]["title"]) == "fresh"


@pytest.mark.parametrize("drop", [False, True])
def test_a_thread_ending_after_its_store_closed_hands_nothing_back(tmp_path: Path, drop: bool) -> None:
    # Prevents: a connection handed back into a closed (or collected) store, revived or leaked.
    store = SqliteStore(SqliteSettings(path=str(tmp_path / "d.db")))
    sm = session_manager.open(store=store)
    used, go = threading.Event(), threading.Event()
    seen: list[sqlite3.Connection] = []

    def late() -> None:
        seen.append(store.db.conn())
        used.set()
        go.wait()

    t = threading.Thread(target=late)
    t.start()
    used.wait()
    db = store.db
    sm.close()
    if drop:
        del sm, store, db
        gc.collect()
    go.set()
    t.join()
    gc.collect()
    if not drop:
        assert db._idle == [] and db._conns == []
    with pytest.raises(sqlite3.ProgrammingError):
        seen[0].execute("SELECT 1")


def test_a_connection_taken_again_runs_at_the_durability_of_now(tmp_path: Path) -> None:
    # Prevents: an idle connection, set up under an earlier durability, writing the next
    # thread's commits at that one (synchronous, and the WAL's checkpoint interval).
    with session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db", durability="fsync") as sm:
        store = sm.service.store
        assert in_thread(lambda: store.db.conn().execute("PRAGMA synchronous").fetchone()[0]) == 2
        store.durability = "flush"
        levels = in_thread(lambda: (store.db.conn().execute("PRAGMA synchronous").fetchone()[0],
                                    store.db.conn().execute("PRAGMA wal_autocheckpoint").fetchone()[0]))
        assert len(store.db._idle) == 1
    assert levels == (1, 8000)


def test_langgraph_turns_keep_a_bounded_set_of_connections_and_read_back_every_turn(tmp_path: Path) -> None:
    # Prevents (issue 29): each graph.invoke over sqlite opening ~3 connections (its checkpoint
    # writes run on a pool made per invoke) kept until the store closed: 50 turns held 136.
    pytest.importorskip("langgraph.graph", reason="the langgraph extra is not installed")
    from langgraph.graph import START, MessagesState, StateGraph

    from session_manager.adapters.langgraph import SessionManagerSaver

    def bot(state: MessagesState) -> dict[str, Any]:
        return {"messages": [("ai", f"answer {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    with session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db") as sm:
        graph = builder.compile(checkpointer=SessionManagerSaver(sm))
        config: Any = {"configurable": {"thread_id": "turns"}}
        for i in range(50):
            graph.invoke({"messages": [("user", f"q{i}")]}, config)
        gc.collect()
        assert len(sm.service.store.db._conns) <= 2 + _IDLE_MAX
        contents = [m.content for m in graph.get_state(config).values["messages"]]
    assert contents == [x for i in range(50) for x in (f"q{i}", f"answer {2 * i + 1}")]


def test_threads_coming_and_going_at_once_never_share_a_connection_and_lose_no_write(tmp_path: Path) -> None:
    # Prevents: an idle connection handed to two new threads at once (two transactions on one
    # connection: "cannot start a transaction within a transaction", or one's write in the
    # other's), or a write lost while connections change hands; durability switched meanwhile.
    with session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db") as sm:
        store = sm.service.store
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        errors: list[BaseException] = []
        owners: dict[int, int] = {}
        guard = threading.Lock()

        def short(n: int) -> None:
            try:
                conn = store.db.conn()
                with guard:
                    assert id(conn) not in owners, "a connection in two live threads"
                    owners[id(conn)] = n
                sm.call("session::append", {"session_id": sid, "message": user(f"w{n}")})
                with guard:
                    del owners[id(conn)]
            except BaseException as e:  # (asserted below)
                errors.append(e)

        def wave(base: int) -> None:
            for k in range(25):
                t = threading.Thread(target=short, args=(base + k,))
                t.start()
                t.join()

        waves = [threading.Thread(target=wave, args=(100 * w,)) for w in range(6)]
        for t in waves:
            t.start()
        store.durability = "fsync"
        for t in waves:
            t.join()
        gc.collect()
        assert errors == []
        assert len(store.db._conns) <= 1 + 6 + _IDLE_MAX
        texts = sorted(e["message"]["content"][0]["text"] for e in store.entries(sid))
    assert texts == sorted(f"w{100 * w + k}" for w in range(6) for k in range(25))
