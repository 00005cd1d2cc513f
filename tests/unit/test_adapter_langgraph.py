"""The LangGraph checkpointer, driven through LangGraph itself and its own conformance suite."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import enum
import math
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, MessagesState, StateGraph

import session_manager
from session_manager import SessionError, aio
from session_manager._wire.events import ON_MESSAGE_ADDED
from session_manager.adapters._checkpoints import CHECKPOINT, DELETED, DOC_DEPTH, ROOT_ID, WRITES
from session_manager.adapters.langgraph import SessionManagerSaver
from tests import pg_support
from tests.unit.store_openers import Opener, opener_fixture  # noqa: F401 (the fixture "opener")


@pytest.fixture(params=["fs", "sqlite"])
def local_opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens the same store again each call (a restart), over fs or sqlite (the tests of one
    process's saver: each put goes through either store's write path)."""
    if request.param == "fs":
        return lambda: session_manager.open(tmp_path / "d")
    return lambda: session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db")


def config(thread: str, checkpoint_id: str | None = None, ns: str = "") -> Any:
    configurable: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def chat_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """A StateGraph over a messages channel: the bot answers with the count of messages it saw."""

    def bot(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"seen {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    return builder.compile(checkpointer=saver)


def texts(state: Any) -> list[str]:
    return [m.content for m in state.values["messages"]]


def stored(sm: Any, thread: str) -> list[dict[str, Any]]:
    return list(sm.service.store.entries(thread))


# -- LangGraph's own conformance suite ---------------------------------------------------


def test_conformance_suite_passes_every_base_and_extended_capability(opener: Opener) -> None:
    # Prevents: a capability LangGraph's suite checks (put, put_writes, get_tuple, list,
    # delete_thread, copy_thread, delete_for_runs, prune) regressing unseen.
    from langgraph.checkpoint.conformance import checkpointer_test, validate
    from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

    with opener() as sm:
        @checkpointer_test(name="SessionManagerSaver")
        async def factory() -> AsyncIterator[SessionManagerSaver]:
            yield SessionManagerSaver(sm)

        report = asyncio.run(validate(factory))
    results = report.results
    assert set(results) == {c.value for c in ALL_CAPABILITIES}
    failures = {name: r.failures for name, r in results.items() if not r.passed}
    assert failures == {}
    assert all(r.detected and r.tests_failed == 0 and r.tests_passed > 0 for r in results.values())
    assert sum(r.tests_passed for r in results.values()) == 81


# -- a real graph: run, restart, time travel ------------------------------------------


def test_graph_runs_resumes_after_restart_and_time_travels(opener: Opener) -> None:
    # Prevents: state lost across a restart, replay re-running history instead of reading
    # it, or a fork overwriting the branch it forked from instead of branching the session.
    with opener() as sm:
        graph = chat_graph(SessionManagerSaver(sm))
        graph.invoke({"messages": [HumanMessage("hi")]}, config("t1"))
        graph.invoke({"messages": [HumanMessage("again")]}, config("t1"))
        assert texts(graph.get_state(config("t1"))) == ["hi", "seen 1", "again", "seen 3"]
    with opener() as sm:  # a restart: a new process would see the same
        saver = SessionManagerSaver(sm)
        graph = chat_graph(saver)
        state = graph.get_state(config("t1"))
        assert texts(state) == ["hi", "seen 1", "again", "seen 3"]
        graph.invoke({"messages": [HumanMessage("third")]}, config("t1"))
        history = list(graph.get_state_history(config("t1")))
        assert texts(history[0]) == ["hi", "seen 1", "again", "seen 3", "third", "seen 5"]
        # Time travel: the checkpoint after the first turn.
        first_turn = next(s for s in history if texts(s) == ["hi", "seen 1"] and not s.next)
        replayed = graph.invoke(None, first_turn.config)
        assert [m.content for m in replayed["messages"]] == ["hi", "seen 1"]
        forked_config = graph.update_state(first_turn.config, {"messages": [HumanMessage("instead")]})
        assert texts(graph.get_state(config("t1"))) == ["hi", "seen 1", "instead"]
        graph.invoke({"messages": [HumanMessage("more")]}, forked_config)
        assert texts(graph.get_state(config("t1"))) == ["hi", "seen 1", "instead", "more", "seen 4"]
        # The old branch is intact and still readable at its own checkpoint.
        assert texts(graph.get_state(history[0].config)) == texts(history[0])
        entries = {e["id"]: e for e in stored(sm, "t1")}
    # The session's tree is the checkpoint tree: the fork's first checkpoint hangs from
    # the entry of the checkpoint it forked from, beside the old branch.
    by_checkpoint = {e["data"]["id"]: e for e in entries.values() if e.get("custom_type") == CHECKPOINT}
    fork_entry = by_checkpoint[forked_config["configurable"]["checkpoint_id"]]
    assert fork_entry["parent_id"] == by_checkpoint[first_turn.config["configurable"]["checkpoint_id"]]["id"]
    children = {e["id"] for e in by_checkpoint.values() if e["parent_id"] == fork_entry["parent_id"]}
    old_next = by_checkpoint[history[0].config["configurable"]["checkpoint_id"]]
    while old_next["parent_id"] != fork_entry["parent_id"]:  # walk the old branch back to the fork point
        old_next = entries[old_next["parent_id"]]
    assert {fork_entry["id"], old_next["id"]} <= children and fork_entry["id"] != old_next["id"]
    for entry in by_checkpoint.values():  # every checkpoint's parent entry is its parent checkpoint's
        parent = entry["data"]["parent"]
        assert entry["parent_id"] == (by_checkpoint[parent]["id"] if parent else ROOT_ID)


def test_an_interrupted_subgraph_resumes_after_a_restart(opener: Opener) -> None:
    # Prevents: subgraph namespaces mixed with the root's, or an interrupt's pending writes
    # (special writes beside the checkpoint) lost, so a restarted process could not resume.
    from langgraph.types import Command, interrupt

    def ask(state: MessagesState) -> dict[str, Any]:
        answer = interrupt("approve?")
        return {"messages": [AIMessage(f"approved: {answer}")]}

    inner = StateGraph(MessagesState)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")

    def build(saver: SessionManagerSaver) -> Any:
        outer = StateGraph(MessagesState)
        outer.add_node("review", inner.compile())
        outer.add_edge(START, "review")
        return outer.compile(checkpointer=saver)

    with opener() as sm:
        first = build(SessionManagerSaver(sm)).invoke({"messages": [HumanMessage("ship it")]}, config("hitl"))
        assert [i.value for i in first["__interrupt__"]] == ["approve?"]
        namespaces = {e["data"]["ns"] for e in stored(sm, "hitl") if e.get("custom_type") == CHECKPOINT}
    assert "" in namespaces and any(ns.startswith("review:") for ns in namespaces)
    with opener() as sm:  # another process picks the thread up
        graph = build(SessionManagerSaver(sm))
        state = graph.get_state(config("hitl"), subgraphs=True)
        assert state.next == ("review",) and state.tasks[0].state.next == ("ask",)
        done = graph.invoke(Command(resume="yes"), config("hitl"))
    assert [m.content for m in done["messages"]] == ["ship it", "approved: yes"]


def test_async_graph_over_an_aio_manager(tmp_path: Path) -> None:
    # Prevents: the async methods (ainvoke's path) diverging from the sync ones.
    async def run() -> list[str]:
        async with aio.open(tmp_path / "d") as asm:
            graph = chat_graph(SessionManagerSaver(asm))
            await graph.ainvoke({"messages": [HumanMessage("hi")]}, config("a"))
            await graph.ainvoke({"messages": [HumanMessage("more")]}, config("a"))
            history = [s async for s in graph.aget_state_history(config("a"))]
            assert len(history) == 6  # input, loop per turn: (input, bot) x 2, plus the two starts
            return texts(await graph.aget_state(config("a")))

    assert asyncio.run(run()) == ["hi", "seen 1", "more", "seen 3"]


# -- storage: exact values, linear growth, ordinary entries, events ---------------------


def test_values_round_trip_exactly_and_are_stored_as_serializer_type_and_bytes(local_opener: Opener) -> None:
    # Prevents: bytes, sets, datetimes, unicode coming back other than LangGraph's serializer gives
    # them (InMemorySaver, beside it, is the reference), or values stored opaquely.
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    value = {"raw": b"\x00\xffbin", "pair": (1, "a"), "set": {1, 2}, "at": datetime.datetime(2026, 1, 2, 3, 4, 5),
             "text": "\u00fcn\u00ef\u2028", "float": 1.0, "none": None}
    checkpoint = {"v": 4, "id": "1f0-a", "ts": "2026-01-01T00:00:00+00:00", "channel_values": {"x": value},
                  "channel_versions": {"x": "1.0"}, "versions_seen": {"n": {"x": "1.0"}}, "updated_channels": ["x"]}
    metadata: Any = {"source": "input", "step": -1, "parents": {}, "when": datetime.date(2026, 1, 2)}
    with local_opener() as sm:
        results = []
        for saver in (SessionManagerSaver(sm), InMemorySaver()):
            saved = saver.put(config("v"), dict(checkpoint), dict(metadata), {"x": "1.0"})  # type: ignore[arg-type]
            saver.put_writes(saved, [("x", b"w\x00"), ("y", {3, 4})], "task-1", "path-1")
            results.append(saver.get_tuple(config("v")))
        ours, reference = results
        entry = sm.call("session::get-message", {"session_id": "v", "entry_id": got_entry_id(sm, "v", "1f0-a")})
    assert ours is not None and reference is not None
    assert ours.checkpoint == reference.checkpoint
    assert ours.checkpoint["channel_values"]["x"]["raw"] == b"\x00\xffbin"
    assert ours.pending_writes == reference.pending_writes == [("task-1", "x", b"w\x00"), ("task-1", "y", {3, 4})]
    assert ours.metadata == reference.metadata and type(ours.metadata["when"]) is datetime.date  # type: ignore[typeddict-item]
    assert ours.config == reference.config and ours.parent_config is reference.parent_config is None
    data = entry["entry"]["data"]
    version, kind, encoded = data["values"]["x"]
    assert (version, kind) == ("1.0", "msgpack")
    assert encoded.encode("latin-1") == JsonPlusSerializer().dumps_typed(value)[1]  # one char per byte
    assert list(data["metadata"]) == ["packed"]  # a date: JSON would not give it back
    # The body (the checkpoint but its values) as its JSON text where JSON holds it exactly.
    assert data["checkpoint"] == {"text": orjson.dumps({k: v for k, v in checkpoint.items()
                                                        if k != "channel_values"}).decode()}


def test_checkpoints_and_writes_kept_in_memory_hold_their_text_without_a_utf8_copy(tmp_path: Path) -> None:
    # Prevents: the store keeping, beside each checkpoint's serialized values and each task's
    # writes (latin-1 text, one character per byte), the UTF-8 orjson made of that text when the
    # entry was encoded and left on the string: as much memory again per entry kept, fresh pages
    # on every put. The entries on disk are the same: the log, read again after a reopen, gives
    # the same data.
    import sys

    def utf8_kept(text: str) -> bool:
        return sys.getsizeof(text) != sys.getsizeof(text.encode("latin-1").decode("latin-1"))

    value = ["caf\u00e9 \u00ff" * 50, 3]
    checkpoint: Any = {"v": 4, "id": "1f0-a", "ts": "t", "channel_values": {"x": value, "y": 1},
                       "channel_versions": {"x": "1", "y": "1"}, "versions_seen": {}, "updated_channels": None}
    with session_manager.open(tmp_path / "d") as sm:
        saver = SessionManagerSaver(sm)
        saved = saver.put(config("u"), checkpoint, {"step": 1}, {"x": "1", "y": "1"})
        saver.put_writes(saved, [("x", value), ("y", 2)], "task-1")
        kept = {e["custom_type"]: e["data"] for e in stored(sm, "u") if e.get("custom_type") in (CHECKPOINT, WRITES)}
        texts = [kept[CHECKPOINT]["values"]["x"][2], kept[WRITES]["writes"][0][3]]
        assert not any(text.isascii() for text in texts)
        assert not any(utf8_kept(text) for text in texts)
    with session_manager.open(tmp_path / "d") as sm:
        assert {e["custom_type"]: e["data"] for e in stored(sm, "u")
                if e.get("custom_type") in (CHECKPOINT, WRITES)} == kept
        got = SessionManagerSaver(sm).get_tuple(config("u"))
    assert got is not None and got.checkpoint["channel_values"] == {"x": value, "y": 1}
    assert got.pending_writes == [("task-1", "x", value), ("task-1", "y", 2)]


def test_editing_a_read_checkpoint_changes_nothing_stored(local_opener: Opener) -> None:
    # Prevents: get_tuple handing out the store's own entry objects, so LangGraph updating a
    # checkpoint's channel_versions in place (as its loop does) rewrote the stored checkpoint.
    with local_opener() as sm:
        saver = SessionManagerSaver(sm)
        checkpoint = {"v": 4, "id": "1", "ts": "t", "channel_values": {"x": [1]}, "channel_versions": {"x": "1"},
                      "versions_seen": {"n": {"x": "1"}}, "updated_channels": None}
        saved = saver.put(config("m"), checkpoint, {"step": 1, "parents": {}}, {"x": "1"})  # type: ignore[arg-type]
        got = saver.get_tuple(saved)
        assert got is not None
        got.checkpoint["channel_versions"]["x"] = "edited"
        got.checkpoint["versions_seen"]["n"]["x"] = "edited"
        got.checkpoint["channel_values"]["x"].append(2)
        got.metadata["parents"]["edited"] = "yes"  # type: ignore[index]
        again = saver.get_tuple(saved)
        path = sm.call("session::messages", {"session_id": "m", "include_custom": True})["messages"]
    assert again is not None
    assert again.checkpoint["channel_versions"] == {"x": "1"} and again.checkpoint["versions_seen"] == {"n": {"x": "1"}}
    assert again.checkpoint["channel_values"] == {"x": [1]} and again.metadata == {"step": 1, "parents": {}}
    assert orjson.loads(path[-1]["custom"]["data"]["checkpoint"]["text"])["channel_versions"] == {"x": "1"}


def exact_json(value: Any) -> bool:
    """Only the exact types JSON decodes to: dicts with str keys, lists, str, int, finite float, bool, None."""
    kind = type(value)
    if kind is dict:
        return all(type(k) is str and exact_json(v) for k, v in value.items())
    if kind is list:
        return all(exact_json(v) for v in value)
    if kind is float:
        return math.isfinite(value)
    return kind in (str, int, bool, type(None))


class Namespace(str):
    """A str subclass (as a config built by other code may hold)."""


class Level(enum.IntEnum):
    """An IntEnum (equal to its int: JSON would give back the int)."""

    HIGH = 2


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"x": value}
    return value


