"""Attacks on the commit-ordered delivery of the embedded host's events
(session_manager/_service/commit_order.py): real threads, every join bounded (a
deadlock fails, it is not timed), nothing asserted about time."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import aio
from session_manager._service.core import LOCK_STRIPES
from session_manager.errors import SessionError
from session_manager.store.memory import MemoryStore

HANG_S = 60.0  # a correctness bound on a loaded machine (a deadlock never ends), not a timing claim
CREATED = "session::on-created"
DELETED = "session::on-deleted"
ADDED = "session::on-message-added"


def user(s: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": s}], "timestamp": 1}


def stored_path(sm: session_manager.SessionManager, sid: str) -> list[str]:
    store = sm.service.store
    return [e["id"] for e in store.path(sid, store.get_leaf(sid))]


def in_thread(work: Callable[[], Any]) -> threading.Thread:
    """``work`` on a thread of its own; a failure is re-raised by :func:`join`."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as e:  # handed to the test's thread
            failures.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.failures = failures  # type: ignore[attr-defined]
    t.start()
    return t


def join(t: threading.Thread) -> None:
    t.join(HANG_S)
    assert not t.is_alive(), "a call never finished (deadlock)"
    for e in getattr(t, "failures", ()):
        raise e


def other_stripe(sid: str, prefix: str) -> str:
    """An id whose session lock is not ``sid``'s (the stripes are re-entrant: one thread only)."""
    n = 0
    while hash(f"{prefix}{n}") % LOCK_STRIPES == hash(sid) % LOCK_STRIPES:
        n += 1
    return f"{prefix}{n}"


def before_mutating(sm: session_manager.SessionManager, sid: str, hook: Callable[[], None]) -> None:
    """``hook`` runs once as a call is about to take ``sid``'s lock (no session lock held)."""
    core = sm.service.core
    plain = core.mutating

    def mutating(session_id: str) -> Any:
        nonlocal hook
        if session_id == sid and hook is not None:
            h, hook = hook, None  # type: ignore[assignment]
            h()
        return plain(session_id)

    core.mutating = mutating  # type: ignore[method-assign]


class HookedStore(MemoryStore):
    """Runs ``before_delete[sid]`` as ``sid`` is deleted (under its session's lock)."""

    def __init__(self) -> None:
        super().__init__()
        self.before_delete: dict[str, Any] = {}

    def delete_session(self, session_id: str) -> bool:
        hook = self.before_delete.pop(session_id, None)
        if hook is not None:
            hook()
        return super().delete_session(session_id)


def test_a_purge_of_two_sessions_and_a_recreate_of_the_first_between_are_observed_in_commit_order() -> None:
    """Regression: a call making several mutations (a purge, the retention sweep, a tree's
    delete) took a number per mutation and gave up all but the last, so its events went
    out at its last mutation's number. A session it deleted first and another thread
    re-created (``session::ensure``) before its last delete was observed as created, then
    deleted: an observer kept tracking a session gone for good, though it exists."""
    store = HookedStore()
    with session_manager.open(store=store) as sm:
        first = "purge-a"
        second = other_stripe(first, "purge-b")
        for sid in (first, second):
            sm.call("session::ensure", {"session_id": sid, "metadata": {"tenant": "t"}})
        seen: list[tuple[str, str]] = []
        lock = threading.Lock()

        def note(kind: str) -> Any:
            def handler(e: dict[str, Any]) -> None:
                with lock:
                    seen.append((kind, e["session_id"]))
            return handler

        sm.observe({"function_id": CREATED}, note("created"))
        sm.observe({"function_id": DELETED}, note("deleted"))

        def recreate_first() -> None:  # the first is deleted (its lock let go); the second's is held here
            t = threading.Thread(target=sm.call, args=("session::ensure", {"session_id": first}), daemon=True)
            t.start()
            join(t)

        store.before_delete[second] = recreate_first
        response = sm.call("session::purge", {"metadata": {"tenant": "t"}})
        assert sorted(response["session_ids"]) == sorted([first, second])
        assert store.get_meta(first) is not None  # re-created after its delete
        mine = [s for s in seen if s[1] == first]
        assert mine == [("deleted", first), ("created", first)], seen


