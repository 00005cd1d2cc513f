"""Attacks on the LangGraph checkpointer's contract (issue 29, review 6): namespaces,
pending writes (idempotency, special writes), list's filters, before and limit,
copy / delete_for_runs / prune, concurrent writers, cancellation and restarts,
over fs, sqlite and postgres; compared with LangGraph's own InMemorySaver where
it implements the method. Also the transcript adapters' cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import enum
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")

from langgraph.checkpoint.base import ERROR, INTERRUPT, RESUME, WRITES_IDX_MAP, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

import session_manager
from session_manager.adapters.langgraph import SessionManagerSaver
from tests import pg_support
from tests.unit.attack_support import Held, cancel_twice_while_held, run_spawned
from tests.unit.store_openers import Opener, opener_fixture  # noqa: F401 (the fixture "opener")


def config(thread: str, checkpoint_id: str | None = None, ns: str = "") -> Any:
    configurable: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def cid(n: int) -> str:
    """Checkpoint ids that sort as LangGraph's (time-ordered uuid6 text) do."""
    return f"1f0{n:05d}-0000-6000-8000-000000000000"


def checkpoint(n: int, values: dict[str, Any], versions: dict[str, Any]) -> Any:
    c = empty_checkpoint()
    c["id"] = cid(n)
    c["ts"] = f"2026-01-01T00:00:{n:02d}+00:00"
    c["channel_values"] = values
    c["channel_versions"] = versions
    return c


def view(t: Any) -> Any:
    """A checkpoint tuple as comparable data."""
    if t is None:
        return None
    return (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)


WHEN = datetime.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone.utc)
ODD = "n\u00e9e \u0000 \U0001f600 \u202e"


def build(saver: Any) -> None:
    """A thread with two namespaces sharing checkpoint ids, branches, pending writes
    (regular ones written twice, special ones replaced), odd values and nested metadata."""
    parent: str | None = None
    for n in range(5):
        values = {"a": [n, ODD, b"\x00\xff" * n], "big": 2**63 - 1 - n, "neg": -(2**63)} if n != 3 else {"a": None}
        versions = {"a": n + 1, "big": 1} if n == 0 else {"a": n + 1}
        meta = {"step": n, "source": "loop", "run_id": f"run-{n % 2}",
                "info": {"tags": ["x", ODD], "n": n % 2, "deep": {"f": 1e308, "z": -0.0}}}
        if n == 2:  # a value JSON does not hold: the metadata goes through the serializer
            meta["when"] = WHEN
        saver.put(config("t", parent), checkpoint(n, values, {"a": n + 1, "big": 1}), meta,
                  versions if n != 3 else {"a": n + 1})
        parent = cid(n)
    # a branch: a child of checkpoint 1 (time travel)
    saver.put(config("t", cid(1)), checkpoint(7, {"a": "branch"}, {"a": "9"}), {"step": 2, "source": "fork"},
              {"a": "9"})
    # the subgraph namespace: the same ids, other values
    for n in range(2):
        saver.put(config("t", cid(n - 1) if n else None, "sub:1"), checkpoint(n, {"s": f"sub{n}"}, {"s": n + 1}),
                  {"step": n, "source": "sub"}, {"s": n + 1})
    saver.put_writes(config("t", cid(1)), [("a", 1), ("b", ODD)], "task-1", "path-1")
    saver.put_writes(config("t", cid(1)), [("a", 99), ("b", 98), ("c", 3)], "task-1", "path-1")  # a, b kept
    saver.put_writes(config("t", cid(1)), [(ERROR, "first error")], "task-2")
    saver.put_writes(config("t", cid(1)), [(ERROR, "second error")], "task-2")  # special: replaces
    saver.put_writes(config("t", cid(1)), [(INTERRUPT, {"value": "ask"}), (RESUME, "yes")], "task-3", "p3")
    saver.put_writes(config("t", cid(1), "sub:1"), [("s", "only in sub")], "task-1")
    saver.put_writes(config("t", cid(4)), [("a", "after")], "task-9")
    # checkpoint 4 put again (a replayed put): it replaces the first, its writes stay
    saver.put(config("t", cid(3)), checkpoint(4, {"a": "again"}, {"a": 5, "big": 1}),
              {"step": 4, "source": "again", "run_id": "run-0"}, {"a": 5})
    saver.put(config("u"), checkpoint(0, {"a": 0}, {"a": 1}), {"step": 0, "source": "input", "run_id": "run-0"},
              {"a": 1})