def test_a_checkpoint_is_stored_as_exact_json_built_by_the_saver_not_the_callers_objects(local_opener: Opener) -> None:
    # Prevents: the checkpoint entry, handed to the store without the host's private copy, holding
    # the caller's own dicts (editing them after put would rewrite the stored checkpoint) or
    # anything but exact JSON (a str subclass, NaN, nesting past what a request may hold), which the
    # copy used to refuse or turn into plain JSON.
    with local_opener() as sm:
        saver = SessionManagerSaver(sm)
        handed: list[Any] = []
        real = sm._append_owned

        def record(session_id: Any, custom_type: Any, data: Any, parent_id: Any = None, **at: Any) -> str:
            handed.append((session_id, custom_type, data, parent_id))
            return real(session_id, custom_type, data, parent_id, **at)

        sm._append_owned = record  # type: ignore[method-assign]
        checkpoint: Any = {"v": 4, "id": "c1", "ts": "t", "channel_values": {"x": [1]},
                           "channel_versions": {"x": "1"}, "versions_seen": {"n": {"x": "1"}},
                           "updated_channels": None}
        metadata: Any = {"step": 1, "parents": {}, "tags": ["a"], "score": float("nan"),
                         "deep": nested(DOC_DEPTH - 1), "deeper": nested(DOC_DEPTH)}
        first = saver.put(config("o", ns=Namespace("ns")), checkpoint, metadata, {"x": "1"})
        second = saver.put(first, {**checkpoint, "id": "c2"}, {"deep": nested(DOC_DEPTH - 1)}, {"x": "2"})
        saver.put_writes(second, [("x", 1)], "task", "path")
        checkpoint["channel_versions"]["x"] = "edited"
        checkpoint["versions_seen"]["n"]["x"] = "edited"
        metadata["tags"].append("edited")
        got = saver.get_tuple(first)
        entries = [e for e in stored(sm, "o") if e.get("custom_type") in (CHECKPOINT, WRITES)]
        # What the saver handed over, the copying path (which checks every bound) takes as it is.
        sm.call("session::ensure", {"session_id": "copy"})
        for entry in entries:
            sm.call("session::append", {"session_id": "copy", "custom": {"custom_type": "x", "data": entry["data"]}})
        copies = [e["data"] for e in stored(sm, "copy")]
    assert copies == [e["data"] for e in entries]
    # What the typed append took: exact JSON data, and the ids and type the request model would
    # have checked as plain non-empty strs (nothing checks them after).
    assert [c for _, c, _, _ in handed] == [CHECKPOINT, CHECKPOINT, WRITES]
    assert all(exact_json(d) and all(type(x) is str and x for x in (s, c, p)) for s, c, d, p in handed)
    assert got is not None
    assert got.checkpoint["channel_versions"] == {"x": "1"} and got.checkpoint["versions_seen"] == {"n": {"x": "1"}}
    assert got.metadata["tags"] == ["a"] and math.isnan(got.metadata["score"])  # type: ignore[typeddict-item]
    assert got.metadata["deeper"] == nested(DOC_DEPTH)  # type: ignore[typeddict-item]
    assert got.config["configurable"]["checkpoint_ns"] == "ns"
    assert len(entries) == 3 and all(exact_json(e["data"]) for e in entries)
    assert [type(e["data"]["ns"]) for e in entries] == [str, str, str]
    first_data, second_data = entries[0]["data"], entries[1]["data"]
    assert list(first_data["metadata"]) == ["packed"]  # NaN, and nesting past DOC_DEPTH: JSON cannot hold them
    assert second_data["metadata"]["json"] == {"deep": nested(DOC_DEPTH - 1)}  # DOC_DEPTH deep in all: it can