def test_a_purge_of_two_sessions_and_an_append_to_the_second_between_are_observed_in_commit_order() -> None:
    """The other half of the rule above: the purge's events must not go out all at its
    first delete's number either (an append committed to its second session before that
    session's delete would be observed after the delete). Each delete's event goes at its
    own number: the store-wide commit order (before the fix: the first's delete observed
    after the append it preceded)."""
    with session_manager.open(store=MemoryStore()) as sm:
        first = "purge-a"
        second = other_stripe(first, "purge-b")
        for sid in (first, second):
            sm.call("session::ensure", {"session_id": sid, "metadata": {"tenant": "t"}})
        seen: list[tuple[str, str]] = []
        sm.observe({"function_id": ADDED}, lambda e: seen.append(("added", e["session_id"])))
        sm.observe({"function_id": DELETED}, lambda e: seen.append(("deleted", e["session_id"])))
        before_mutating(sm, second, lambda: join(in_thread(lambda: sm.append(second, message=user("x")))))
        response = sm.call("session::purge", {"metadata": {"tenant": "t"}})
        assert sorted(response["session_ids"]) == sorted([first, second])
        assert seen == [("deleted", first), ("added", second), ("deleted", second)]


def test_a_tree_delete_and_a_recreate_of_its_first_session_between_are_observed_in_commit_order() -> None:
    """Regression (as the purge's): ``session::delete_tree`` deletes a session per mutation;
    a re-create of one it deleted before its last must be observed after that delete."""
    with session_manager.open(store=MemoryStore()) as sm:
        root = sm.create().session_id
        child = sm.call("session::ensure", {"session_id": other_stripe(root, "child"),
                                            "metadata": {"parent_session_id": root}})["meta"]["session_id"]
        seen: list[tuple[str, str]] = []
        sm.observe({"function_id": CREATED}, lambda e: seen.append(("created", e["session_id"])))
        sm.observe({"function_id": DELETED}, lambda e: seen.append(("deleted", e["session_id"])))
        deleted_first: list[str] = []

        def recreate() -> None:  # whichever the tree deletes first is re-created before the second goes
            gone = root if sm.service.store.get_meta(root) is None else child
            deleted_first.append(gone)
            join(in_thread(lambda: sm.call("session::ensure", {"session_id": gone})))

        core = sm.service.core
        plain = core.mutating
        calls: list[str] = []

        def mutating(session_id: str) -> Any:
            calls.append(session_id)
            if len(calls) == 2:
                recreate()
            return plain(session_id)

        core.mutating = mutating  # type: ignore[method-assign]
        response = sm.call("session::delete-tree", {"session_id": root})
        core.mutating = plain  # type: ignore[method-assign]
        if len(response["deleted"]) < 2:
            pytest.skip(f"the tree deleted {response['deleted']} (no child link by that key)")
        gone = deleted_first[0]
        assert [s for s in seen if s[1] == gone] == [("deleted", gone), ("created", gone)], seen


@pytest.mark.parametrize("kind", ["memory", "fs"])
def test_observers_appending_back_on_the_same_and_another_session_from_several_threads(
        kind: str, tmp_path: Path) -> None:
    """An observer's own call (a call inside a delivery) neither deadlocks nor is lost or
    repeated: its events go after the delivery it runs in, each session's in commit order."""
    sm = session_manager.open(store=MemoryStore()) if kind == "memory" else session_manager.open(tmp_path / "d")
    with sm:
        a, b = sm.create().session_id, sm.create().session_id
        seen: dict[str, list[str]] = {a: [], b: []}
        lock = threading.Lock()

        def echo(e: dict[str, Any]) -> None:
            with lock:
                seen[e["session_id"]].append(e["entry_id"])
            entry = e["entry_id"]
            if entry.startswith("t"):  # the threads' entries echoed once, on the same session and on b
                sm.append(e["session_id"], message=user("echo"), entry_id=f"same-{entry}")
                sm.append(b, message=user("echo"), entry_id=f"other-{entry}")

        sm.observe({"function_id": ADDED}, echo)
        threads = [in_thread(lambda n=n: [sm.append(a, message=user("x"), entry_id=f"t{n}-{i}")
                                          for i in range(40)]) for n in range(3)]
        for t in threads:
            join(t)
        for sid in (a, b):
            stored = stored_path(sm, sid)
            assert seen[sid] == stored, sid  # exactly once each, in commit order
        assert len(seen[a]) == 2 * 120 and len(seen[b]) == 120


