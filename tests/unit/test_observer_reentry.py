"""Local observers that call back into the store, over every adapter, with real threads.

A bot that appends a reply when it sees a user message (from inside the callback, or by
handing the work to another thread and waiting for it), an observer that raises, a slow
observer while another instance commits: no call hangs (each runs on a thread joined with
a generous bound: a hang fails, no time is asserted), and every observer gets each event
once, in the session's commit order, after the write is durable (read back).

The postgres turn wait is made unbounded here (``TURN_WAIT_S``): a call that would stall
waiting for its listener hangs and fails instead of handing its events on late."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import aio
from session_manager.store.memory import MemoryStore
from tests import pg_support

ADAPTERS = ["memory", "fs", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
ADDED = "session::on-message-added"
HANG_S = 60.0  # a correctness bound on a loaded machine (a deadlock never ends), not a timing claim

Opener = Callable[[], session_manager.SessionManager]


@pytest.fixture(params=ADAPTERS)
def opener(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Opener]:
    """Opens instances of one store (memory: one shared store object; fs: one data_dir, so
    one instance; sqlite: one file; postgres: one schema): each call is another instance."""
    kind = request.param
    opened: list[session_manager.SessionManager] = []

    def track(sm: session_manager.SessionManager) -> session_manager.SessionManager:
        opened.append(sm)
        return sm

    if kind == "postgres":
        pg_support.require()
        from session_manager.store.postgres import outbox

        monkeypatch.setattr(outbox, "TURN_WAIT_S", 3600.0)  # a stall would hang: caught, not waited out
        with pg_support.schema() as name:
            yield lambda: track(session_manager.open(store=pg_support.open_store(name)))
            close_all(opened)
        return
    if kind == "memory":
        store = MemoryStore()
        yield lambda: track(session_manager.open(store=store)) if not opened else opened[0]
    elif kind == "fs":
        yield lambda: track(session_manager.open(tmp_path / "data")) if not opened else opened[0]
    else:
        uri = f"sqlite:///{tmp_path / 'o.db'}"
        yield lambda: track(session_manager.open(uri))
    close_all(opened)


def close_all(opened: list[session_manager.SessionManager]) -> None:
    """Close every instance, bounded (after a hang, close would wait for the hung call)."""
    closer = threading.Thread(target=lambda: [sm.close() for sm in opened], daemon=True)
    closer.start()
    closer.join(HANG_S)


def text(role: str, s: str) -> dict[str, Any]:
    if role == "assistant":
        return {"role": role, "content": [{"type": "text", "text": s}], "timestamp": 1, "stop_reason": "end",
                "model": "m", "provider": "p"}
    return {"role": role, "content": [{"type": "text", "text": s}], "timestamp": 1}


def run_bounded(work: Callable[[], Any], what: str) -> Any:
    """Run ``work`` on a thread; fail (never hang the suite) if it does not end."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def body() -> None:
        try:
            out.append(work())
        except BaseException as e:  # handed to the test's thread
            errors.append(e)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    thread.join(HANG_S)
    assert not thread.is_alive(), f"hung: {what}"
    if errors:
        raise errors[0]
    return out[0] if out else None