def test_a_checkpoint_body_json_cannot_give_back_exactly_is_packed_and_reads_back_with_its_types(
        local_opener: Opener) -> None:
    # Prevents: a body field JSON gives back as something else (a tuple as a list, an IntEnum as
    # its int, NaN as null, a str subclass as a str) stored as JSON text and read back changed.
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    fields: Any = {"v": 4, "id": "c1", "ts": "t", "channel_versions": {"x": "1"},
                   "versions_seen": {"n": {"x": "1"}}, "updated_channels": None}
    odd = {"pair": (1, "a"), "level": Level.HIGH, "score": float("nan"), "name": Namespace("n")}
    with local_opener() as sm:
        saver = SessionManagerSaver(sm)
        saved = saver.put(config("b"), {**fields, "channel_values": {}}, {"step": 1}, {})
        for key, value in odd.items():
            saved = saver.put(saved, {**fields, "id": f"c-{key}", key: value, "channel_values": {}}, {"step": 1}, {})
        bodies = {e["data"]["id"]: e["data"]["checkpoint"] for e in stored(sm, "b")
                  if e.get("custom_type") == CHECKPOINT}
        got = {key: SessionManagerSaver(sm).get_tuple(config("b", f"c-{key}")) for key in odd}
    assert bodies["c1"] == {"text": orjson.dumps(fields).decode()}
    assert all(list(bodies[f"c-{key}"]) == ["packed"] for key in odd)
    # Each as LangGraph's serializer gives it back (what its own savers store): the IntEnum an
    # IntEnum, NaN a float, the tuple and the str subclass as msgpack carries them.
    serde = JsonPlusSerializer()
    for key, value in odd.items():
        checkpoint: Any = got[key].checkpoint  # type: ignore[union-attr]
        expected = serde.loads_typed(serde.dumps_typed({**fields, "id": f"c-{key}", key: value}))
        assert {k: v for k, v in checkpoint.items() if k != "channel_values"}.keys() == expected.keys()
        assert checkpoint["channel_versions"] == {"x": "1"} and type(checkpoint[key]) is type(expected[key])
        if key != "score":
            assert checkpoint[key] == expected[key]
    assert got["level"].checkpoint["level"] is Level.HIGH  # type: ignore[union-attr,typeddict-item]
    assert math.isnan(got["score"].checkpoint["score"])  # type: ignore[union-attr,typeddict-item]