def read(saver: Any) -> dict[str, Any]:
    """Everything the read methods say about the built threads."""
    out: dict[str, Any] = {}
    for ns in ("", "sub:1", "none"):
        out[f"latest {ns}"] = view(saver.get_tuple(config("t", ns=ns)))
        for n in (0, 1, 3, 4, 7):
            out[f"get {ns} {n}"] = view(saver.get_tuple(config("t", cid(n), ns)))
        out[f"list {ns}"] = [view(t) for t in saver.list(config("t", ns=ns))]
        out[f"list {ns} limit 2"] = [view(t) for t in saver.list(config("t", ns=ns), limit=2)]
        out[f"list {ns} before 3"] = [view(t) for t in saver.list(config("t", ns=ns), before=config("t", cid(3)))]
        out[f"list {ns} before 3 limit 1"] = [
            view(t) for t in saver.list(config("t", ns=ns), before=config("t", cid(3)), limit=1)]
    filters = [{"step": 1}, {"source": "loop", "run_id": "run-1"},
               {"info": {"tags": ["x", ODD], "n": 1, "deep": {"f": 1e308, "z": -0.0}}},
               {"info": {"n": 1}}, {"nope": None}, {"step": 2}, {"run_id": "run-0"}, {"when": WHEN},
               {"when": WHEN.isoformat()}]
    whole = {"configurable": {"thread_id": "t"}}  # every namespace
    for i, f in enumerate(filters):
        out[f"filter {i}"] = sorted(repr(view(t)) for t in saver.list(whole, filter=f))
        out[f"filter all threads {i}"] = sorted(repr(view(t)) for t in saver.list(None, filter=f))
    out["all namespaces"] = sorted(repr(view(t)) for t in saver.list(whole))
    out["one id"] = [view(t) for t in saver.list(config("t", cid(1)))]
    out["one id, every namespace"] = sorted(
        repr(view(t)) for t in saver.list({"configurable": {"thread_id": "t", "checkpoint_id": cid(1)}}))
    for limit in (0, -1, 1):
        out[f"limit {limit}"] = [view(t) for t in saver.list(config("t"), limit=limit)]
    out["all namespaces, before 1"] = sorted(repr(view(t)) for t in saver.list(whole, before=config("t", cid(1))))
    return out


def test_namespaces_writes_filters_before_limit_match_in_memory_saver_and_survive_a_restart(opener: Opener) -> None:
    # Prevents: one namespace's checkpoints, values or writes showing in another with the same
    # checkpoint id; a regular pending write stored twice or replaced on a retry, a special one
    # (error, interrupt: negative WRITES_IDX_MAP indexes) not replaced; list's before / limit /
    # nested metadata filters picking other checkpoints than LangGraph's InMemorySaver; odd values
    # (NUL and astral text, bytes, int64 limits, 1e308, -0.0) changed; any of it after a restart.
    assert WRITES_IDX_MAP[ERROR] < 0 and WRITES_IDX_MAP[INTERRUPT] < 0
    reference = InMemorySaver()
    build(reference)
    expected = read(reference)
    sm = opener()
    try:
        saver = SessionManagerSaver(sm)
        build(saver)
        assert read(saver) == expected
    finally:
        sm.close()
    sm = opener()
    try:
        assert read(SessionManagerSaver(sm)) == expected
    finally:
        sm.close()