def test_an_observer_waiting_for_another_threads_call_does_not_deadlock_and_its_events_follow() -> None:
    """A call finding a delivery running leaves its events to that thread and returns (nobody
    waits): an observer that waits for such a call must not hang, and the call's events
    are delivered once, after the event being delivered."""
    with session_manager.open(store=MemoryStore()) as sm:
        sid = sm.create().session_id
        seen: list[str] = []

        def observer(e: dict[str, Any]) -> None:
            seen.append(e["entry_id"])
            if e["entry_id"] == "first":
                join(in_thread(lambda: sm.append(sid, message=user("x"), entry_id="second")))
                assert seen == ["first"]  # (not delivered inside this delivery)

        sm.observe({"function_id": ADDED}, observer)
        sm.append(sid, message=user("x"), entry_id="first")
        assert seen == ["first", "second"]  # delivered by the first call's thread before it returned


class FailingSettle(MemoryStore):
    """``settle`` (the wait for durability after a commit) fails when told to."""

    fail = False

    def settle(self) -> None:
        if self.fail:
            self.fail = False
            raise OSError(5, "injected fsync failure")
        super().settle()


def test_a_call_failing_after_its_commit_leaves_no_delivery_stuck() -> None:
    """A call that raises after its commit gives its number up: a later lone call still
    delivers its own events before it returns (nothing waits on the failed number)."""
    store = FailingSettle()
    with session_manager.open(store=store) as sm:
        sid = sm.create().session_id
        seen: list[str] = []
        sm.observe({"function_id": ADDED}, lambda e: seen.append(e["entry_id"]))
        store.fail = True
        with pytest.raises(SessionError):
            sm.append(sid, message=user("x"), entry_id="failed")
        sm.append(sid, message=user("x"), entry_id="after")
        assert seen[-1] == "after"
        assert "failed" not in seen  # (the call failed: its events with it, as before)


def test_an_observer_failing_does_not_stop_the_deliveries_after_it() -> None:
    """A failing observer's error is the caller's; the deliveries queued behind it still run,
    and the next call delivers its own before it returns."""
    with session_manager.open(store=MemoryStore()) as sm:
        sid = sm.create().session_id
        seen: list[str] = []

        def observer(e: dict[str, Any]) -> None:
            seen.append(e["entry_id"])
            if e["entry_id"] == "boom":
                join(in_thread(lambda: sm.append(sid, message=user("x"), entry_id="queued")))
                raise RuntimeError("observer failed")

        sm.observe({"function_id": ADDED}, observer)
        with contextlib.suppress(RuntimeError):  # (a host may log it instead)
            sm.append(sid, message=user("x"), entry_id="boom")
        assert seen == ["boom", "queued"]
        sm.append(sid, message=user("x"), entry_id="later")
        assert seen == ["boom", "queued", "later"]


def test_close_while_another_threads_delivery_is_pending_delivers_it_once() -> None:
    """close() waits for the calls in flight; a delivery pending behind a running one is
    still delivered (once) and nothing hangs."""
    sm = session_manager.open(store=MemoryStore())
    sid = sm.create().session_id
    seen: list[str] = []
    release = threading.Event()
    entered = threading.Event()

    def observer(e: dict[str, Any]) -> None:
        seen.append(e["entry_id"])
        if e["entry_id"] == "first":
            entered.set()
            assert release.wait(HANG_S)

    sm.observe({"function_id": ADDED}, observer)
    first = in_thread(lambda: sm.append(sid, message=user("x"), entry_id="first"))
    assert entered.wait(HANG_S)
    join(in_thread(lambda: sm.append(sid, message=user("x"), entry_id="second")))  # returns: pending
    closer = in_thread(sm.close)
    release.set()
    join(first)
    join(closer)
    assert seen == ["first", "second"]


