"""The LangGraph saver's serializer memo (issue 29, :mod:`session_manager.adapters._memo`): a put
serializes only the messages it has not serialized before, and what it stores is still, byte for
byte, ``JsonPlusSerializer().dumps_typed(value)`` of what was put, whatever was edited in place
between puts (content, nested ``additional_kwargs``, ids, tool calls, NaN/None and bool/int/float
swaps, subclass values, a message's class), replaced, removed, reordered, after forks and time
travel, a restart, the budget letting the memo go, over fs, sqlite and postgres; a custom
serializer's bytes are its own, as before."""

from __future__ import annotations

import logging
import math
import tempfile
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.serde import jsonplus
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from session_manager.adapters import _memo
from session_manager.adapters import langgraph as lg
from session_manager.adapters._checkpoints import CHECKPOINT, value_bytes
from session_manager.adapters._kept import MEMO
from session_manager.adapters.langgraph import SessionManagerSaver
from tests.unit.test_adapter_attacks_review12_langgraph import _open, checkpoint
from tests.unit.test_adapter_attacks_review12_langgraph import where as where

SERDE = JsonPlusSerializer()
_QUIET = [False]  # the test's own serializing in progress: not counted (item_encodes)


def expected_bytes(value: Any) -> tuple[str, bytes]:
    """``SERDE.dumps_typed(value)``, uncounted by :func:`item_encodes`."""
    _QUIET[0] = True
    try:
        return SERDE.dumps_typed(value)
    finally:
        _QUIET[0] = False


class Text(str):
    """A str subclass: the fingerprint refuses it (no reuse), the serializer writes it as it does."""


def stored_values(sm: Any, thread: str) -> dict[tuple[str, str], dict[str, bytes]]:
    """Every checkpoint's stored values of ``thread``, as the bytes the store holds (a delta
    joined with the whole value of the entry it names): (ns, checkpoint id) -> channel -> bytes."""
    entries = [e for e in sm.service.store.entries(thread) if e.get("custom_type") == CHECKPOINT]
    by_id = {e["id"]: e for e in entries}
    out: dict[tuple[str, str], dict[str, bytes]] = {}
    for e in entries:
        values = {}
        for channel, packed in e["data"]["values"].items():
            if packed[1] == "empty":
                continue
            base = by_id[packed[3]]["data"]["values"][channel][2] if len(packed) > 3 else None
            values[channel] = value_bytes(packed, base)
        out[(e["data"]["ns"], e["data"]["id"])] = values
    return out


class Puts:
    """Puts through a saver, each checkpoint's values' ``dumps_typed`` bytes made at put time
    (what LangGraph's own savers store), and the bytes the saver handed to the store (recorded)."""

    def __init__(self, saver: SessionManagerSaver, monkeypatch: pytest.MonkeyPatch) -> None:
        self.saver = saver
        self.expected: dict[tuple[str, str, str], dict[str, tuple[str, bytes]]] = {}
        self.handed: list[list[tuple[str, str, bytes]]] = []
        real = lg.pack_values

        def record(serialized: Any, bases: Any) -> Any:
            self.handed.append([(name, kind, bytes(data)) for name, _, kind, data in serialized if data is not None])
            return real(serialized, bases)

        monkeypatch.setattr(lg, "pack_values", record)
        self.n = 0

    def put(self, thread: str, parent: str | None, values: dict[str, Any], ns: str = "") -> str:
        self.n += 1
        cid = f"1f0-{self.n:05d}"
        versions = {c: f"{self.n:08}.{uuid.uuid4().int % 10**6:06}" for c in values}
        configurable = {"thread_id": thread, "checkpoint_ns": ns}
        if parent is not None:
            configurable["checkpoint_id"] = parent
        want = {c: expected_bytes(v) for c, v in values.items()}  # (before: the saver must not change it)
        self.saver.put({"configurable": configurable}, checkpoint(cid, values, versions), {"step": self.n}, versions)
        assert {c: (k, d) for c, k, d in self.handed[-1]} == want
        self.expected[(thread, ns, cid)] = want
        return cid

    def check(self, sm: Any, saver: SessionManagerSaver) -> None:
        """The bytes stored are the expected ones, and a saver reads each value back equal."""
        threads = {t for t, _, _ in self.expected}
        stored = {(t, ns, cid): v for t in threads for (ns, cid), v in stored_values(sm, t).items()}
        for key, want in self.expected.items():
            assert stored[key] == {c: d for c, (_, d) in want.items()}, key
            thread, ns, cid = key
            got = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}})
            assert got is not None
            assert {c: SERDE.dumps_typed(v) for c, v in got.checkpoint["channel_values"].items()} == want, key


