"""Attacks on the LangGraph checkpointer's exactness after its bodies became JSON text (review 10):
values that could pass ``plain()`` yet come back changed, compared with LangGraph's own
InMemorySaver (its serializer's answer, errors included) before and after a restart, over fs,
sqlite and postgres; bodies stored the old way (``{"json": ...}``) under copy, delete_for_runs,
prune and list's filters; puts and reads on one thread while an fs cache of one byte evicts."""

from __future__ import annotations

import datetime
import decimal
import enum
import math
import struct
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")

from langgraph.checkpoint.memory import InMemorySaver

import session_manager
from session_manager.adapters._checkpoints import CHECKPOINT
from session_manager.adapters.langgraph import SessionManagerSaver
from tests.unit.store_openers import Opener, opener_fixture  # noqa: F401 (the fixture "opener")
from tests.unit.test_adapter_langgraph import config


def fields(checkpoint_id: str, **more: Any) -> Any:
    return {"v": 4, "id": checkpoint_id, "ts": "t", "channel_versions": {"x": "1"},
            "versions_seen": {"n": {"x": "1"}}, "updated_channels": None, **more}


class Text(str):
    """A str subclass."""


class Whole(int):
    """An int subclass."""


class Level(enum.IntEnum):
    HIGH = 2


class Color(str, enum.Enum):
    RED = "red"


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"x": value}
    return value


SHARED = {"k": [1, 2]}
# Each in a checkpoint's body, its metadata and a channel value: JSON's own types at their edges
# (a bool is an int subclass, -0.0, the extreme floats, 64-bit ints) and what JSON would give back
# as something else (subclasses, enums, tuples, non-str keys, bytes, sets, ...).
ODD: dict[str, Any] = {
    "bools": [True, 1, False, 0, {"t": True}], "negative_zero": -0.0, "extremes": [1e308, 5e-324, -5e-324, 1e16],
    "u64": 2**64 - 1, "i64": -2**63, "beyond_64_bits": 2**64, "below_64_bits": -2**63 - 1,
    "int_keys": {1: "a"}, "none_key": {None: 1}, "bool_key": {True: 1}, "str_subclass_key": {Text("k"): 1},
    "str_subclass": Text("x"), "int_subclass": Whole(3), "int_enum": Level.HIGH, "str_enum": Color.RED,
    "tuple": (1, (2, "a")), "nul": "a\u0000b", "surrogate_key": {"a\udc00": 1},
    "lone_surrogate": "a\ud800b",  # (not JSON: packed, and msgpack gives back "a?b", as LangGraph's own saver)
    "bytes": b"\x00\xff", "bytearray": bytearray(b"ab"), "datetime": datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC),
    "set": {1, 2}, "decimal": decimal.Decimal("1.10"), "shared": {"a": SHARED, "b": SHARED},
    "nan": float("nan"), "infinity": float("-inf"), "deep": nested(250), "too_deep": nested(300),
    "langchain_shaped": {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "HumanMessage"],
                         "kwargs": {"content": "hi"}},
}