def test_a_checkpoint_stored_with_its_body_as_json_reads_back_as_it_did(local_opener: Opener) -> None:
    # Prevents: checkpoints stored before bodies were kept as JSON text (``{"json": body}``, as
    # metadata still is) no longer reading back, or reading back other than they were put.
    with local_opener() as sm:
        saver = SessionManagerSaver(sm)
        fields: Any = {"v": 4, "id": "c1", "ts": "t", "channel_versions": {"x": "1"},
                       "versions_seen": {"n": {"x": "1"}}, "updated_channels": None}
        saved = saver.put(config("j"), {**fields, "channel_values": {"x": [1]}}, {"step": 1}, {"x": "1"})
        entry = next(e for e in stored(sm, "j") if e.get("custom_type") == CHECKPOINT)
        old = {**entry["data"], "id": "c2", "parent": "c1", "checkpoint": {"json": {**fields, "id": "c2"}}}
        sm.call("session::append", {"session_id": "j", "parent_id": entry["id"],
                                    "custom": {"custom_type": CHECKPOINT, "data": old}})
        fresh = SessionManagerSaver(sm)  # (its index derived from the entries)
        got = fresh.get_tuple(config("j", "c2"))
        listed = [t.config["configurable"]["checkpoint_id"] for t in fresh.list(config("j"))]
        after = fresh.put(config("j", "c2"), {**fields, "id": "c3", "channel_values": {"x": [1]}}, {"step": 3}, {})
        newest = fresh.get_tuple(config("j"))
    assert saved["configurable"]["checkpoint_id"] == "c1" and listed == ["c2", "c1"]
    assert got is not None and got.parent_config == config("j", "c1")
    assert got.checkpoint == {**fields, "id": "c2", "channel_values": {"x": [1]}}
    assert got.metadata == {"step": 1}
    assert newest is not None and newest.config == after and newest.parent_config == config("j", "c2")
    assert newest.checkpoint == {**fields, "id": "c3", "channel_values": {"x": [1]}}