@pytest.fixture
def item_encodes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The messages the serializer encoded alone or within a list (each ``_msgpack_enc`` of a message)."""
    calls: list[Any] = []
    real = jsonplus._msgpack_enc

    def counted(data: Any) -> bytes:
        if _QUIET[0]:
            pass
        elif isinstance(data, BaseMessage):
            calls.append(data)
        elif type(data) is tuple and len(data) == 4 and data[3] == "model_validate_json":
            calls.append(data)  # (a message's Ext body: the serializer's default encoding one)
        return real(data)

    monkeypatch.setattr(jsonplus, "_msgpack_enc", counted)
    yield calls


def msg(i: int, cls: type[BaseMessage] = HumanMessage, **kw: Any) -> BaseMessage:
    if cls is ToolMessage:
        kw.setdefault("tool_call_id", f"call{i}")
    return cls(f"message {i}: " + "lorem ipsum " * 12, **kw)


def test_a_grown_list_serializes_only_its_new_messages_and_stores_dumps_typed_bytes(
        where: tuple[str, str], monkeypatch: pytest.MonkeyPatch, item_encodes: list[Any]) -> None:
    # Prevents: every put serializing the whole history again (issue 29); and a joined value
    # differing in any byte from dumps_typed's.
    history = [msg(i, HumanMessage if i % 2 == 0 else AIMessage) for i in range(40)]
    with _open(*where) as sm:
        saver = SessionManagerSaver(sm)
        puts = Puts(saver, monkeypatch)
        parent = None
        for n in range(10, 14):  # (the first puts: the memo's safety checks encode the whole value too)
            parent = puts.put("t", parent, {"messages": history[:n], "counter": n})
        for n in range(14, 20):
            item_encodes.clear()
            parent = puts.put("t", parent, {"messages": history[:n], "counter": n})
            assert len(item_encodes) == 2  # the one new message (the message, then its Ext body)
        item_encodes.clear()
        parent = puts.put("t", parent, {"messages": history[:12]})  # cut back: nothing new
        assert item_encodes == []
        puts.check(sm, SessionManagerSaver(sm))
        assert saver._memo.on
    with _open(*where) as sm:  # a restart: the memo starts empty, the bytes are the same
        again = SessionManagerSaver(sm)
        puts.saver = again
        item_encodes.clear()
        puts.put("t", parent, {"messages": history[:13]})
        assert len(item_encodes) >= 2 * 13
        puts.check(sm, again)


EDITS = ["content", "kwargs_nested", "id", "tool_calls", "response_metadata", "nan_none", "bool_int",
         "float_int", "neg_zero", "subclass_value", "big_int", "tuple_value", "datetime_value", "extra",
         "class_swap", "name"]


def edit(message: BaseMessage, how: str, step: int) -> None:
    """Change ``message`` in place, as a node (or add_messages) may."""
    if how == "content":
        message.content = f"edited {step}"
    elif how == "kwargs_nested":
        message.additional_kwargs.setdefault("nested", {}).setdefault("deeper", {})["k"] = step
    elif how == "id":
        message.id = f"id-{step}"
    elif how == "tool_calls" and isinstance(message, AIMessage):
        message.tool_calls.append({"name": "f", "args": {"a": step}, "id": f"c{step}", "type": "tool_call"})
    elif how == "response_metadata":
        message.response_metadata["model"] = f"m{step}"
    elif how == "nan_none":
        was = message.response_metadata.get("x", 0.5)
        message.response_metadata["x"] = None if isinstance(was, float) and math.isnan(was) else math.nan
    elif how == "bool_int":
        message.additional_kwargs["flag"] = 1 if message.additional_kwargs.get("flag") is True else True
    elif how == "float_int":
        message.additional_kwargs["flag"] = 1.0 if type(message.additional_kwargs.get("flag")) is int else 1
    elif how == "neg_zero":
        message.additional_kwargs["z"] = 0.0 if str(message.additional_kwargs.get("z")) == "-0.0" else -0.0
    elif how == "subclass_value":
        message.additional_kwargs["s"] = Text(f"sub {step}")
    elif how == "big_int":  # (uint64: past int64, within what msgpack holds)
        message.additional_kwargs["big"] = 2**63 + step
    elif how == "tuple_value":
        message.additional_kwargs["t"] = (step, "x")
    elif how == "datetime_value":
        message.additional_kwargs["when"] = datetime(2026, 1, 1 + step % 28)
    elif how == "extra":
        message.custom_extra = {"step": step}
    elif how == "class_swap" and type(message) in (HumanMessage, SystemMessage):
        message.__class__ = SystemMessage if type(message) is HumanMessage else HumanMessage
    elif how == "name":
        message.name = None if message.name else f"n{step}"


OPS = st.one_of(
    st.tuples(st.just("edit"), st.integers(0, 60), st.sampled_from(EDITS)),
    st.tuples(st.just("append"), st.integers(1, 3), st.sampled_from(["human", "ai", "tool", "system"])),
    st.tuples(st.just("replace"), st.integers(0, 60), st.just("")),
    st.tuples(st.just("remove"), st.integers(0, 60), st.just("")),
    st.tuples(st.just("reverse"), st.just(0), st.just("")),
    st.tuples(st.just("duplicate"), st.integers(0, 60), st.just("")),
    st.tuples(st.just("cut"), st.integers(0, 60), st.just("")),
    st.tuples(st.just("dict_item"), st.just(0), st.just("")),
    st.tuples(st.just("travel"), st.integers(0, 60), st.just("")),
)
CLASSES = {"human": HumanMessage, "ai": AIMessage, "tool": ToolMessage, "system": SystemMessage}


def run_ops(saver: SessionManagerSaver, puts: Puts, ops: list[tuple[str, int, str]]) -> None:
    """A thread's puts, one after each op on its messages list (edits in place between puts)."""
    messages: list[Any] = [msg(i, AIMessage if i % 2 else HumanMessage) for i in range(6)]
    made = 6
    parent = puts.put("h", None, {"messages": list(messages)})
    history = [(parent, list(messages))]
    for step, (op, at, how) in enumerate(ops):
        i = at % len(messages) if messages else 0
        if op == "edit" and messages and isinstance(messages[i], BaseMessage):
            edit(messages[i], how, step)
        elif op == "append":
            for _ in range(at):
                messages.append(msg(made, CLASSES[how]))
                made += 1
        elif op == "replace" and messages:
            messages[i] = msg(made, HumanMessage)
            made += 1
        elif op == "remove" and messages:
            del messages[i]
        elif op == "reverse":
            messages.reverse()
        elif op == "duplicate" and messages:
            messages.append(messages[i])
        elif op == "cut":
            messages = messages[:i]
        elif op == "dict_item":
            messages.append({"role": "user", "content": f"plain {step}"})
        elif op == "travel":  # time travel: a fork from an earlier checkpoint, its list (its objects, as edited)
            parent, old = history[at % len(history)]
            messages = list(old)
        parent = puts.put("h", parent, {"messages": list(messages)})
        history.append((parent, list(messages)))