def test_copy_thread_then_writes_to_both_stay_apart(opener: Opener) -> None:
    # Prevents: a copy sharing state with its source (a later write to one showing in the other),
    # a copy missing a namespace, branch or pending write, a second copy failing, or the copy lost
    # over a restart.
    sm = opener()
    try:
        saver = SessionManagerSaver(sm)
        build(saver)
        before = read(saver)
        saver.copy_thread("t", "copy")
        saver.copy_thread("t", "copy")  # again: nothing doubled
        copied = {k: [view(t) for t in saver.list(config("copy", ns=ns))] for k, ns in (("root", ""), ("sub", "sub:1"))}
        source = {k: [view(t) for t in saver.list(config("t", ns=ns))] for k, ns in (("root", ""), ("sub", "sub:1"))}

        def retarget(views: list[Any]) -> list[Any]:
            return [repr(v).replace("'thread_id': 't'", "'thread_id': 'copy'") for v in views]

        assert {k: [repr(v) for v in vs] for k, vs in copied.items()} == {k: retarget(vs) for k, vs in source.items()}
        saver.put(config("copy", cid(4)), checkpoint(8, {"a": "copy only"}, {"a": "c8"}), {"step": 8}, {"a": "c8"})
        saver.put_writes(config("copy", cid(1)), [("z", "copy write")], "task-c")
        saver.put(config("t", cid(4)), checkpoint(9, {"a": "source only"}, {"a": "s9"}), {"step": 9}, {"a": "s9"})
        assert saver.get_tuple(config("copy")).checkpoint["channel_values"]["a"] == "copy only"
        assert saver.get_tuple(config("t")).checkpoint["channel_values"]["a"] == "source only"
        assert saver.get_tuple(config("t", cid(8))) is None and saver.get_tuple(config("copy", cid(9))) is None
        assert ("task-c", "z", "copy write") in saver.get_tuple(config("copy", cid(1))).pending_writes
        assert ("task-c", "z", "copy write") not in saver.get_tuple(config("t", cid(1))).pending_writes
        saver.delete_thread("t")
        assert saver.get_tuple(config("copy", cid(1))) is not None
    finally:
        sm.close()
    sm = opener()
    try:
        saver = SessionManagerSaver(sm)
        assert saver.get_tuple(config("t")) is None and list(saver.list(config("t"))) == []
        assert saver.get_tuple(config("copy")).checkpoint["channel_values"]["a"] == "copy only"
        every_ns = {"configurable": {"thread_id": "copy"}}
        assert len(list(saver.list(every_ns))) == len(before["list "]) + 1 + len(before["list sub:1"])
    finally:
        sm.close()