@pytest.mark.parametrize(("change", "field"), [
    ({"new_versions": {"x": float("nan")}}, "new_versions.x"),
    ({"new_versions": {"x": ("1", 2)}}, "new_versions.x"),
    ({"new_versions": {1: "1"}}, "new_versions"),
    ({"id": 7}, "checkpoint.id"),
])
def test_what_a_checkpoint_entry_cannot_hold_exactly_is_refused_and_nothing_is_written(
        local_opener: Opener, change: dict[str, Any], field: str) -> None:
    # Prevents: a channel version or checkpoint id JSON cannot carry as it is (NaN, a tuple, a
    # non-string name) reaching the store unchecked on the handed-over path.
    with local_opener() as sm:
        saver = SessionManagerSaver(sm)
        checkpoint: Any = {"v": 4, "id": change.get("id", "c1"), "ts": "t", "channel_values": {"x": [1]},
                           "channel_versions": {"x": "1"}, "versions_seen": {}, "updated_channels": None}
        with pytest.raises(SessionError) as refused:
            saver.put(config("r"), checkpoint, {}, change.get("new_versions", {"x": "1"}))
        assert refused.value.code == "session/invalid_request" and str(refused.value).split(": ")[1] == field
        assert [e["custom_type"] for e in stored(sm, "r")] == []


def got_entry_id(sm: Any, thread: str, checkpoint_id: str) -> str:
    return next(e["id"] for e in stored(sm, thread)
                if e.get("custom_type") == CHECKPOINT and e["data"]["id"] == checkpoint_id)


def test_a_long_thread_stores_each_channel_version_once(local_opener: Opener) -> None:
    # Prevents: quadratic growth (every checkpoint re-storing every channel's whole value).
    with local_opener() as sm:
        graph = chat_graph(SessionManagerSaver(sm))
        for i in range(30):
            graph.invoke({"messages": [HumanMessage(f"turn {i}")]}, config("long"))
        assert len(texts(graph.get_state(config("long")))) == 60
        checkpoints = [e for e in stored(sm, "long") if e.get("custom_type") == CHECKPOINT]
    # Each (channel, version) is stored once, in the checkpoint that introduced it; a
    # checkpoint that did not change a channel stores nothing for it (it points back).
    stored_versions = [(ch, v[0]) for e in checkpoints for ch, v in e["data"]["values"].items()]
    assert len(stored_versions) == len(set(stored_versions))
    versions_in_use = {(ch, v) for e in checkpoints
                       for ch, v in orjson.loads(e["data"]["checkpoint"]["text"])["channel_versions"].items()}
    assert set(stored_versions) == versions_in_use
    assert len([v for v in stored_versions if v[0] == "messages"]) == 60  # one per turn's two updates
    assert any("messages" not in e["data"]["values"] for e in checkpoints)


def test_checkpoints_are_ordinary_entries_with_events_and_tenant_metadata(local_opener: Opener) -> None:
    # Prevents: checkpoints written around the function surface (no events) or sessions
    # created without the tenant metadata the list filters and observers rely on.
    added: list[Any] = []
    with local_opener() as sm:
        sm.observe({"function_id": ON_MESSAGE_ADDED}, added.append)
        saver = SessionManagerSaver(sm, metadata={"tenant": "acme"})
        other = SessionManagerSaver(sm, metadata={"tenant": "other"})
        # durability="sync": with the default async durability LangGraph may save a task's writes
        # after the next checkpoint, so the newest entry (the active leaf) is not always a
        # checkpoint (this test failed ~1 run in 30 on that, asserting the leaf below).
        chat_graph(saver).invoke({"messages": [HumanMessage("hi")]}, config("mine"), durability="sync")
        chat_graph(other).invoke({"messages": [HumanMessage("hi")]}, config("theirs"))
        meta = sm.call("session::get", {"session_id": "mine"})["meta"]
        listed = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
        path = sm.call("session::messages", {"session_id": "mine", "include_custom": True})["messages"]
    assert meta["metadata"] == {"tenant": "acme"}
    assert listed == {"mine"}
    kinds = [e["custom"]["custom_type"] for e in added if e["session_id"] == "mine"]
    assert kinds[0] == "langgraph.root" and kinds.count(CHECKPOINT) == 3 and WRITES in kinds
    assert all(e["session_metadata"] == {"tenant": "acme"} for e in added if e["session_id"] == "mine")
    assert not any("message" in e for e in added)  # custom entries, never chat messages
    # The active leaf is the newest entry written (docs/langgraph.md): the newest checkpoint, or a
    # task's writes that LangGraph saved after it (its executor runs put_writes beside the next
    # put, under durability="sync" too: over sqlite ~1 run in 20 under load).
    newest = [e for e in added if e["session_id"] == "mine"][-1]
    assert path[-1]["entry_id"] == newest["entry_id"]
    assert path[-1]["custom"]["custom_type"] in (CHECKPOINT, WRITES)


def test_prune_keeps_the_latest_readable_and_tombstones_the_rest(local_opener: Opener) -> None:
    # Prevents: keep_latest losing the values the kept checkpoint inherited from pruned ones.
    with local_opener() as sm:
        saver = SessionManagerSaver(sm)
        graph = chat_graph(saver)
        graph.invoke({"messages": [HumanMessage("a")]}, config("p"))
        graph.invoke({"messages": [HumanMessage("b")]}, config("p"))
        saver.prune(["p"])
        assert [texts(graph.get_state(config("p")))] == [["a", "seen 1", "b", "seen 3"]]
        assert len(list(saver.list(config("p")))) == 1
        assert [e["custom_type"] for e in stored(sm, "p")].count(DELETED) == 1
    with local_opener() as sm:  # after a restart too
        assert len(list(SessionManagerSaver(sm).list(config("p")))) == 1