def exactly(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down (a float's sign and NaN included)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(exactly(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(exactly(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def put_or_error(saver: Any, name: str, value: Any) -> Any:
    try:
        saver.put(config(name), {**fields("c1", extra=value), "channel_values": {"x": value}},
                  {"step": 1, "m": value}, {"x": "1"})
    except Exception as e:  # (what LangGraph's serializer refuses: the same error from either saver)
        return (type(e).__name__, str(e).split(": ")[-1])
    return None


def test_every_odd_value_comes_back_as_langgraphs_own_saver_gives_it_back_after_a_restart(opener: Opener) -> None:
    # Attack: a value plain() lets through as JSON text (or metadata JSON) yet JSON gives back
    # changed (bool as int, -0.0 as 0, a subnormal rounded, a subclass as its base), or a value
    # refused differently from LangGraph's own saver, or a put that failed leaving an entry.
    memory = InMemorySaver()
    with opener() as sm:
        saver = SessionManagerSaver(sm)
        refused = {name: put_or_error(saver, name, value) for name, value in ODD.items()}
        expected_refusals = {name: put_or_error(memory, name, value) for name, value in ODD.items()}
        live = {name: saver.get_tuple(config(name)) for name in ODD}
        empty = {name: sm.service.store.get_meta(name) is None or
                 [e["custom_type"] for e in sm.service.store.entries(name) if e["custom_type"] == CHECKPOINT] == []
                 for name, why in refused.items() if why is not None}
        bodies = {name: next(iter(e["data"]["checkpoint"])) for name, why in refused.items() if why is None
                  for e in sm.service.store.entries(name) if e["custom_type"] == CHECKPOINT}
    with opener() as sm:
        saver = SessionManagerSaver(sm)
        again = {name: list(saver.list(config(name))) for name in ODD}
    assert refused == expected_refusals
    assert {name for name, why in refused.items() if why is not None} == {
        "beyond_64_bits", "below_64_bits", "surrogate_key", "too_deep"}
    assert all(empty.values())
    # JSON's own types at their edges took the JSON text path (what plain() passes), the rest the serializer's.
    assert {name for name, kind in bodies.items() if kind == "text"} == {
        "bools", "negative_zero", "extremes", "u64", "i64", "nul", "shared", "deep", "langchain_shaped"}
    assert {kind for kind in bodies.values()} == {"text", "packed"}
    for name in ODD:
        want = memory.get_tuple(config(name))
        if refused[name] is not None:
            assert live[name] is None and again[name] == [], name
            continue
        assert want is not None and len(again[name]) == 1, name
        for got in (live[name], again[name][0]):
            assert got is not None and got.config == want.config and got.parent_config is None, name
            assert exactly(got.checkpoint["extra"], want.checkpoint["extra"]), name  # type: ignore[typeddict-item]
            assert exactly(got.checkpoint["channel_values"], want.checkpoint["channel_values"]), name
            assert exactly(got.metadata, want.metadata), name
            assert got.checkpoint == want.checkpoint or name == "nan", name


def append_old_body(sm: Any, thread: str, like: dict[str, Any], checkpoint_id: str, parent: str, run_id: str) -> None:
    """A checkpoint as the code before JSON-text bodies stored it (``{"json": body}``), child of ``parent``."""
    old = {**like, "id": checkpoint_id, "parent": parent, "checkpoint": {"json": fields(checkpoint_id)},
           "metadata": {"json": {"step": int(checkpoint_id[1:]), "run_id": run_id}}, "values": {}}
    sm.call("session::append", {"session_id": thread, "custom": {"custom_type": CHECKPOINT, "data": old}})


def ids(tuples: Any) -> list[str]:
    return [t.checkpoint["id"] for t in tuples]


def test_old_json_bodies_and_new_text_bodies_mixed_through_list_copy_delete_for_runs_and_prune(
        opener: Opener) -> None:
    # Attack: a thread whose checkpoints are stored half the old way ({"json": body}) and half the
    # new ({"text": ...}): list's filter, before and limit, copy_thread (which re-appends each entry
    # through the request path), delete_for_runs and prune must treat both alike, and a restart too.
    with opener() as sm:
        saver = SessionManagerSaver(sm)
        saver.put(config("j"), {**fields("c1"), "channel_values": {"x": [1]}}, {"step": 1, "run_id": "r1"}, {"x": "1"})
        first = next(e["data"] for e in sm.service.store.entries("j") if e["custom_type"] == CHECKPOINT)
        append_old_body(sm, "j", first, "c2", "c1", "r2")
        append_old_body(sm, "j", first, "c3", "c2", "r1")
        saver = SessionManagerSaver(sm)  # (its index derived from the entries)
        saver.put(config("j", "c3"), {**fields("c4"), "channel_values": {"x": [1]}}, {"step": 4, "run_id": "r2"}, {})
        saver.put_writes(config("j", "c2"), [("x", 5)], "task")
        listed = ids(saver.list(config("j")))
        filtered = ids(saver.list(config("j"), filter={"run_id": "r1"}))
        before = ids(saver.list(config("j"), before=config("j", "c4"), limit=2))
        saver.copy_thread("j", "k")
        copied = [(t.checkpoint, t.metadata, t.pending_writes, t.parent_config) for t in saver.list(config("k"))]
        original = [(t.checkpoint, t.metadata, t.pending_writes, t.parent_config) for t in saver.list(config("j"))]
        saver.delete_for_runs(["r1"])
        after_runs = (ids(saver.list(config("j"))), ids(saver.list(config("k"))))
        saver.prune(["k"])
    with opener() as sm:
        saver = SessionManagerSaver(sm)
        kept_j = [(t.checkpoint, t.metadata, t.pending_writes, t.parent_config) for t in saver.list(config("j"))]
        kept_k = ids(saver.list(config("k")))
    assert listed == ["c4", "c3", "c2", "c1"] and filtered == ["c3", "c1"] and before == ["c3", "c2"]
    assert [c["id"] for c, *_ in copied] == listed
    assert [(c, m, w, p and p["configurable"]["checkpoint_id"]) for c, m, w, p in copied] == \
        [(c, m, w, p and p["configurable"]["checkpoint_id"]) for c, m, w, p in original]
    assert original[2] == ({**fields("c2"), "channel_values": {"x": [1]}}, {"step": 2, "run_id": "r2"},
                           [("task", "x", 5)], config("j", "c1"))
    assert after_runs == (["c4", "c2"], ["c4", "c2"]) and kept_k == ["c4"]
    assert kept_j == [original[0], original[2]]


def test_puts_and_reads_on_one_thread_while_a_one_byte_fs_cache_evicts_lose_nothing(tmp_path: Path) -> None:
    # Attack: the fs commit now finds its cached state without the store's lock; with a cache of
    # one byte every commit evicts the others, so two writers on one thread, a reader of it and
    # writers of other threads race eviction on every put: nothing may land in a dropped state.
    rounds, errors = 25, []

    def checkpoint(checkpoint_id: str, tag: str, i: int) -> Any:
        return {**fields(checkpoint_id), "channel_versions": {"x": checkpoint_id, "pad": checkpoint_id},
                "channel_values": {"x": [tag, i], "pad": "p" * 2000}}

    with session_manager.open(tmp_path / "d", cache_bytes=1) as sm:
        saver = SessionManagerSaver(sm)
        store, dropped = sm.service.store, []
        drop = store._drop

        def counted(session_id: str, state: Any) -> None:
            dropped.append(session_id)
            drop(session_id, state)

        store._drop = counted

        # Every writer puts once a round, the rounds in step: between two puts on "t" the other
        # threads' commits run, so the eviction the race needs happens on every run.
        in_step = threading.Barrier(4, timeout=60)

        def writer(thread: str, tag: str) -> None:
            try:
                saved = config(thread)
                for i in range(rounds):
                    in_step.wait()
                    checkpoint_id = f"{i:05d}-{tag}"
                    saved = saver.put(saved, checkpoint(checkpoint_id, tag, i), {"step": i},
                                      {"x": checkpoint_id, "pad": checkpoint_id})
                    saver.put_writes(saved, [("x", i)], f"task-{tag}")
            except Exception as e:  # (reported below)
                in_step.abort()
                errors.append(e)

        def reader() -> None:
            try:
                for _ in range(rounds):
                    got = saver.get_tuple(config("t"))
                    if got is not None:
                        tag, i = got.checkpoint["channel_values"]["x"]
                        assert got.checkpoint["id"] == f"{i:05d}-{tag}"
                    list(saver.list(config("t"), limit=3))
            except Exception as e:  # (reported below)
                errors.append(e)

        workers = [threading.Thread(target=writer, args=("t", "a")), threading.Thread(target=writer, args=("t", "b")),
                   threading.Thread(target=reader)]
        workers += [threading.Thread(target=writer, args=(f"o{k}", "o")) for k in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert errors == []
    # The race ran: the contended thread's state was evicted, and another thread's. (Before the
    # rounds were in step a writer of 25 puts could run whole inside one GIL switch interval:
    # "t" was then never evicted in about 1 run in 8.)
    assert "t" in dropped and {"o0", "o1"} & set(dropped), sorted(set(dropped))
    with session_manager.open(tmp_path / "d") as sm:
        saver = SessionManagerSaver(sm)
        for thread, tags in (("t", "ab"), ("o0", "o"), ("o1", "o")):
            got = list(saver.list(config(thread)))
            assert sorted(ids(got)) == sorted(f"{i:05d}-{tag}" for i in range(rounds) for tag in tags)
            for t in got:
                i, tag = int(t.checkpoint["id"][:5]), t.checkpoint["id"][-1]
                assert t.checkpoint["channel_values"] == {"x": [tag, i], "pad": "p" * 2000}
                assert t.pending_writes == [(f"task-{tag}", "x", i)] and t.metadata == {"step": i}