def wait_for(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG_S
    while not done():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def path_ids(sm: session_manager.SessionManager, sid: str) -> list[str]:
    return [item.entry_id for item in sm.transcript(sid)]  # (every page)


def logger(sm: session_manager.SessionManager, sid: str) -> list[str]:
    """Every on-message-added of ``sid``, as entry ids, in delivery order."""
    seen: list[str] = []
    sm.observe({"function_id": ADDED, "filters": {"input.session_id": {"$eq": sid}}},
               lambda e: seen.append(e["entry_id"]))
    return seen


def check_bot_conversation(sm: session_manager.SessionManager, sid: str, seen_by_bot: list[str],
                           logged: list[str], turns: int) -> None:
    want = [i for n in range(turns) for i in (f"u{n}", f"a{n}")]
    wait_for(lambda: len(logged) >= len(want), "every event logged")
    assert path_ids(sm, sid) == want  # durable and in order: the bot's replies follow their prompts
    assert logged == want  # once each, in commit order (a logger added after the bot too)
    assert seen_by_bot == want  # the bot sees its own replies too, after the prompt it answers


def bot(sm: session_manager.SessionManager, sid: str, reply: Callable[[Callable[[], Any]], Any]) -> list[str]:
    """An observer that answers each user message ``uN`` with ``aN`` (``reply`` runs the append)."""
    seen: list[str] = []

    def on_added(e: dict[str, Any]) -> None:
        seen.append(e["entry_id"])
        if e["message"]["role"] == "user":
            n = e["entry_id"][1:]
            reply(lambda: sm.append(sid, message=text("assistant", f"re {n}"), entry_id=f"a{n}"))

    sm.observe({"function_id": ADDED, "filters": {"input.session_id": {"$eq": sid}}}, on_added)
    return seen


def test_an_observer_appending_from_its_callback_neither_hangs_nor_reorders(opener: Opener) -> None:
    # Prevents: the bot's append (same thread, inside its callback) deadlocking on the delivery
    # lock, or its reply reaching a second observer before the prompt that caused it.
    sm = opener()
    sid = sm.create().session_id
    seen = bot(sm, sid, lambda append: append())
    logged = logger(sm, sid)
    for n in range(3):
        run_bounded(lambda n=n: sm.append(sid, message=text("user", f"q {n}"), entry_id=f"u{n}"), "a prompt")
    check_bot_conversation(sm, sid, seen, logged, 3)


def test_an_observer_waiting_on_another_thread_that_appends_does_not_deadlock(opener: Opener) -> None:
    # Prevents: the other thread's append waiting for the delivery the observer is inside (a
    # deadlock), or stalling until a timeout (postgres: its turn), or delivering out of order.
    sm = opener()
    sid = sm.create().session_id
    pool = ThreadPoolExecutor(2)
    try:
        seen = bot(sm, sid, lambda append: pool.submit(append).result())
        logged = logger(sm, sid)
        for n in range(3):
            run_bounded(lambda n=n: sm.append(sid, message=text("user", f"q {n}"), entry_id=f"u{n}"), "a prompt")
        check_bot_conversation(sm, sid, seen, logged, 3)
    finally:
        pool.shutdown(wait=False)  # (a hung worker must not hang the suite too)


def test_an_observer_that_raises_fails_no_call_and_starves_no_other_observer(
        opener: Opener, caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: an observer's exception failing the call, stopping delivery to the observers after
    # it, or leaving the delivery machinery stuck (the next call hanging).
    sm = opener()
    sid = sm.create().session_id

    def boom(e: dict[str, Any]) -> None:
        raise RuntimeError("observer bug")

    sm.observe({"function_id": ADDED}, boom)
    logged = logger(sm, sid)
    for n in range(3):
        answer = run_bounded(lambda n=n: sm.append(sid, message=text("user", f"q {n}"), entry_id=f"u{n}"),
                             "an append after an observer raised")
        assert answer.entry_id == f"u{n}"
    wait_for(lambda: len(logged) >= 3, "every event logged")
    assert logged == ["u0", "u1", "u2"]
    assert path_ids(sm, sid) == ["u0", "u1", "u2"]
    assert sum("observer of session::on-message-added failed" in r.getMessage() for r in caplog.records) == 3


@pytest.mark.parametrize("opener", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_a_slow_observer_gets_every_event_once_in_order_while_another_instance_commits(opener: Opener) -> None:
    # Prevents: a slow observer (holding the delivery while it runs) blocking another instance's
    # commits or this instance's, or its events arriving twice, missing, or out of commit order.
    sm, other = opener(), opener()
    sid = sm.create().session_id
    logged: list[str] = []

    def slow(e: dict[str, Any]) -> None:
        time.sleep(0.005)  # slow next to an append: calls and commits pile up behind it
        logged.append(e["entry_id"])

    sm.observe({"function_id": ADDED, "filters": {"input.session_id": {"$eq": sid}}}, slow)

    def writer(manager: session_manager.SessionManager, prefix: str) -> None:
        for n in range(15):
            manager.append(sid, message=text("user", f"{prefix}{n}"), entry_id=f"{prefix}{n}")

    threads = [threading.Thread(target=writer, args=(m, p), daemon=True) for m, p in ((sm, "own"), (other, "oth"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
        assert not t.is_alive(), "a writer hung"
    path = path_ids(sm, sid)
    assert sorted(path) == sorted([f"{p}{n}" for p in ("own", "oth") for n in range(15)])
    wait_for(lambda: len(logged) >= len(path), "every event delivered")
    time.sleep(0.2)  # (no duplicate may follow: a short grace for one to show)
    assert logged == path


def test_an_async_bot_replies_from_its_event_stream(opener: Opener) -> None:
    # Prevents: the asyncio bot pattern (await an append while iterating events) hanging or
    # reordering over any adapter.
    sm = opener()

    async def main() -> list[str]:
        asm = aio.AsyncSessionManager(sm)  # (its executor is left to the fixture's close of sm)
        sid = (await asm.create()).session_id
        seen: list[str] = []
        async with asm.events(ADDED, filters={"input.session_id": {"$eq": sid}}) as events:
            await asm.append(sid, message=text("user", "q 0"), entry_id="u0")
            async for e in events:
                seen.append(e["entry_id"])
                if e["message"]["role"] == "user":
                    n = int(e["entry_id"][1:])
                    await asm.append(sid, message=text("assistant", f"re {n}"), entry_id=f"a{n}")
                    if n < 2:
                        await asm.append(sid, message=text("user", f"q {n + 1}"), entry_id=f"u{n + 1}")
                if len(seen) == 6:
                    break
        assert path_ids(sm, sid) == seen
        return seen

    seen = run_bounded(lambda: asyncio.run(main()), "the async bot")
    assert seen == ["u0", "a0", "u1", "a1", "u2", "a2"]


@pytest.fixture
def pg_schema(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    pg_support.require()
    from session_manager.store.postgres import outbox

    monkeypatch.setattr(outbox, "TURN_WAIT_S", 3600.0)  # a stall would hang: caught, not waited out
    with pg_support.schema() as name:
        yield name


@pytest.mark.postgres
def test_postgres_calls_never_wait_out_their_turn_as_observers_come_and_go(pg_schema: str) -> None:
    # Prevents: a call stalling for its turn (TURN_WAIT_S) when observers are added and removed
    # while calls run (calls begun unobserved, notifications no turn claims), and an observer
    # getting an event twice or out of commit order meanwhile.
    sm = session_manager.open(store=pg_support.open_store(pg_schema))
    other = session_manager.open(store=pg_support.open_store(pg_schema))
    try:
        sid = sm.create().session_id
        stop = threading.Event()
        got: list[list[str]] = []

        def writer(manager: session_manager.SessionManager, prefix: str) -> None:
            n = 0
            while not stop.is_set():
                manager.append(sid, message=text("user", f"{prefix}{n}"), entry_id=f"{prefix}{n}")
                n += 1

        writers = [threading.Thread(target=writer, args=a, daemon=True)
                   for a in ((sm, "x"), (sm, "y"), (other, "z"))]
        for t in writers:
            t.start()
        for _ in range(20):
            seen: list[str] = []
            got.append(seen)
            obs = sm.observe({"function_id": ADDED}, lambda e, seen=seen: seen.append(e["entry_id"]))
            time.sleep(0.02)
            obs.dispose()
            time.sleep(0.02)
        stop.set()
        for t in writers:
            t.join(HANG_S)
            assert not t.is_alive(), "a writer stalled waiting for its turn"
        path = path_ids(sm, sid)
        position = {e: i for i, e in enumerate(path)}
        for seen in got:
            assert len(seen) == len(set(seen)), "an event delivered twice"
            assert [position[e] for e in seen] == sorted(position[e] for e in seen), "out of commit order"
    finally:
        close_all([sm, other])


@pytest.mark.postgres
def test_postgres_calls_waiting_for_their_turn_are_released_when_the_listener_drops(pg_schema: str) -> None:
    # Prevents: calls waiting for their turn stalling (TURN_WAIT_S) after the listener's
    # connection dropped under them, and the observer missing or repeating events across it.
    from tests.unit.test_postgres_outbox_replay import terminate_listeners

    sm = session_manager.open(store=pg_support.open_store(pg_schema))
    other = session_manager.open(store=pg_support.open_store(pg_schema))
    try:
        sid = sm.create().session_id
        logged = logger(sm, sid)
        stop = threading.Event()

        def writer(manager: session_manager.SessionManager, prefix: str) -> None:
            n = 0
            while not stop.is_set():
                manager.append(sid, message=text("user", f"{prefix}{n}"), entry_id=f"{prefix}{n}")
                n += 1

        writers = [threading.Thread(target=writer, args=a, daemon=True) for a in ((sm, "x"), (other, "z"))]
        for t in writers:
            t.start()
        for _ in range(3):
            wait_for(lambda: sm.service.store.outbox.listening, "the listener reconnected")
            time.sleep(0.1)
            terminate_listeners(pg_schema)
        wait_for(lambda: sm.service.store.outbox.listening, "the listener reconnected")
        stop.set()
        for t in writers:
            t.join(HANG_S)
            assert not t.is_alive(), "a writer stalled waiting for its turn"
        path = path_ids(sm, sid)
        wait_for(lambda: len(logged) >= len(path), "every event delivered (replayed after each drop)")
        time.sleep(0.5)  # (no duplicate may follow: a short grace for one to show)
        assert sorted(logged) == sorted(path)  # once each; order across a drop is not promised
    finally:
        close_all([sm, other])


def listeners(schema_name: str) -> int:
    """This schema's LISTEN connections (every instance's)."""
    import psycopg

    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                           " AND query LIKE 'LISTEN %%'", (f"session-manager:{schema_name}"[:63],)).fetchone()
        return int(row[0]) if row else 0


@pytest.mark.postgres
def test_postgres_stops_listening_when_its_last_observer_leaves(pg_schema: str) -> None:
    # Prevents: an instance whose observers are all gone keeping its listener (two connections,
    # woken by every append of every instance), and one observing again getting events committed
    # while nobody observed, or missing the ones after it was added.
    sm = session_manager.open(store=pg_support.open_store(pg_schema))
    other = session_manager.open(store=pg_support.open_store(pg_schema))
    try:
        outbox = sm.service.store.outbox
        sid = other.create().session_id
        first: list[str] = []
        observations = [sm.observe({"function_id": ADDED}, lambda e: first.append(e["entry_id"])) for _ in range(2)]
        assert outbox.listening and listeners(pg_schema) == 1
        other.append(sid, message=text("user", "a"), entry_id="a")
        wait_for(lambda: first == ["a", "a"], "the observed event")
        observations[0].dispose()
        time.sleep(0.7)  # (more than the listener's poll: it would leave by now)
        assert outbox.listening and listeners(pg_schema) == 1  # one observer left: still listening
        observations[1].dispose()
        wait_for(lambda: not outbox.listening and listeners(pg_schema) == 0, "the listener left")
        other.append(sid, message=text("user", "b"), entry_id="b")  # nobody observes: nobody's event
        sm.append(sid, message=text("user", "c"), entry_id="c")  # unobserved own call: delivered to nobody
        second: list[str] = []
        sm.observe({"function_id": ADDED}, lambda e: second.append(e["entry_id"]))
        assert outbox.listening and listeners(pg_schema) == 1
        other.append(sid, message=text("user", "d"), entry_id="d")
        sm.append(sid, message=text("user", "e"), entry_id="e")
        wait_for(lambda: len(second) >= 2, "the events after observing again")
        time.sleep(0.5)  # (nothing replayed may follow: a short grace for it to show)
        assert second == ["d", "e"]
        assert first == ["a", "a"]
        assert path_ids(sm, sid) == ["a", "b", "c", "d", "e"]
    finally:
        close_all([sm, other])


def test_sqlite_stops_following_when_its_last_observer_leaves(tmp_path: Path) -> None:
    # Prevents: a store whose observers are all gone still polling and registered as a reader
    # (so every other process keeps writing outbox rows for it), and one observing again getting
    # events committed while nobody observed, or missing the ones after it was added.
    import sqlite3

    uri = f"sqlite:///{tmp_path / 'f.db'}"
    sm, other = session_manager.open(uri), session_manager.open(uri)
    try:
        instance = sm.service.store.db.instance

        def readers() -> int:
            with sqlite3.connect(tmp_path / "f.db") as conn:
                return int(conn.execute("SELECT count(*) FROM readers WHERE instance = ?", (instance,)).fetchone()[0])

        sid = other.create().session_id
        first: list[str] = []
        obs = sm.observe({"function_id": ADDED}, lambda e: first.append(e["entry_id"]))
        assert readers() == 1
        other.append(sid, message=text("user", "a"), entry_id="a")
        wait_for(lambda: first == ["a"], "the observed event")
        obs.dispose()
        wait_for(lambda: readers() == 0 and sm.service.store.outbox._thread is None, "the follower left")
        other.append(sid, message=text("user", "b"), entry_id="b")  # nobody observes: no row, nobody's event
        second: list[str] = []
        sm.observe({"function_id": ADDED}, lambda e: second.append(e["entry_id"]))
        assert readers() == 1
        other.append(sid, message=text("user", "c"), entry_id="c")
        sm.append(sid, message=text("user", "d"), entry_id="d")
        wait_for(lambda: len(second) >= 2, "the events after observing again")
        time.sleep(0.3)  # (nothing replayed may follow: a short grace for it to show)
        assert second == ["c", "d"]
        assert first == ["a"]
        assert path_ids(sm, sid) == ["a", "b", "c", "d"]
    finally:
        close_all([sm, other])


@pytest.mark.parametrize("opener", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_an_observer_closing_its_manager_on_another_instances_event(
        opener: Opener, caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: close() from an observer running on the store's follower (sqlite) failing
    # ("cannot join current thread") and leaving the store half closed.
    sm, other = opener(), opener()
    sid = other.create().session_id
    closed = threading.Event()

    def on_added(e: dict[str, Any]) -> None:
        sm.close()
        closed.set()

    sm.observe({"function_id": ADDED}, on_added)
    other.append(sid, message=text("user", "bye"), entry_id="bye")
    wait_for(closed.is_set, "the observer closed its manager")
    with pytest.raises(RuntimeError, match="closed"):
        sm.append(sid, message=text("user", "late"))
    assert path_ids(other, sid) == ["bye"]
    assert not [r for r in caplog.records if "failed" in r.getMessage()]