def test_purges_racing_appends_deliver_every_event_once_in_commit_order() -> None:
    """Purges (a delete per session, numbered per delete) racing appends and re-creates:
    every event of each session observed once, its deletes and appends in commit order
    (after a delete, only a re-create; nothing appended before a delete observed after it)."""
    with session_manager.open(store=MemoryStore()) as sm:
        sids = [f"s{n}" for n in range(6)]
        for sid in sids:
            sm.call("session::ensure", {"session_id": sid, "metadata": {"tenant": "t"}})
        seen: dict[str, list[str]] = {sid: [] for sid in sids}
        lock = threading.Lock()

        def note(kind: str) -> Callable[[dict[str, Any]], None]:
            def handler(e: dict[str, Any]) -> None:
                with lock:
                    seen[e["session_id"]].append(kind)
            return handler

        for fid, kind in ((ADDED, "added"), (DELETED, "deleted"), (CREATED, "created")):
            sm.observe({"function_id": fid}, note(kind))
        stop = threading.Event()

        def writer(n: int) -> None:
            i = 0
            while not stop.is_set() and i < 400:
                sid = sids[(n + i) % len(sids)]
                try:
                    sm.append(sid, message=user("x"))
                except SessionError:
                    sm.call("session::ensure", {"session_id": sid, "metadata": {"tenant": "t"}})
                i += 1

        writers = [in_thread(lambda n=n: writer(n)) for n in range(2)]
        purger = in_thread(lambda: [sm.call("session::purge", {"metadata": {"tenant": "t"}}) for _ in range(20)])
        join(purger)
        stop.set()
        for t in writers:
            join(t)
        for sid in sids:
            kinds = seen[sid]
            exists = sm.service.store.get_meta(sid) is not None
            life = "live"
            for kind in kinds:  # a state machine over the session's observed events
                if kind == "deleted":
                    assert life == "live", (sid, kinds)
                    life = "gone"
                elif kind == "created":
                    assert life == "gone", (sid, kinds)
                    life = "live"
                else:
                    assert life == "live", (sid, kinds)
            assert (life == "live") == exists, (sid, kinds)


def test_observers_added_and_removed_mid_stream_leave_a_steady_observer_exact() -> None:
    """Observers coming and going while threads append: a steady observer still sees each
    event once, in each session's commit order."""
    with session_manager.open(store=MemoryStore()) as sm:
        a, b = sm.create().session_id, sm.create().session_id
        seen: dict[str, list[str]] = {a: [], b: []}
        lock = threading.Lock()

        def steady(e: dict[str, Any]) -> None:
            with lock:
                seen[e["session_id"]].append(e["entry_id"])

        sm.observe({"function_id": ADDED}, steady)
        done = threading.Event()

        def churn() -> None:
            while not done.is_set():
                sm.observe({"function_id": ADDED}, lambda e: None).dispose()

        churner = in_thread(churn)
        threads = [in_thread(lambda n=n: [sm.append((a, b)[(n + i) % 2], message=user("x"), entry_id=f"t{n}-{i}")
                                          for i in range(60)]) for n in range(3)]
        for t in threads:
            join(t)
        done.set()
        join(churner)
        for sid in (a, b):
            assert seen[sid] == stored_path(sm, sid)


def test_aio_many_tasks_observe_each_sessions_commit_order() -> None:
    """The aio manager's calls run on its worker threads: with many tasks at once, a stream
    still gets each event once, in each session's commit order."""

    async def main() -> None:
        async with aio.open(store=MemoryStore(), max_workers=4) as asm:
            a = (await asm.create()).session_id
            b = (await asm.create()).session_id
            total = 200
            got: dict[str, list[str]] = {a: [], b: []}
            async with asm.events(ADDED) as events:
                await asyncio.gather(*(asm.append((a, b)[i % 2], message=user("x"), entry_id=f"e{i}")
                                       for i in range(total)))

                async def drain() -> None:
                    n = 0
                    async for event in events:
                        got[event["session_id"]].append(event["entry_id"])
                        n += 1
                        if n == total:
                            return

                await asyncio.wait_for(drain(), HANG_S)
            for sid in (a, b):  # (the embedded manager underneath holds the stored paths)
                assert got[sid] == stored_path(asm.sync, sid)

    asyncio.run(main())