def test_bad_input_is_a_clear_error_and_writes_nothing(local_opener: Opener) -> None:
    # Prevents: a traceback (or a half-written thread) on an empty thread id, a config without
    # ``configurable``, writes without their checkpoint, or an unknown prune strategy.
    with local_opener() as sm:
        saver = SessionManagerSaver(sm)
        with pytest.raises(SessionError) as empty:
            saver.get_tuple(config(""))
        assert empty.value.code == "session/invalid_request" and "thread_id" in str(empty.value)
        with pytest.raises(SessionError) as shapeless:
            saver.put({}, {"id": "1"}, {}, {})  # type: ignore[typeddict-item]
        assert shapeless.value.code == "session/invalid_request" and "configurable" in str(shapeless.value)
        with pytest.raises(SessionError) as no_checkpoint:
            saver.put_writes(config("w"), [("ch", 1)], "task")
        assert no_checkpoint.value.code == "session/invalid_request" and "checkpoint_id" in str(no_checkpoint.value)
        with pytest.raises(SessionError) as strategy:
            saver.prune(["x"], strategy="everything")
        assert strategy.value.code == "session/invalid_request" and "strategy" in str(strategy.value)
        assert sm.call("session::list", {})["sessions"] == []


# -- concurrency and other processes ----------------------------------------------------


def plain_checkpoint(checkpoint_id: str) -> Any:
    return {"v": 4, "id": checkpoint_id, "ts": "t", "channel_values": {}, "channel_versions": {},
            "versions_seen": {}, "updated_channels": None}


def test_a_put_reads_nothing_of_the_session_while_its_index_is_current(local_opener: Opener) -> None:
    # Prevents: the per-put read of the session (its meta and leaf, to check the saver's index is
    # current) coming back: the append itself checks that now, where it reads the session anyway.
    with local_opener() as sm:
        saver = SessionManagerSaver(sm)
        store = sm.service.store
        reads: list[str] = []
        for name in ("session_token", "meta_and_leaf", "entries_held", "get_meta"):
            real = getattr(store, name)
            setattr(store, name, lambda *a, _real=real, _name=name: reads.append(_name) or _real(*a))
        saved = saver.put(config("quiet"), plain_checkpoint("c0"), {}, {})  # a new thread: derived once
        first = list(reads)
        for i in range(1, 6):
            saver.put_writes(saved, [("x", i)], f"task-{i}")
            saved = saver.put(saved, plain_checkpoint(f"c{i}"), {}, {})
    assert first and reads == first


