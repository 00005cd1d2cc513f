"""Attacks on the LangGraph checkpointer's channel deltas (review 12): a value stored as a delta
of its channel's newest whole value must read back byte for byte what the serializer made of
what was put (get_tuple, list, aget_tuple), after session::fork, time travel, prune,
delete_for_runs, copy_thread, delete and re-put, a restart, the saver's memory bound, fs
compaction and two writers in two processes, over fs, sqlite and postgres."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

import session_manager
from session_manager.adapters import langgraph as lg
from session_manager.adapters._checkpoints import CHECKPOINT
from session_manager.adapters.langgraph import SessionManagerSaver
from tests import pg_support

SERDE = JsonPlusSerializer()
Opener = Any


def _open(kind: str, where: str) -> Any:
    if kind == "fs":
        return session_manager.open(Path(where) / "d")
    if kind == "sqlite":
        return session_manager.open(f"sqlite:///{Path(where).resolve()}/d.db")
    return session_manager.open(store=pg_support.open_store(where))


@pytest.fixture(params=["fs", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(store kind, its place): a store opened again at each ``_open`` (a restart)."""
    yield from _place(request.param, tmp_path)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared_where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """:func:`where` for the stores several writers share (fs takes one writing store per data_dir)."""
    yield from _place(request.param, tmp_path)