def test_delete_for_runs_and_prune_keep_what_they_must_across_a_restart(opener: Opener) -> None:
    # Prevents: delete_for_runs removing another run's checkpoints (or another thread's), keeping a
    # removed one's writes, or the kept checkpoints losing values introduced by removed ones;
    # keep_latest pruning a namespace's newest checkpoint; either undone by a restart.
    sm = opener()
    try:
        saver = SessionManagerSaver(sm)
        build(saver)
        latest_t = view(saver.get_tuple(config("t")))
        saver.delete_for_runs(["run-1"])  # checkpoints 1 and 3 of "t"
        left = [t.config["configurable"]["checkpoint_id"] for t in saver.list(config("t", ns=""))]
        assert left == [cid(7), cid(4), cid(2), cid(0)]
        assert saver.get_tuple(config("t", cid(1))) is None
        assert view(saver.get_tuple(config("t"))) == latest_t  # (its values came from 2 and 4: still there)
        assert saver.get_tuple(config("u")) is not None
        saver.prune(["t", "u", "never-made"], strategy="keep_latest")
        kept = sorted((t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"])
                      for t in saver.list(None))
        assert kept == sorted([("", cid(7)), ("sub:1", cid(1)), ("", cid(0))])
        assert view(saver.get_tuple(config("t"))) == latest_t
    finally:
        sm.close()
    sm = opener()
    try:
        saver = SessionManagerSaver(sm)
        assert view(saver.get_tuple(config("t"))) == latest_t
        assert len(list(saver.list(None))) == 3
        saver.prune(["t"], strategy="delete")
        assert list(saver.list(config("t"))) == [] and saver.get_tuple(config("u")) is not None
    finally:
        sm.close()


def test_concurrent_puts_and_writes_on_one_thread_from_threads_lose_nothing(opener: Opener) -> None:
    # Prevents: checkpoints or writes lost, or parents crossed, when several threads put chains
    # (one namespace each) and pending writes on one LangGraph thread at once, through one saver
    # and through a second saver over the same manager.
    sm = opener()
    try:
        savers = [SessionManagerSaver(sm), SessionManagerSaver(sm)]
        errors: list[BaseException] = []
        start = threading.Barrier(6)

        def chain(w: int) -> None:
            try:
                saver, ns, parent = savers[w % 2], f"w{w}", None
                start.wait(30)
                for n in range(10):
                    saver.put(config("busy", parent, ns), checkpoint(n, {"v": [w, n]}, {"v": n + 1}),
                              {"step": n, "w": w}, {"v": n + 1})
                    saver.put_writes(config("busy", cid(n), ns), [("v", [w, n, "write"])], f"task-{w}")
                    parent = cid(n)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=chain, args=(w,)) for w in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors and not any(t.is_alive() for t in threads)
        for saver in (SessionManagerSaver(sm), *savers):
            for w in range(6):
                got = list(saver.list(config("busy", ns=f"w{w}")))
                assert [t.checkpoint["channel_values"]["v"] for t in got] == [[w, n] for n in reversed(range(10))]
                assert [t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
                        for t in got] == [cid(n - 1) if n else None for n in reversed(range(10))]
                assert all(t.pending_writes == [(f"task-{w}", "v", [w, n, "write"])]
                           for t, n in zip(got, reversed(range(10)), strict=True))
    finally:
        sm.close()


class HeldPut:
    """Holds the saver's store writes (its typed append) until released."""

    def __init__(self, sm: Any) -> None:
        self.entered, self.release, self.landed = threading.Event(), threading.Event(), threading.Event()
        real = sm._append_owned

        def append(*args: Any, **kwargs: Any) -> Any:
            if not self.release.is_set():
                self.entered.set()
                self.release.wait(30)
            out = real(*args, **kwargs)
            self.landed.set()
            return out

        sm._append_owned = append


@pytest.mark.parametrize("method", ["aput", "aput_writes"])
def test_twice_cancelled_async_writes_have_landed_when_cancelled_error_is_seen(method: str, tmp_path: Path) -> None:
    # Prevents: a second cancellation surfacing CancelledError while the checkpoint (or the
    # pending writes) is still being written, so it lands unannounced.
    with session_manager.open(tmp_path / "d") as sm:
        saver = SessionManagerSaver(sm)
        saver.put(config("c"), checkpoint(0, {"a": 0}, {"a": 1}), {"step": 0}, {"a": 1})
        held = HeldPut(sm)

        def start() -> Any:
            if method == "aput":
                return saver.aput(config("c", cid(0)), checkpoint(1, {"a": 1}, {"a": 2}), {"step": 1}, {"a": 2})
            return saver.aput_writes(config("c", cid(0)), [("a", "w")], "task")

        try:
            assert asyncio.run(cancel_twice_while_held(held, start)) == [True]
        finally:
            held.release.set()
        got = saver.get_tuple(config("c"))
        assert got is not None
        assert (got.checkpoint["id"], got.pending_writes) == (
            (cid(1), []) if method == "aput" else (cid(0), [("task", "a", "w")]))


# -- the transcript adapters: cancelled twice ------------------------------------------------