@pytest.mark.parametrize("where", ["fs", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_writes_after_another_writers_find_its_checkpoints(where: str, tmp_path: Path) -> None:
    # Prevents: a saver writing with the index its own last write left (no read first) missing
    # another writer's checkpoints: its next checkpoint would hang from the root instead of
    # their checkpoint, its writes land beside nothing, and a thread deleted meanwhile not come back.
    with contextlib.ExitStack() as stack:
        if where == "fs":
            sm = stack.enter_context(session_manager.open(tmp_path / "d"))
            mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(sm)  # two indexes, one store
        elif where == "sqlite":  # two instances over one file (as two processes would be)
            uri = f"sqlite:///{tmp_path.resolve()}/d.db"
            sm = stack.enter_context(session_manager.open(uri))
            other = stack.enter_context(session_manager.open(uri))
            mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(other)
        else:
            schema = stack.enter_context(pg_support.schema())
            sm = stack.enter_context(session_manager.open(store=pg_support.open_store(schema)))
            other = stack.enter_context(session_manager.open(store=pg_support.open_store(schema)))
            mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(other)
        c1 = mine.put(config("shared"), plain_checkpoint("c1"), {}, {})
        c2 = theirs.put(c1, plain_checkpoint("c2"), {}, {})
        mine.put_writes(c2, [("x", 2)], "task")
        c3 = mine.put(c2, plain_checkpoint("c3"), {}, {})
        entries = {e["id"]: e for e in stored(sm, "shared")}
        by_checkpoint = {e["data"]["id"]: e for e in entries.values() if e["custom_type"] == CHECKPOINT}
        writes = [e for e in entries.values() if e["custom_type"] == WRITES]
        listed = [t.config["configurable"]["checkpoint_id"] for t in mine.list(config("shared"))]
        got = mine.get_tuple(c2)
        theirs.delete_thread("shared")
        mine.put(c3, plain_checkpoint("c4"), {}, {})
        after = [t.config["configurable"]["checkpoint_id"] for t in mine.list(config("shared"))]
    assert by_checkpoint["c3"]["parent_id"] == by_checkpoint["c2"]["id"]
    assert by_checkpoint["c2"]["parent_id"] == by_checkpoint["c1"]["id"]
    assert [w["parent_id"] for w in writes] == [by_checkpoint["c2"]["id"]]
    assert listed == ["c3", "c2", "c1"] and got is not None and got.pending_writes == [("task", "x", 2)]
    assert after == ["c4"]




def test_parallel_tasks_writes_from_threads_are_all_kept(local_opener: Opener) -> None:
    # Prevents: concurrent put_writes (parallel tasks) losing one another's writes.
    with local_opener() as sm:
        saver = SessionManagerSaver(sm)
        checkpoint = {"v": 4, "id": "1", "ts": "t", "channel_values": {}, "channel_versions": {},
                      "versions_seen": {}, "updated_channels": None}
        saved = saver.put(config("par"), checkpoint, {}, {})
        barrier = threading.Barrier(8)

        def task(i: int) -> None:
            barrier.wait()
            saver.put_writes(saved, [("ch", i), ("other", -i)], f"task-{i}")

        threads = [threading.Thread(target=task, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got = SessionManagerSaver(sm).get_tuple(saved)  # a fresh index, from the entries alone
    assert got is not None
    assert sorted(got.pending_writes or []) == sorted(
        [(f"task-{i}", "ch", i) for i in range(8)] + [(f"task-{i}", "other", -i) for i in range(8)])


@pytest.mark.postgres
def test_a_reader_in_another_instance_sees_new_checkpoints(schema: str) -> None:
    # Prevents: the per-saver index serving a stale thread after another instance wrote to it.
    with session_manager.open(store=pg_support.open_store(schema)) as writer_sm, \
            session_manager.open(store=pg_support.open_store(schema)) as reader_sm:
        writer, reader = chat_graph(SessionManagerSaver(writer_sm)), chat_graph(SessionManagerSaver(reader_sm))
        writer.invoke({"messages": [HumanMessage("one")]}, config("x"))
        assert texts(reader.get_state(config("x"))) == ["one", "seen 1"]
        writer.invoke({"messages": [HumanMessage("two")]}, config("x"))
        assert texts(reader.get_state(config("x"))) == ["one", "seen 1", "two", "seen 3"]


def test_a_cancelled_aput_has_landed_when_cancellation_is_seen(local_opener: Opener) -> None:
    # Prevents: CancelledError raised while the checkpoint is still being written (it would land later).
    with local_opener() as sm:
        saver = SessionManagerSaver(sm)
        entered, release = threading.Event(), threading.Event()
        real_call = sm._append_owned  # (a checkpoint is handed over: see test_a_checkpoint_is_stored_as_exact_json...)

        def slow_call(session_id: str, custom_type: str, data: Any, parent_id: Any = None, **at: Any) -> str:
            if custom_type == CHECKPOINT:
                entered.set()
                release.wait(5)
            return real_call(session_id, custom_type, data, parent_id, **at)

        sm._append_owned = slow_call  # type: ignore[method-assign]
        checkpoint = {"v": 4, "id": "c1", "ts": "t", "channel_values": {}, "channel_versions": {},
                      "versions_seen": {}, "updated_channels": None}

        async def run() -> None:
            task = asyncio.ensure_future(saver.aput(config("c"), checkpoint, {}, {}))
            await asyncio.to_thread(entered.wait, 5)
            task.cancel()
            await asyncio.sleep(0.05)
            assert not task.done()  # still waiting for the write
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert saver.get_tuple(config("c")) is not None  # settled: it landed

        asyncio.run(run())


def _messages_checkpoint(step: int, messages: list[Any], version: str) -> Any:
    return {"v": 4, "id": f"1f0-{step:04}", "ts": "t", "channel_values": {"messages": messages},
            "channel_versions": {"messages": version}, "versions_seen": {}, "updated_channels": ["messages"]}


def test_a_grown_or_cut_messages_value_is_stored_as_a_delta_of_a_full_one_and_reads_back_exactly(
        local_opener: Opener) -> None:
    # Prevents: every version of a growing messages channel storing (encoding, writing, keeping in
    # memory) the whole list again (bytes quadratic in the thread's length); and a delta reading back
    # other than the serializer's bytes: after a restart (no saver state), through a fork, a re-put
    # of one version, a cut list and a copied thread.
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    history = [(HumanMessage if i % 2 == 0 else AIMessage)(f"message {i}: " + "lorem ipsum " * 8)
               for i in range(40)]
    sizes = [3, 4, 9, 10, 16, 17, 5, 12, 12, 40]  # grown, cut back to a prefix, the same list again
    with local_opener() as sm:
        saver = SessionManagerSaver(sm)
        saved = config("d")
        for step, n in enumerate(sizes):
            saved = saver.put(saved, _messages_checkpoint(step, history[:n], f"{step + 1}.0"), {"step": step},
                              {"messages": f"{step + 1}.0"})
        # A re-put of the last checkpoint under its version, and a fork from the third.
        saver.put(config("d", "1f0-0008"), _messages_checkpoint(9, history[:40], "10.0"), {"step": 9},
                  {"messages": "10.0"})
        saver.put(config("d", "1f0-0002"), _messages_checkpoint(20, history[:11], "21.0"), {"step": 3},
                  {"messages": "21.0"})
        saver.copy_thread("d", "e")
        entries = {e["id"]: e for e in stored(sm, "d")}
    deltas = {i: e["data"]["values"]["messages"] for i, e in entries.items()
              if e.get("custom_type") == CHECKPOINT and len(e["data"]["values"]["messages"]) == 7}
    assert len(deltas) >= 5  # the grown, cut and repeated lists
    for entry_id, value in deltas.items():  # a delta's base is on its own checkpoint's path (a path copy holds it)
        path = [entry_id]
        while entries[path[-1]].get("parent_id"):
            path.append(entries[path[-1]]["parent_id"])
        assert value[3] in path[1:]
    fork = next(e for e in entries.values() if e.get("custom_type") == CHECKPOINT and e["data"]["id"] == "1f0-0020")
    assert len(fork["data"]["values"]["messages"]) == 3  # its line's base (40 messages) is on another branch
    with local_opener() as sm:  # a restart: read from the entries alone
        ids = {e["id"] for e in stored(sm, "d") if e.get("custom_type") == CHECKPOINT}
        full = {e["id"]: e["data"]["values"]["messages"] for e in stored(sm, "d")
                if e.get("custom_type") == CHECKPOINT and len(e["data"]["values"]["messages"]) == 3}
        serde = JsonPlusSerializer()
        for _, _, head, base, _, _, tail in deltas.values():
            assert base in ids and base in full  # a delta's base is a full value, in the same session
            assert len(head) + len(tail) < len(full[base][2]) // 2
        saver = SessionManagerSaver(sm)
        for thread in ("d", "e"):
            for step, n in [*enumerate(sizes), (20, 11)]:
                got = saver.get_tuple(config(thread, f"1f0-{step:04}"))
                assert got is not None and got.checkpoint["channel_values"]["messages"] == history[:n]
                raw = serde.dumps_typed(history[:n])[1]
                entries = {e["id"]: e for e in stored(sm, thread)}
                value = [e for e in entries.values() if e.get("custom_type") == CHECKPOINT
                         and e["data"]["id"] == f"1f0-{step:04}"][-1]["data"]["values"]["messages"]
                if len(value) == 7:  # [version, type, head, base entry, start, end, tail]
                    base_text = entries[value[3]]["data"]["values"]["messages"][2]
                    assert (value[2] + base_text[value[4]:value[5]] + value[6]).encode("latin-1") == raw
                else:
                    assert value[2].encode("latin-1") == raw


def test_a_small_or_unrelated_value_is_stored_whole(local_opener: Opener) -> None:
    # Prevents: a delta larger than the value it stands for (a counter, a short list), or one made of
    # bytes that do not continue the base's (a list edited in the middle: LangGraph's RemoveMessage).
    history = [HumanMessage(f"message {i}: " + "lorem ipsum " * 8) for i in range(12)]
    with local_opener() as sm:
        saver = SessionManagerSaver(sm)
        saved = config("w")
        puts = [history[:10], history[:1] + history[2:11], [HumanMessage("x")], [HumanMessage("x")]]
        for step, messages in enumerate(puts):
            saved = saver.put(saved, _messages_checkpoint(step, messages, f"{step + 1}.0"), {"step": step},
                              {"messages": f"{step + 1}.0"})
        values = [e["data"]["values"]["messages"] for e in stored(sm, "w") if e.get("custom_type") == CHECKPOINT]
        assert [len(v) for v in values] == [3, 3, 3, 3]
        got = saver.get_tuple(config("w", "1f0-0001"))
        # Raw bytes (the serializer's "bytes" type) grown: whole, as a release before deltas reads them.
        for step, raw in enumerate([b"\x92" + b"a" * 2000, b"\x93" + b"a" * 2100], start=len(puts)):
            saved = saver.put(saved, _messages_checkpoint(step, raw, f"{step + 1}.0"),  # type: ignore[arg-type]
                              {"step": step}, {"messages": f"{step + 1}.0"})
        raws = [e["data"]["values"]["messages"] for e in stored(sm, "w") if e.get("custom_type") == CHECKPOINT][-2:]
        assert [(len(v), v[1]) for v in raws] == [(3, "bytes"), (3, "bytes")]
    assert got is not None and got.checkpoint["channel_values"]["messages"] == puts[1]


def test_a_put_redone_after_another_writer_moved_the_session_makes_its_delta_again(tmp_path: Path) -> None:
    # Prevents: a delta made against the saver's index before it learned the session moved on
    # (another writer's checkpoint, or the thread deleted and put again) naming a base the session
    # does not hold: the put is redone with the index derived again, its delta made from that.
    history = [HumanMessage(f"message {i}: " + "lorem ipsum " * 8) for i in range(12)]
    with session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db") as one, \
            session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db") as two:
        first, second = SessionManagerSaver(one), SessionManagerSaver(two)
        first.put(config("m"), _messages_checkpoint(0, history[:8], "1.0"), {"step": 0}, {"messages": "1.0"})
        second.delete_thread("m")
        second.put(config("m"), _messages_checkpoint(1, history[:7], "1.0"), {"step": 0}, {"messages": "1.0"})
        first.put(config("m", "1f0-0001"), _messages_checkpoint(2, history[:9], "2.0"), {"step": 1},
                  {"messages": "2.0"})
        ids = {e["id"] for e in stored(one, "m")}
        deltas = [e["data"]["values"]["messages"] for e in stored(one, "m")
                  if e.get("custom_type") == CHECKPOINT and len(e["data"]["values"]["messages"]) == 7]
        assert len(deltas) == 1 and deltas[0][3] in ids  # made against the second writer's value
        got = SessionManagerSaver(two).get_tuple(config("m", "1f0-0002"))
    assert got is not None and got.checkpoint["channel_values"]["messages"] == history[:9]


def test_a_path_copied_by_session_fork_reads_its_deltas_under_the_new_entry_ids(local_opener: Opener) -> None:
    # Prevents: a thread's session copied by session::fork (one root-to-entry path, new entry ids)
    # whose delta values name their base by an entry id the copy does not have: the base is found as
    # the nearest checkpoint above holding the channel whole, which is what it was when written.
    history = [HumanMessage(f"message {i}: " + "lorem ipsum " * 8) for i in range(12)]
    with local_opener() as sm:
        saver = SessionManagerSaver(sm)
        saved = config("p")
        for step, n in enumerate([6, 7, 8, 3, 12]):
            saved = saver.put(saved, _messages_checkpoint(step, history[:n], f"{step + 1}.0"), {"step": step},
                              {"messages": f"{step + 1}.0"})
        last = [e for e in stored(sm, "p") if e.get("custom_type") == CHECKPOINT]
        assert [len(e["data"]["values"]["messages"]) for e in last] == [3, 7, 7, 7, 3]
        copy = sm.call("session::fork", {"session_id": "p", "entry_id": last[3]["id"]})["session_id"]
        copied = SessionManagerSaver(sm)
        for step, n in enumerate([6, 7, 8, 3]):
            got = copied.get_tuple(config(copy, f"1f0-{step:04}"))
            assert got is not None and got.checkpoint["channel_values"]["messages"] == history[:n]


def test_a_saver_keeps_one_copy_of_each_base_value(tmp_path: Path) -> None:
    # Prevents: each thread index the saver keeps (up to 1,024) holding a base value twice, its text
    # (kept alive past the store cache's eviction) beside the bytes the puts compare with.
    history = [HumanMessage(f"message {i}: " + "lorem ipsum " * 8) for i in range(12)]
    with session_manager.open(tmp_path / "d") as sm:
        saver = SessionManagerSaver(sm)
        saved = config("k")
        for step, n in enumerate([8, 9, 10]):
            saved = saver.put(saved, _messages_checkpoint(step, history[:n], f"{step + 1}.0"), {"step": step},
                              {"messages": f"{step + 1}.0"})
        base = saver._indexes["k"].bases[""]["messages"]
        assert base.mid is not None and base.text == ""
        got = saver.get_tuple(config("k"))
    assert got is not None and got.checkpoint["channel_values"]["messages"] == history[:10]