@pytest.mark.parametrize("kind", ["fs", "sqlite"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, min_size=1, max_size=25))
def test_stored_bytes_equal_dumps_typed_whatever_is_edited_between_puts(
        kind: str, ops: list[tuple[str, int, str]]) -> None:
    # Prevents: a memoized message's bytes reused after an in-place edit the fingerprint missed
    # (NaN/None, 1/1.0/True, -0.0/0.0, a str subclass, a tuple, an int past 64 bits, a class
    # swapped, an extra attribute...), or a list joined wrong after a replace/remove/reorder/
    # duplicate/cut or a time-travel fork: a stored byte other than dumps_typed's.
    with pytest.MonkeyPatch.context() as monkeypatch, tempfile.TemporaryDirectory() as tmp, _open(kind, tmp) as sm:
        saver = SessionManagerSaver(sm)
        puts = Puts(saver, monkeypatch)
        run_ops(saver, puts, ops)
        assert saver._memo.on
        puts.check(sm, SessionManagerSaver(sm))  # a fresh saver reads every one back equal


@pytest.mark.parametrize("how", EDITS)
def test_each_edit_in_place_is_serialized_again(where: tuple[str, str], monkeypatch: pytest.MonkeyPatch,
                                                 item_encodes: list[Any], how: str) -> None:
    # Prevents: an edit kind the fingerprint does not see (its old bytes reused: a stale value stored).
    history = [msg(i, [HumanMessage, AIMessage, SystemMessage][i % 3]) for i in range(12)]
    with _open(*where) as sm:
        saver = SessionManagerSaver(sm)
        puts = Puts(saver, monkeypatch)
        parent = None
        for n in (8, 9, 10):
            parent = puts.put("e", parent, {"messages": history[:n]})
        for step in range(3):  # (each edit twice over: NaN then None, True then 1, ...)
            for target in (history[3], history[4], history[5]):
                edit(target, how, step)
            parent = puts.put("e", parent, {"messages": history[:10]})
        puts.check(sm, SessionManagerSaver(sm))
        assert saver._memo.on