@pytest.mark.parametrize("which", ["add_items", "pop_item", "clear_session", "aadd_messages", "aclear"])
def test_transcript_writes_cancelled_twice_have_settled_when_cancelled_error_is_seen(
        which: str, tmp_path: Path) -> None:
    # Prevents: a second cancellation of an Agents SDK session's or a LangChain history's async
    # write surfacing before the write settled.
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from importlib.util import find_spec

    if which in ("add_items", "pop_item", "clear_session") and find_spec("agents") is None:
        pytest.skip("the openai-agents extra is not installed")
    from langchain_core.messages import HumanMessage

    from session_manager.adapters.langchain import SessionChatMessageHistory
    from session_manager.adapters.openai_agents import AgentsSession

    with session_manager.open(tmp_path / "d") as sm:
        agents, history = AgentsSession("s", sm), SessionChatMessageHistory("s", sm)
        asyncio.run(agents.add_items([{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]))
        function = {"add_items": "session::append", "pop_item": "session::set-active-leaf",
                    "clear_session": "session::delete", "aadd_messages": "session::append",
                    "aclear": "session::delete"}[which]
        held = Held(sm, function)
        start = {"add_items": lambda: agents.add_items([{"role": "user", "content": "three"}]),
                 "pop_item": agents.pop_item, "clear_session": agents.clear_session,
                 "aadd_messages": lambda: history.aadd_messages([HumanMessage("three")]),
                 "aclear": history.aclear}[which]

        try:
            assert asyncio.run(cancel_twice_while_held(held, start, function)) == [True]
        finally:
            held.release.set()


# -- several processes on one thread; paging -------------------------------------------------


def _chain_in_process(kind: str, where: str, w: int, start: Any) -> None:
    """A child process: a chain of checkpoints (and writes) in namespace ``w{w}`` of thread "multi"."""
    sm = session_manager.open(store=pg_support.open_store(where)) if kind == "postgres" \
        else session_manager.open(f"sqlite:///{where}")
    try:
        saver, parent = SessionManagerSaver(sm), None
        start.wait(60)
        for n in range(12):
            saver.put(config("multi", parent, f"w{w}"), checkpoint(n, {"v": [w, n]}, {"v": n + 1}), {"step": n},
                      {"v": n + 1})
            saver.put_writes(config("multi", cid(n), f"w{w}"), [("v", [w, n])], f"task-{w}")
            parent = cid(n)
            if n == 5:
                assert saver.get_tuple(config("multi", ns=f"w{w}")).checkpoint["id"] == cid(5)
    finally:
        sm.close()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_writers_in_several_processes_on_one_thread_lose_nothing(kind: str, tmp_path: Path) -> None:
    # Prevents: a saver writing with the index its own last write left (no read first) losing or
    # misplacing another process's checkpoints on the same thread, or its own parents crossing
    # another process's entries.
    with contextlib.ExitStack() as stack:
        where = stack.enter_context(pg_support.schema()) if kind == "postgres" else f"{tmp_path.resolve()}/m.db"
        assert run_spawned(_chain_in_process, [(kind, where, w) for w in range(3)]) == [0, 0, 0]
        sm = session_manager.open(store=pg_support.open_store(where)) if kind == "postgres" \
            else session_manager.open(f"sqlite:///{where}")
        try:
            saver = SessionManagerSaver(sm)
            for w in range(3):
                got = list(saver.list(config("multi", ns=f"w{w}")))
                assert [t.checkpoint["channel_values"]["v"] for t in got] == [[w, n] for n in reversed(range(12))]
                assert [t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
                        for t in got] == [cid(n - 1) if n else None for n in reversed(range(12))]
                assert [t.pending_writes for t in got] == [[(f"task-{w}", "v", [w, n])] for n in reversed(range(12))]
        finally:
            sm.close()


def test_every_thread_read_pages_through_the_store(tmp_path: Path) -> None:
    # Prevents: list(None), delete_for_runs or prune seeing only the store's first page of
    # sessions (a store whose max_list_limit is small), or a thread's other sessions (not
    # LangGraph threads) taken for threads.
    with session_manager.open(tmp_path / "d", max_list_limit=2) as sm:
        saver = SessionManagerSaver(sm)
        sm.call("session::ensure", {"session_id": "not-a-thread"})
        sm.call("session::append", {"session_id": "not-a-thread", "custom": {"custom_type": "x", "data": 1}})
        for t in range(5):
            parent = None
            for n in range(3):
                saver.put(config(f"t{t}", parent), checkpoint(n, {"a": n}, {"a": n + 1}),
                          {"step": n, "run_id": f"r{n}"}, {"a": n + 1})
                parent = cid(n)
        assert len(list(saver.list(None))) == 15
        assert len(list(saver.list(None, limit=7))) == 7
        saver.delete_for_runs(["r1"])
        assert sorted({t.metadata["run_id"] for t in saver.list(None)}) == ["r0", "r2"]
        assert len(list(saver.list(None))) == 10
        saver.prune([f"t{t}" for t in range(5)])
        assert [t.checkpoint["channel_values"] for t in saver.list(None)] == [{"a": 2}] * 5


@pytest.mark.parametrize("method", ["adelete_thread", "acopy_thread", "adelete_for_runs", "aprune"])
def test_twice_cancelled_thread_operations_have_settled_when_cancelled_error_is_seen(
        method: str, tmp_path: Path) -> None:
    # Prevents: a second cancellation of delete / copy / delete_for_runs / prune surfacing before
    # the write settled (the thread then changes after the caller was told it was cancelled).
    with session_manager.open(tmp_path / "d") as sm:
        saver = SessionManagerSaver(sm)
        saver.put(config("t"), checkpoint(0, {"a": 0}, {"a": 1}), {"step": 0, "run_id": "r"}, {"a": 1})
        saver.put(config("t", cid(0)), checkpoint(1, {"a": 1}, {"a": 2}), {"step": 1, "run_id": "s"}, {"a": 2})
        function = "session::delete" if method == "adelete_thread" else "session::append"
        held = Held(sm, function)
        start = {"adelete_thread": lambda: saver.adelete_thread("t"),
                 "acopy_thread": lambda: saver.acopy_thread("t", "copy"),
                 "adelete_for_runs": lambda: saver.adelete_for_runs(["r"]),
                 "aprune": lambda: saver.aprune(["t"])}[method]

        try:
            assert asyncio.run(cancel_twice_while_held(held, start, function)) == [True]
        finally:
            held.release.set()
        sm.call = held.real
        left = [t.checkpoint["id"] for t in saver.list(config("t"))]
        assert left == {"adelete_thread": [], "acopy_thread": [cid(1), cid(0)], "adelete_for_runs": [cid(1)],
                        "aprune": [cid(1)]}[method]


class Level(enum.IntEnum):
    HIGH = 3


def test_metadata_int_enum_keeps_its_type_as_through_langgraphs_serializer(tmp_path: Path) -> None:
    # Prevents: checkpoint metadata values coming back of another type than LangGraph's
    # serializer gives (an IntEnum as a plain int).
    reference = InMemorySaver()
    with session_manager.open(tmp_path / "d") as sm:
        saver = SessionManagerSaver(sm)
        for s in (reference, saver):
            s.put(config("t"), checkpoint(0, {"a": 1}, {"a": 1}), {"step": 0, "level": Level.HIGH}, {"a": 1})
        assert type(reference.get_tuple(config("t")).metadata["level"]) is Level
        assert type(saver.get_tuple(config("t")).metadata["level"]) is Level


def test_the_sessions_tree_is_the_checkpoint_tree(opener: Opener) -> None:
    # Prevents: a checkpoint entry hanging from another than its parent checkpoint's entry (in
    # its own namespace), a namespace's first not from the root sentinel, writes not beside
    # their checkpoint; so the branch tree the tools draw is not LangGraph's.
    from session_manager.adapters._checkpoints import CHECKPOINT, ROOT_ID, WRITES

    sm = opener()
    try:
        build(SessionManagerSaver(sm))
        entries = {e["id"]: e for e in sm.service.store.entries("t")}
        by_key: dict[Any, str] = {}
        every: dict[Any, set[str]] = {}
        for e in entries.values():  # (in append order: a checkpoint put again is the later entry)
            if e.get("custom_type") == CHECKPOINT:
                by_key[(e["data"]["ns"], e["data"]["id"])] = e["id"]
                every.setdefault((e["data"]["ns"], e["data"]["id"]), set()).add(e["id"])
        for e in entries.values():
            data = e.get("data")
            if e.get("custom_type") == CHECKPOINT:
                parent = data["parent"]
                expected = ROOT_ID if parent is None else by_key[(data["ns"], parent)]
                if parent is not None and data["id"] == cid(4) and e["id"] != by_key[(data["ns"], cid(4))]:
                    continue  # the first put of checkpoint 4, replaced
                assert e["parent_id"] == expected, (data["ns"], data["id"])
            elif e.get("custom_type") == WRITES:
                # beside the checkpoint's entry they were written for (checkpoint 4's first put)
                assert e["parent_id"] in every[(data["ns"], data["checkpoint_id"])]
        assert sorted(k for k in by_key if k[0] == "") == [("", cid(n)) for n in (0, 1, 2, 3, 4, 7)]
    finally:
        sm.close()


def test_async_puts_from_many_tasks_over_an_aio_manager_lose_nothing(tmp_path: Path) -> None:
    # Prevents: the async methods over an AsyncSessionManager losing or crossing checkpoints
    # when many tasks put chains (one namespace each) on one thread at once.
    from session_manager import aio

    async def chain(saver: Any, w: int) -> None:
        parent = None
        for n in range(6):
            await saver.aput(config("a", parent, f"w{w}"), checkpoint(n, {"v": [w, n]}, {"v": n + 1}), {"step": n},
                             {"v": n + 1})
            await saver.aput_writes(config("a", cid(n), f"w{w}"), [("v", n)], f"t{w}")
            parent = cid(n)

    async def main() -> None:
        async with aio.open(tmp_path / "d") as asm:
            saver = SessionManagerSaver(asm)
            await asyncio.gather(*(chain(saver, w) for w in range(8)))
            for w in range(8):
                got = [t async for t in saver.alist(config("a", ns=f"w{w}"))]
                assert [t.checkpoint["channel_values"]["v"] for t in got] == [[w, n] for n in reversed(range(6))]
                assert [t.pending_writes for t in got] == [[(f"t{w}", "v", n)] for n in reversed(range(6))]
                assert (await saver.aget_tuple(config("a", ns=f"w{w}"))).checkpoint["id"] == cid(5)

    asyncio.run(main())


def test_tenant_savers_list_and_delete_runs_only_in_their_own_threads(opener: Opener) -> None:
    # Prevents: list(None) or delete_for_runs of a saver made with tenant metadata reaching
    # another tenant's threads (same run ids), or missing its own after a restart.
    def fill(saver: Any, prefix: str) -> None:
        for t in range(3):
            saver.put(config(f"{prefix}{t}"), checkpoint(0, {"a": prefix}, {"a": 1}), {"step": 0, "run_id": "r"},
                      {"a": 1})
            saver.put(config(f"{prefix}{t}", cid(0)), checkpoint(1, {"a": prefix}, {"a": 2}),
                      {"step": 1, "run_id": "keep"}, {"a": 2})

    sm = opener()
    try:
        a, b = SessionManagerSaver(sm, metadata={"tenant": "a"}), SessionManagerSaver(sm, metadata={"tenant": "b"})
        fill(a, "a")
        fill(b, "b")
        a.delete_for_runs(["r"])
    finally:
        sm.close()
    sm = opener()
    try:
        a, b = SessionManagerSaver(sm, metadata={"tenant": "a"}), SessionManagerSaver(sm, metadata={"tenant": "b"})
        every = SessionManagerSaver(sm)
        assert sorted(t.config["configurable"]["thread_id"] for t in a.list(None)) == ["a0", "a1", "a2"]
        assert sorted((t.config["configurable"]["thread_id"], t.metadata["run_id"]) for t in b.list(None)) == sorted(
            (f"b{t}", run) for t in range(3) for run in ("r", "keep"))
        assert len(list(every.list(None))) == 9
    finally:
        sm.close()