def _place(kind: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    if kind != "postgres":
        yield kind, str(tmp_path)
        return
    pg_support.require()
    name = f"sm_review12_{uuid.uuid4().hex[:10]}"
    try:
        yield "postgres", name
    finally:
        pg_support.drop_schema(name)


def message(i: int, pad: int = 8) -> Any:
    return (HumanMessage if i % 2 == 0 else AIMessage)(f"message {i}: " + "lorem ipsum " * pad, id=f"m{i}")


HISTORY = [message(i) for i in range(40)]


def checkpoint(cid: str, values: dict[str, Any], versions: dict[str, str]) -> Any:
    return {"v": 4, "id": cid, "ts": "t", "channel_values": values, "channel_versions": versions,
            "versions_seen": {}, "updated_channels": list(values)}


class Log:
    """Puts through a saver, remembering the serializer's bytes of each checkpoint's values
    (all its channels, as LangGraph's own savers would give them back)."""

    def __init__(self, saver: SessionManagerSaver) -> None:
        self.saver = saver
        self.expected: dict[tuple[str, str, str], dict[str, bytes]] = {}
        self.state: dict[tuple[str, str, str], tuple[dict[str, Any], dict[str, str]]] = {}
        self.counter = 0

    def put(self, thread: str, parent: str | None, cid: str, changed: dict[str, Any], ns: str = "") -> str:
        """Put checkpoint ``cid`` as a child of ``parent`` with ``changed`` channel values (the
        others carried over from the parent's, as LangGraph does)."""
        values, versions = ({}, {}) if parent is None else self.state[(thread, ns, parent)]
        values, versions = dict(values), dict(versions)
        new_versions = {}
        for channel, value in changed.items():
            self.counter += 1
            new_versions[channel] = f"{self.counter:08}.{uuid.uuid4().int % 10**6:06}"
            values[channel] = value
            versions[channel] = new_versions[channel]
        configurable = {"thread_id": thread, "checkpoint_ns": ns}
        if parent is not None:
            configurable["checkpoint_id"] = parent
        self.saver.put({"configurable": configurable}, checkpoint(cid, values, versions), {"step": self.counter},
                       new_versions)
        self.state[(thread, ns, cid)] = (values, versions)
        self.expected[(thread, ns, cid)] = {c: SERDE.dumps_typed(v)[1] for c, v in values.items()}
        return cid

    def check(self, saver: SessionManagerSaver, threads: dict[str, str] | None = None,
              gone: set[tuple[str, str, str]] = frozenset()) -> int:  # type: ignore[assignment]
        """Every remembered checkpoint (of thread ``t`` read as ``threads.get(t, t)``) reads back
        byte-exact through get_tuple, list and aget_tuple; ``gone`` ones not at all. The count read."""
        threads = threads or {}
        read = 0
        for (thread, ns, cid), want in self.expected.items():
            as_thread = threads.get(thread, thread)
            cfg = {"configurable": {"thread_id": as_thread, "checkpoint_ns": ns, "checkpoint_id": cid}}
            got = saver.get_tuple(cfg)
            if (thread, ns, cid) in gone:
                assert got is None, (thread, ns, cid)
                continue
            assert got is not None, (thread, ns, cid)
            have = {c: SERDE.dumps_typed(v)[1] for c, v in got.checkpoint["channel_values"].items()}
            assert have == want, (thread, ns, cid)
            listed = list(saver.list(cfg))
            assert len(listed) == 1 and listed[0].checkpoint["channel_values"] == got.checkpoint["channel_values"]
            read += 1
        for (thread, ns, cid), want in list(self.expected.items())[-3:]:
            if (thread, ns, cid) in gone:
                continue
            cfg = {"configurable": {"thread_id": threads.get(thread, thread), "checkpoint_ns": ns,
                                    "checkpoint_id": cid}}
            got = asyncio.run(saver.aget_tuple(cfg))
            assert got is not None
            assert {c: SERDE.dumps_typed(v)[1] for c, v in got.checkpoint["channel_values"].items()} == want
        return read


def deltas(sm: Any, thread: str) -> list[list[Any]]:
    return [v for e in sm.service.store.entries(thread) if e.get("custom_type") == CHECKPOINT
            for v in e["data"]["values"].values() if len(v) == 7]


def checkpoint_entries(sm: Any, thread: str, ns: str = "") -> dict[str, dict[str, Any]]:
    return {e["data"]["id"]: e for e in sm.service.store.entries(thread)
            if e.get("custom_type") == CHECKPOINT and e["data"]["ns"] == ns}


# -- session::fork ------------------------------------------------------------------------


def test_a_fork_copy_reads_a_delta_whose_base_sits_above_a_small_whole_value(where: tuple[str, str]) -> None:
    # Prevents: a delta read in a session::fork copy (its base named by an entry id the copy does
    # not have) taking as its base the nearest whole value above it even when that value is too
    # small to be a base (under 512 bytes: the saver never makes a delta of it), so the delta is
    # joined to the wrong bytes: an error, or another value.
    with _open(*where) as sm:
        log = Log(SessionManagerSaver(sm))
        log.put("f", None, "1f0-01", {"messages": HISTORY[:10]})  # a base
        log.put("f", "1f0-01", "1f0-02", {"messages": HISTORY[:1]})  # whole, too small to be a base
        log.put("f", "1f0-02", "1f0-03", {"messages": HISTORY[:12]})  # a delta of 1f0-01
        assert len(deltas(sm, "f")) == 1
        log.check(SessionManagerSaver(sm))
        tip = checkpoint_entries(sm, "f")["1f0-03"]["id"]
        copy = sm.call("session::fork", {"session_id": "f", "entry_id": tip})["session_id"]
        log.check(SessionManagerSaver(sm), threads={"f": copy})
        # The copy copied again by copy_thread: the saver that copied it reads with the index the
        # copy left (its lines started again at each copied entry), so walks up to the base.
        saver = SessionManagerSaver(sm)
        saver.copy_thread(copy, "f3")
        log.check(saver, threads={"f": "f3"})
    with _open(*where) as sm:  # a restart
        log.check(SessionManagerSaver(sm), threads={"f": copy})
        log.check(SessionManagerSaver(sm), threads={"f": "f3"})


def test_deltas_on_a_fork_copy_and_time_travel_in_it_read_back_after_a_restart(where: tuple[str, str]) -> None:
    # Prevents: puts continuing a session::fork copy (its root under a new id, its deltas naming
    # entry ids it does not hold) or travelling back in it making deltas of a value not on their
    # path, or the copy's index (its lines derived from the copied path alone) reading one wrong;
    # in a subgraph namespace too.
    with _open(*where) as sm:
        log = Log(SessionManagerSaver(sm))
        for ns in ("", "sub:1"):
            log.put("g", None, "1f0-01", {"messages": HISTORY[:8], "n": 1}, ns)
            log.put("g", "1f0-01", "1f0-02", {"messages": HISTORY[:9], "n": 2}, ns)
            log.put("g", "1f0-01", "1f0-03", {"messages": [*HISTORY[:8], message(99)]}, ns)  # a branch between
            log.put("g", "1f0-02", "1f0-04", {"messages": HISTORY[:11]}, ns)
            log.put("g", "1f0-04", "1f0-05", {"messages": HISTORY[:3]}, ns)  # cut back, small: whole
            log.put("g", "1f0-05", "1f0-06", {"messages": HISTORY[:12]}, ns)
        assert len(deltas(sm, "g")) >= 4
        log.check(SessionManagerSaver(sm))
        at = checkpoint_entries(sm, "g")
        copy = sm.call("session::fork", {"session_id": "g", "entry_id": at["1f0-06"]["id"]})["session_id"]
        forked = Log(SessionManagerSaver(sm))
        forked.state = {(copy, ns, cid): state for (t, ns, cid), state in log.state.items()
                        if cid in ("1f0-01", "1f0-02", "1f0-04", "1f0-05", "1f0-06")}
        forked.expected = {(copy, ns, cid): want for (t, ns, cid), want in log.expected.items()
                           if cid in ("1f0-01", "1f0-02", "1f0-04", "1f0-05", "1f0-06") and ns == ""}
        forked.put(copy, "1f0-06", "1f0-07", {"messages": HISTORY[:14]})
        forked.put(copy, "1f0-07", "1f0-08", {"messages": HISTORY[:15]})
        forked.put(copy, "1f0-04", "1f0-09", {"messages": HISTORY[:13]})  # time travel in the copy
        forked.put(copy, "1f0-09", "1f0-10", {"messages": HISTORY[:16]})
        forked.put(copy, "1f0-08", "1f0-11", {"messages": HISTORY[:17]})  # back to the other branch
        assert len(deltas(sm, copy)) >= 5  # the copied path's and the new ones'
        forked.check(forked.saver)
        forked.check(SessionManagerSaver(sm))
        sub = checkpoint_entries(sm, "g", "sub:1")["1f0-06"]["id"]  # the subgraph namespace's path
        sub_copy = sm.call("session::fork", {"session_id": "g", "entry_id": sub})["session_id"]
        in_sub = Log(SessionManagerSaver(sm))
        in_sub.expected = {(sub_copy, ns, cid): want for (t, ns, cid), want in log.expected.items()
                           if cid in ("1f0-01", "1f0-02", "1f0-04", "1f0-05", "1f0-06") and ns == "sub:1"}
        in_sub.check(in_sub.saver)
    with _open(*where) as sm:
        forked.check(SessionManagerSaver(sm))
        log.check(SessionManagerSaver(sm))
        in_sub.check(SessionManagerSaver(sm))


# -- prune, delete_for_runs, copy_thread, delete_thread --------------------------------------


def test_deltas_read_back_after_prune_delete_for_runs_copy_and_delete_of_the_source(
        where: tuple[str, str]) -> None:
    # Prevents: a delta whose base's checkpoint prune or delete_for_runs removed (its entry stays)
    # reading wrong or failing, a put after them making a delta of a removed base wrongly, a copy
    # (same entry ids, its index's lines started again at every copied entry) losing a base when its
    # source is pruned or deleted, and a thread deleted and put again making a delta of a base of
    # the thread that was.
    with _open(*where) as sm:
        saver = SessionManagerSaver(sm)
        log = Log(saver)
        parent = None
        for step, n in enumerate([8, 9, 10, 11, 2, 12, 13]):
            cid = f"1f0-{step:02}"
            cfg_meta = {"run_id": f"run-{step % 3}"}
            log.counter += 1
            version = f"{log.counter:08}.5"
            cfg: Any = {"configurable": {"thread_id": "r", "checkpoint_ns": ""}}
            if parent:
                cfg["configurable"]["checkpoint_id"] = parent
            saver.put(cfg, checkpoint(cid, {"messages": HISTORY[:n]}, {"messages": version}), cfg_meta,
                      {"messages": version})
            log.state[("r", "", cid)] = ({"messages": HISTORY[:n]}, {"messages": version})
            log.expected[("r", "", cid)] = {"messages": SERDE.dumps_typed(HISTORY[:n])[1]}
            parent = cid
        assert len(deltas(sm, "r")) >= 4
        saver.delete_for_runs(["run-0"])  # 1f0-00 (a base), 1f0-03, 1f0-06 (the newest)
        gone = {("r", "", "1f0-00"), ("r", "", "1f0-03"), ("r", "", "1f0-06")}
        log.check(saver, gone=gone)
        log.check(SessionManagerSaver(sm), gone=gone)
        log.put("r", "1f0-05", "1f0-07", {"messages": HISTORY[:14]})  # after the newest was removed
        log.put("r", "1f0-07", "1f0-08", {"messages": HISTORY[:15]})
        saver.copy_thread("r", "r2")
        saver.prune(["r"], strategy="keep_latest")
        gone_r = {k for k in log.expected if k[1:] != ("", "1f0-08")}
        log.check(SessionManagerSaver(sm), gone=gone_r)
        copied = Log(saver)
        copied.expected = {("r2", ns, cid): w for (t, ns, cid), w in log.expected.items() if (t, ns, cid) not in gone}
        copied.state = {("r2", ns, cid): s for (t, ns, cid), s in log.state.items()}
        copied.check(SessionManagerSaver(sm))
        saver.prune(["r"], strategy="delete")
        copied.put("r2", "1f0-08", "1f0-09", {"messages": HISTORY[:16]})  # a put on the copy: its lines
        copied.put("r2", "1f0-09", "1f0-10", {"messages": HISTORY[:17]})
        copied.check(saver)
        copied.check(SessionManagerSaver(sm))
        assert saver.get_tuple({"configurable": {"thread_id": "r", "checkpoint_ns": ""}}) is None
        # The thread deleted, and put again by this saver and by another.
        again = Log(saver)
        again.put("r", None, "1f0-00", {"messages": HISTORY[:9]})
        SessionManagerSaver(sm).delete_thread("r")
        other = Log(SessionManagerSaver(sm))
        other.put("r", None, "1f0-00", {"messages": HISTORY[1:9]})
        again.saver = saver
        again.state = other.state
        again.expected = dict(other.expected)
        again.put("r", "1f0-00", "1f0-01", {"messages": HISTORY[1:11]})
        again.check(saver)
        again.check(SessionManagerSaver(sm))
    with _open(*where) as sm:
        copied.check(SessionManagerSaver(sm))
        again.check(SessionManagerSaver(sm))


# -- values -----------------------------------------------------------------------------------


class Point:
    """Not msgpack's own type: the serializer's pickle-free ext or another type."""


def test_values_of_every_shape_read_back_byte_exact(where: tuple[str, str]) -> None:
    # Prevents: a delta made where its bytes do not join back (a list shrunk then grown, equal to a
    # prefix, an item in the middle changed, the same size with other bytes, a value whose array
    # header changes width at 16 and 65,536 items, a huge one, raw bytes, the serializer's ext
    # types, text with bytes over 0x7F), or a read joining one wrong: through a restart too.
    import datetime

    ints = list(range(70_000))
    edited = [*HISTORY[:5], message(500), *HISTORY[6:12]]
    same_size = [*HISTORY[:11], HumanMessage(HISTORY[11].content.replace("l", "k"), id="m11")]
    shapes: list[dict[str, Any]] = [
        {"messages": HISTORY[:10]}, {"messages": HISTORY[:9]}, {"messages": HISTORY[:12]},  # cut, then grown
        {"messages": HISTORY[:4]}, {"messages": HISTORY[:12]}, {"messages": edited}, {"messages": HISTORY[:12]},
        {"messages": same_size}, {"messages": HISTORY[:12]}, {"messages": HISTORY[:15]},
        {"messages": HISTORY[:16]}, {"messages": HISTORY[:17]}, {"messages": HISTORY[:15]},  # 16 items
        {"messages": [message(i, 2000) for i in range(60)]},  # huge
        {"messages": [message(i, 2000) for i in range(61)]},
        {"ints": ints[:65_535]}, {"ints": ints[:65_536]}, {"ints": ints[:65_540]}, {"ints": ints[:65_530]},
        {"raw": b"\x92" + b"\xff" * 3000}, {"raw": b"\x92" + b"\xff" * 3001}, {"raw": b"\x92" + b"\xff" * 2999},
        {"text": "é" * 900}, {"text": "é" * 901 + "€"}, {"text": "é" * 900},
        {"mixed": [{"when": datetime.datetime(2026, 1, 1), "set": {1, 2}, "t": (1, "ü" * 300)}] * 3},
        {"mixed": [{"when": datetime.datetime(2026, 1, 1), "set": {1, 2}, "t": (1, "ü" * 300)}] * 4},
        {"mixed": [{"when": datetime.datetime(2026, 1, 1), "set": {1, 2}, "t": (1, "ü" * 300)}] * 2},
        {"messages": []}, {"messages": HISTORY[:12]}, {"messages": HISTORY[:12]},  # the same list again
    ]
    with _open(*where) as sm:
        log = Log(SessionManagerSaver(sm))
        parent = None
        for step, changed in enumerate(shapes):
            parent = log.put("v", parent, f"1f0-{step:03}", changed)
        made = deltas(sm, "v")
        assert len(made) >= 10 and {d[1] for d in made} == {"msgpack"}
        assert {len(d[2]) for d in made} >= {1, 3, 5}  # array headers of every width
        log.check(log.saver)
        log.check(SessionManagerSaver(sm))
    with _open(*where) as sm:
        log.check(SessionManagerSaver(sm))


def test_a_saver_past_its_thread_bound_puts_and_reads_deltas_from_threads_at_once(
        where: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the saver dropping a thread's index (and its kept bases) while another thread's put
    # or read holds it, so a delta is made of, or read against, a base the thread no longer has.
    import threading

    monkeypatch.setattr(lg, "_CACHED_THREADS", 2)
    with _open(*where) as sm:
        saver = SessionManagerSaver(sm)
        logs = {f"b{i}": Log(saver) for i in range(6)}
        errors: list[BaseException] = []

        def run(thread: str) -> None:
            try:
                parent = None
                for step, n in enumerate([8, 9, 10, 3, 11, 12, 13, 9, 14]):
                    parent = logs[thread].put(thread, parent, f"1f0-{step:02}", {"messages": HISTORY[:n]})
                    got = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
                    assert got is not None and got.checkpoint["channel_values"]["messages"] == HISTORY[:n]
            except BaseException as e:  # (reported below)
                errors.append(e)

        workers = [threading.Thread(target=run, args=(t,)) for t in logs]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        assert not errors, errors
        for thread, log in logs.items():
            assert deltas(sm, thread)
            log.check(saver)
    with _open(*where) as sm:
        for log in logs.values():
            log.check(SessionManagerSaver(sm))


def test_deltas_read_back_after_the_fs_log_is_compacted(tmp_path: Path) -> None:
    # Prevents: an fs log rewritten as its live state (compaction) losing or reordering the entry
    # a delta names, or the saver's kept base outliving what the store holds.
    with _open("fs", str(tmp_path)) as sm:
        log = Log(SessionManagerSaver(sm))
        parent = None
        for step, n in enumerate([8, 9, 10, 3, 11, 12]):
            parent = log.put("c", parent, f"1f0-{step:02}", {"messages": HISTORY[:n]})
        assert sm.service.store.compact("c") in (True, False)
        log.put("c", parent, "1f0-10", {"messages": HISTORY[:13]})
        log.check(log.saver)
        log.check(SessionManagerSaver(sm))
    with _open("fs", str(tmp_path)) as sm:
        log.check(SessionManagerSaver(sm))


# -- two writers ------------------------------------------------------------------------------


def _writer(kind: str, where: str, proc: int, out: str, start: Any) -> None:
    """One process's puts on thread "w": each a child of the newest checkpoint it reads (the other
    writer's, often; a stale one, when the other put landed between), its messages grown by one,
    every 7th cut back, every 5th a child of an older checkpoint (time travel); the serializer's
    bytes of each put's value written to ``out``."""
    import pickle

    put: dict[str, bytes] = {}
    with _open(kind, where) as sm:
        saver = SessionManagerSaver(sm)
        saver.get_tuple({"configurable": {"thread_id": "w", "checkpoint_ns": ""}})  # (warm: the puts overlap)
        start.wait(60)  # (a barrier: both processes opened)
        for step in range(40):
            latest = saver.get_tuple({"configurable": {"thread_id": "w", "checkpoint_ns": ""}})
            if latest is not None and step % 5 == 4:
                older = list(saver.list({"configurable": {"thread_id": "w", "checkpoint_ns": ""}}, limit=4))
                latest = older[-1]
            before = latest.checkpoint["channel_values"]["messages"] if latest is not None else HISTORY[:6]
            messages = [*before, message(1000 * proc + step)]
            if step % 7 == 6:
                messages = messages[: len(messages) // 2 + 1]
            cid = f"1f0-{step:04}-{proc}"
            version = f"{step + 1:08}.{proc}"
            cfg = latest.config if latest is not None else {"configurable": {"thread_id": "w", "checkpoint_ns": ""}}
            saver.put(cfg, checkpoint(cid, {"messages": messages}, {"messages": version}), {"step": step},
                      {"messages": version})
            put[cid] = SERDE.dumps_typed(messages)[1]
    with open(out, "wb") as f:
        pickle.dump(put, f)


@pytest.mark.parametrize("apart", ["processes", "threads"])
def test_two_writers_on_one_thread_make_deltas_that_read_back(shared_where: tuple[str, str], tmp_path: Path,
                                                               apart: str) -> None:
    # Prevents: a delta made by one writer (a process, or a store instance of its own in one
    # process) against a base from its own view of the thread while the other's checkpoints landed
    # (its line moved, or its put forked the thread), naming a base that is not on its path, or
    # reading one back wrong: each writer's puts read back byte-exact by a third saver.
    import pickle
    import threading

    where = shared_where
    outs = [str(tmp_path / f"out{p}") for p in (1, 2)]
    if apart == "processes":
        context = multiprocessing.get_context("spawn")
        barrier = context.Barrier(2)
        procs = [context.Process(target=_writer, args=(*where, p, outs[p - 1], barrier)) for p in (1, 2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(180)
        assert [p.exitcode for p in procs] == [0, 0]
    else:
        gate = threading.Barrier(2)
        workers = [threading.Thread(target=_writer, args=(*where, p, outs[p - 1], gate)) for p in (1, 2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(180)
        assert all(os.path.exists(out) for out in outs)
    expected: dict[str, bytes] = {}
    for out in outs:
        with open(out, "rb") as f:
            expected.update(pickle.load(f))
    with _open(*where) as sm:
        saver = SessionManagerSaver(sm)
        assert len(deltas(sm, "w")) >= 10
        for cid, want in expected.items():
            cfg = {"configurable": {"thread_id": "w", "checkpoint_ns": "", "checkpoint_id": cid}}
            got = saver.get_tuple(cfg)
            assert got is not None and SERDE.dumps_typed(got.checkpoint["channel_values"]["messages"])[1] == want
        listed = {t.config["configurable"]["checkpoint_id"]: t
                  for t in saver.list({"configurable": {"thread_id": "w"}})}
        assert set(listed) == set(expected)
        for cid, want in expected.items():
            assert SERDE.dumps_typed(listed[cid].checkpoint["channel_values"]["messages"])[1] == want


# -- a compiled graph ---------------------------------------------------------------------------


def _graph(saver: Any) -> Any:
    from langgraph.graph import START, MessagesState, StateGraph

    def bot(state: MessagesState) -> dict[str, Any]:
        seen = len(state["messages"])
        return {"messages": [AIMessage(f"seen {seen}: " + "answer " * 30, id=f"a{seen}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    return builder.compile(checkpointer=saver)


def _history(graph: Any, thread: str) -> list[tuple[str, bytes]]:
    return [(s.config["configurable"]["checkpoint_id"], SERDE.dumps_typed(s.values)[1])
            for s in graph.get_state_history({"configurable": {"thread_id": thread}})]


def test_a_graph_run_resumed_after_a_restart_and_time_travelled_reads_as_langgraphs_own_saver(
        where: tuple[str, str]) -> None:
    # Prevents: a messages channel stored as deltas reading back other than LangGraph's own
    # InMemorySaver gives for the same run: turns, a restart between a base and its deltas, a fork
    # by update_state from an early checkpoint continued, and a replay from one.
    from langgraph.checkpoint.memory import InMemorySaver

    def turns(graph: Any, start: int, stop: int) -> None:
        for turn in range(start, stop):
            graph.invoke({"messages": [HumanMessage(f"turn {turn}: " + "question " * 20, id=f"h{turn}")]},
                         {"configurable": {"thread_id": "chat"}})

    memory = _graph(InMemorySaver())
    turns(memory, 0, 12)
    with _open(*where) as sm:
        turns(_graph(SessionManagerSaver(sm)), 0, 6)
    with _open(*where) as sm:  # a restart between a base and its deltas
        graph = _graph(SessionManagerSaver(sm))
        turns(graph, 6, 12)
        assert len(deltas(sm, "chat")) >= 5
        ours = _history(graph, "chat")
    assert [v for _, v in ours] == [v for _, v in _history(memory, "chat")]

    def travel(graph: Any) -> None:
        early = list(graph.get_state_history({"configurable": {"thread_id": "chat"}}))[-8]
        forked = graph.update_state(early.config, {"messages": [HumanMessage("instead", id="x")]})
        graph.invoke({"messages": [HumanMessage("more " * 40, id="y")]}, forked)
        graph.invoke(None, early.config)  # a replay from it

    travel(memory)
    with _open(*where) as sm:
        graph = _graph(SessionManagerSaver(sm))
        travel(graph)
    with _open(*where) as sm:
        theirs = sorted(v for _, v in _history(memory, "chat"))
        assert sorted(v for _, v in _history(_graph(SessionManagerSaver(sm)), "chat")) == theirs


def test_what_the_index_keeps_as_a_base_is_what_a_fork_copy_read_looks_for() -> None:
    # Prevents: the index's rule for a base (inline in add_checkpoint, every put) and is_base (what a
    # delta read in a session::fork copy walks up to) drifting apart again: a delta then joined to
    # a value it was not made of.
    from session_manager.adapters._checkpoints import ThreadIndex, is_base

    values = {"small": ["1", "msgpack", "x" * 512], "edge": ["2", "msgpack", "x" * 513],
              "json": ["3", "json", "x" * 2000], "empty": ["4", "empty", ""],
              "delta": ["5", "msgpack", "h", "e0", 1, 600, "t"], "big": ["6", "msgpack", "\x92" + "y" * 900]}
    index = ThreadIndex()
    index.add_checkpoint("e1", {"ns": "", "id": "1", "values": values}, None)
    assert set(index.bases[""]) == {name for name, packed in values.items() if is_base(packed)} == {"edge", "big"}


def test_a_fork_copy_reads_its_deltas_with_no_more_entry_reads_than_the_thread_it_copied(
        where: tuple[str, str]) -> None:
    # Prevents: every delta read in a session::fork copy walking up entry by entry to its base
    # (its named id is not in the copy): 61 entry reads for the newest checkpoint of a 60-turn chat
    # against 2 in the thread it copied, a list of it 7x the reads (each a round trip over postgres).
    with _open(*where) as sm:
        graph = _graph(SessionManagerSaver(sm))
        for turn in range(30):
            graph.invoke({"messages": [HumanMessage(f"turn {turn}: " + "q " * 20, id=f"h{turn}")]},
                         {"configurable": {"thread_id": "long"}})
        tip = list(checkpoint_entries(sm, "long").values())[-1]["id"]
        copy = sm.call("session::fork", {"session_id": "long", "entry_id": tip})["session_id"]
        store = sm.service.store
        real, reads = store.entry_held, [0]

        def counting(*args: Any, **kwargs: Any) -> Any:
            reads[0] += 1
            return real(*args, **kwargs)

        store.entry_held = counting
        try:
            cost: dict[str, tuple[int, int]] = {}
            for thread in ("long", copy):
                saver = SessionManagerSaver(sm)
                saver.get_tuple({"configurable": {"thread_id": thread}})  # (the index derived first)
                reads[0] = 0
                newest = saver.get_tuple({"configurable": {"thread_id": thread}})
                one = reads[0]
                reads[0] = 0
                every = list(saver.list({"configurable": {"thread_id": thread}}))
                cost[thread] = (one, reads[0])
                assert newest is not None and len(every) == 90
        finally:
            store.entry_held = real
        assert cost[copy][0] <= cost["long"][0] and cost[copy][1] <= cost["long"][1], cost