def test_a_custom_serializer_gets_the_whole_value_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the memo standing in for a serializer whose writing of a list it never verified (a
    # subclass, another serde, a patched dumps_typed): their own bytes must be stored.
    class Mine(JsonPlusSerializer):
        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            calls.append(obj)
            return super().dumps_typed(obj)

    calls: list[Any] = []
    history = [msg(i) for i in range(12)]
    patched = JsonPlusSerializer()

    def dumps_typed(obj: Any) -> tuple[str, bytes]:
        calls.append(obj)
        return JsonPlusSerializer.dumps_typed(patched, obj)

    patched.dumps_typed = dumps_typed  # type: ignore[method-assign]
    with _open("fs", str(tmp_path)) as sm:
        for i, serde in enumerate([Mine(), patched]):
            saver = SessionManagerSaver(sm, serde=serde)
            puts = Puts(saver, monkeypatch)
            parent = None
            for n in (8, 9, 10):
                parent = puts.put(f"c{i}", parent, {"messages": history[:n]})
            assert saver._memo.threads == {}  # never used
            puts.check(sm, SessionManagerSaver(sm, serde=serde))
        assert sum(1 for c in calls if isinstance(c, list)) == 6  # every list, whole, through each


def test_a_langgraph_checkpoint_without_the_serializer_parts_the_memo_reproduces_gets_no_memo(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a langgraph-checkpoint release of the pinned range lacking jsonplus's private parts
    # (_option, _msgpack_default, _msgpack_enc, _DeltaSnapshot) breaking the saver's import or
    # puts: the module then marks itself unavailable and every value goes through dumps_typed whole.
    monkeypatch.setattr(_memo, "_AVAILABLE", False)
    assert not _memo.usable(JsonPlusSerializer())
    history = [msg(i) for i in range(12)]
    with _open("fs", str(tmp_path)) as sm:
        saver = SessionManagerSaver(sm)
        puts = Puts(saver, monkeypatch)
        parent = None
        for n in (8, 9, 10):
            parent = puts.put("t", parent, {"messages": history[:n]})
        assert saver._memo.threads == {}  # never used
        puts.check(sm, SessionManagerSaver(sm))


def test_an_item_the_serializer_refuses_alone_goes_through_the_whole_value(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a message the serializer cannot encode failing the put with another error than
    # before, or not reaching the serializer's pickle fallback.
    bad = msg(1, additional_kwargs={"x": object()})
    with _open("fs", str(tmp_path)) as sm:
        saver = SessionManagerSaver(sm)
        with pytest.raises(TypeError) as caught:
            SERDE.dumps_typed([msg(0), bad])
        with pytest.raises(type(caught.value)):
            saver.put({"configurable": {"thread_id": "b"}}, checkpoint("1f0-1", {"messages": [msg(0), bad]},
                                                                       {"messages": "1"}), {}, {"messages": "1"})
        pickling = SessionManagerSaver(sm, serde=JsonPlusSerializer(pickle_fallback=True))
        good = [msg(0), msg(2)]
        pickling.put({"configurable": {"thread_id": "p"}}, checkpoint("1f0-1", {"messages": good}, {"messages": "1"}),
                     {}, {"messages": "1"})
        value = [*good, bad]
        want = pickling.serde.dumps_typed(value)
        assert want[0] == "pickle"
        pickling.put({"configurable": {"thread_id": "p", "checkpoint_id": "1f0-1"}},
                     checkpoint("1f0-2", {"messages": value}, {"messages": "2"}), {}, {"messages": "2"})
        stored = stored_values(sm, "p")[("", "1f0-2")]["messages"]
        assert stored == want[1]
        entry = [e for e in sm.service.store.entries("p") if e.get("custom_type") == CHECKPOINT][-1]
        assert entry["data"]["values"]["messages"][1] == "pickle"


def test_a_joined_value_differing_from_dumps_typed_turns_the_memo_off_and_stores_dumps_typed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: the safety net missing a serializer whose list is not its items joined (here: a
    # wrong array header), and so a wrong value stored.
    monkeypatch.setattr(_memo, "array_header", lambda n: b"\x90")
    history = [msg(i) for i in range(20)]
    with _open("fs", str(tmp_path)) as sm:
        saver = SessionManagerSaver(sm)
        puts = Puts(saver, monkeypatch)
        with caplog.at_level(logging.WARNING, logger=_memo.__name__):
            parent = puts.put("s", None, {"messages": history[:17]})
        assert not saver._memo.on and saver._memo.threads == {}
        assert "serializer memo turned off" in caplog.text
        for n in (18, 19):
            parent = puts.put("s", parent, {"messages": history[:n]})
        puts.check(sm, SessionManagerSaver(sm))


def test_the_memo_counts_in_the_cache_budget_and_goes_with_the_thread(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: each thread's memo (its messages, their bytes and fingerprints) held beside the
    # saver's cache_bytes budget, or kept after the thread is deleted.
    history = [msg(i, HumanMessage if i % 2 == 0 else AIMessage) for i in range(30)]
    budget = 60_000
    with _open("fs", str(tmp_path)) as sm:
        saver = SessionManagerSaver(sm, cache_bytes=budget)
        puts = Puts(saver, monkeypatch)
        for t in range(8):
            parent = None
            for n in (20, 25, 30):
                parent = puts.put(f"t{t}", parent, {"messages": history[:n]})
            assert saver._kept.total <= budget
            held = sum(memo.size() for memo in saver._memo.threads.values())
            charged = sum(s for (_, what), (_, _, s) in saver._kept._kept.items() if what == MEMO)
            assert held == charged > 0
        assert len(saver._memo.threads) < 8  # the least recently used let go
        assert "t7" in saver._memo.threads
        saver.delete_thread("t7")
        assert "t7" not in saver._memo.threads
        assert not any(key == ("t7", MEMO) for key in saver._kept._kept)
        del puts.expected[("t7", "", "1f0-00024")], puts.expected[("t7", "", "1f0-00023")]
        del puts.expected[("t7", "", "1f0-00022")]
        puts.check(sm, SessionManagerSaver(sm))
        nothing = SessionManagerSaver(sm, cache_bytes=0)
        Puts(nothing, monkeypatch).put("z", None, {"messages": history[:20]})
        assert nothing._memo.threads == {} and nothing._kept.total == 0


def test_a_graph_s_turns_store_dumps_typed_bytes_and_reuse_its_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       item_encodes: list[Any]) -> None:
    # Prevents: the memo missing LangGraph's own flow (add_messages gives each new message an id
    # in place; one step's list holds the previous step's objects; a node edits an earlier
    # message in place) or storing anything else than dumps_typed of each put's values.
    from langgraph.graph import START, MessagesState, StateGraph

    def bot(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("lorem ipsum " * 16)]}

    def polish(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        last.content = str(last.content) + " (polished)"  # an in-place edit of the previous step's message
        return {"messages": [AIMessage("done")]}

    builder = StateGraph(MessagesState)
    builder.add_node("bot", bot)
    builder.add_node("polish", polish)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", "polish")
    with _open("fs", str(tmp_path)) as sm:
        saver = SessionManagerSaver(sm)
        handed: list[dict[str, bytes]] = []
        real_pack = lg.pack_values
        monkeypatch.setattr(lg, "pack_values", lambda serialized, bases: (
            handed.append({n: bytes(d) for n, _, _, d in serialized if d is not None}),
            real_pack(serialized, bases))[1])
        expected: dict[str, dict[str, bytes]] = {}
        real_put = saver.put

        def put(config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            values = checkpoint["channel_values"]
            want = {c: expected_bytes(values[c])[1] for c in new_versions if c in values}
            out = real_put(config, checkpoint, metadata, new_versions)
            assert handed[-1] == want
            expected[checkpoint["id"]] = want
            return out

        monkeypatch.setattr(saver, "put", put)
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "g"}}
        encoded = []
        for i in range(6):
            item_encodes.clear()
            graph.invoke({"messages": [HumanMessage(f"question {i}: " + "lorem ipsum " * 16)]}, config,
                         durability="sync")  # (each put before the next step: counts as below)
            encoded.append(sum(1 for c in item_encodes if isinstance(c, BaseMessage)))
        assert saver._memo.on
        # A turn encodes the messages read back at its start (new objects: each once), the user's,
        # bot's and polish's new ones and the one polish edited in place: the sixth 15 + 4 = 19,
        # where its three puts' whole lists were 16 + 17 + 18 = 51.
        assert encoded == [4, 7, 10, 13, 16, 19]
        stored = stored_values(sm, "g")
        assert len(expected) == 6 * 4 and all(stored[("", cid)] == want for cid, want in expected.items())
        last = SessionManagerSaver(sm).get_tuple(config)
        assert last is not None
        texts = [m.content for m in last.checkpoint["channel_values"]["messages"]]
        assert len(texts) == 18 and texts[-2].endswith("(polished)") and texts[-1] == "done"


def test_the_fingerprint_refuses_what_it_cannot_tell_apart() -> None:
    # Prevents: a fingerprint equal for two states the serializer writes differently.
    m = msg(0)
    plain = _memo.fingerprint(m)
    assert plain is not None
    seen = {plain}
    for value in [None, math.nan, 1, True, 1.0, 0.0, -0.0, 2**63, "1", [1], {"a": 1}]:
        m.additional_kwargs["v"] = value
        fp = _memo.fingerprint(m)
        assert fp is not None and fp not in seen, value
        seen.add(fp)
    for value in [2**64, -2**63 - 1, (1,), Text("x"), {1: 2}, datetime(2026, 1, 1), object(), "\ud800", msg(1)]:
        m.additional_kwargs["v"] = value
        assert _memo.fingerprint(m) is None, value
    assert _memo.memoizable(HumanMessage) and _memo.memoizable(AIMessage)

    class Mine(HumanMessage):
        pass

    assert not _memo.memoizable(Mine) and not _memo.memoizable(dict)


def test_a_put_that_fails_holds_no_memo_of_its_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: puts failing in the store (never charged to the budget) leaving each thread's
    # messages held by the memo, uncounted, for as long as the saver lives.
    history = [msg(i) for i in range(12)]
    with _open("fs", str(tmp_path)) as sm:
        saver = SessionManagerSaver(sm)
        puts = Puts(saver, monkeypatch)
        parent = puts.put("f", None, {"messages": history[:10]})
        assert "f" in saver._memo.threads

        def refuse(*args: Any, **kwargs: Any) -> str:
            raise OSError("disk full")

        with monkeypatch.context() as failing:
            failing.setattr(sm, "_append_owned", refuse)
            for thread in ("f", "g"):
                bad = checkpoint("1f0-9", {"messages": history}, {"messages": "9"})
                with pytest.raises(OSError):
                    saver.put({"configurable": {"thread_id": thread}}, bad, {}, {"messages": "9"})
        assert saver._memo.threads == {}
        puts.put("f", parent, {"messages": history[:12]})  # serialized whole again, the same bytes
        puts.check(sm, SessionManagerSaver(sm))
