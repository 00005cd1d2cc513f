"""Review 23's attacks on the LangGraph saver's serializer memo (:mod:`session_manager.adapters._memo`):
what a put stores must be ``dumps_typed`` of what was put, byte for byte, even when another
thread edits the messages or the list while the put serializes them (simulated here at exact
points with a profiling hook, so each race is deterministic), or jsonplus's options are patched;
a put that fails leaves no memo held outside the saver's budget; puts that never share messages
are serialized whole."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import ormsgpack
import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.serde import jsonplus
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from session_manager.adapters.langgraph import SessionManagerSaver
from tests.unit.test_adapter_attacks_review12_langgraph import _open, checkpoint
from tests.unit.test_adapter_attacks_review12_langgraph import where as where
from tests.unit.test_adapter_langgraph_memo import stored_values

SERDE = JsonPlusSerializer()


@contextmanager
def while_encoding(target: Any, on_call: Callable[[], None],
                   on_return: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Run ``on_call`` as the serializer starts encoding ``target`` (its ``default`` entered for
    it, or for a message of its class and content: a copy of it) and ``on_return`` as it is done
    with it: what another thread may do at those points."""
    entered: list[FrameType] = []

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if frame.f_code is not jsonplus._msgpack_default.__code__:
            return
        obj = frame.f_locals.get("obj")
        if event == "call" and not entered and (
                obj is target or (type(obj) is type(target) and obj.__dict__ == target.__dict__)):
            entered.append(frame)
            on_call()
        elif event == "return" and entered and entered[0] is frame:
            on_return()


    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(None)


class Thread:
    """One thread's puts, each a child of the previous one."""

    def __init__(self, saver: SessionManagerSaver, thread: str) -> None:
        self.saver, self.thread, self.n, self.parent = saver, thread, 0, None

    def put(self, messages: list[Any]) -> str:
        self.n += 1
        cid = f"1f0-{self.n:05d}"
        configurable: dict[str, Any] = {"thread_id": self.thread}
        if self.parent is not None:
            configurable["checkpoint_id"] = self.parent
        versions = {"messages": f"{self.n:08}"}
        out = self.saver.put({"configurable": configurable}, checkpoint(cid, {"messages": messages}, versions),
                             {"step": self.n}, versions)
        assert out["configurable"] == {"thread_id": self.thread, "checkpoint_ns": "", "checkpoint_id": cid}
        self.parent = cid
        return cid


def read_back(sm: Any, thread: str, cid: str) -> list[Any]:
    got = SessionManagerSaver(sm).get_tuple({"configurable": {"thread_id": thread, "checkpoint_id": cid}})
    assert got is not None
    return list(got.checkpoint["channel_values"]["messages"])


def test_a_message_edited_and_restored_while_encoded_is_not_reused_with_the_edit(where: tuple[str, str]) -> None:
    # Prevents: a message edited by another thread after the memo took its fingerprint and
    # restored before the fingerprint was taken again (A -> B -> A) keeping B's bytes under A's
    # fingerprint: every later put of the unchanged message storing B (a stale value, silently:
    # the safety checks had run).
    base = [HumanMessage(f"base {i}") for i in range(3)]
    target = AIMessage("A" * 64, id="t")
    with _open(*where) as sm:
        saver = SessionManagerSaver(sm)
        puts = Thread(saver, "aba")
        puts.put(base[:2])
        puts.put(base)  # (the first join and the first reuse: checked against dumps_typed)

        def edit() -> None:
            target.content = "B" * 64

        def restore() -> None:
            target.content = "A" * 64

        value = [*base, target]
        with while_encoding(target, edit, restore):
            raced = puts.put(value)
        after = [puts.put(value), puts.put([*value, HumanMessage("next")])]
        stored = stored_values(sm, "aba")
        raced_bytes = stored[("", raced)]["messages"]
        # (the raced put itself: the message as it was before or during the edit, nothing else)
        assert raced_bytes in (SERDE.dumps_typed(value)[1], SERDE.dumps_typed([*base, AIMessage("B" * 64, id="t")])[1])
        for cid, want in zip(after, [value, [*value, HumanMessage("next")]], strict=True):
            assert stored[("", cid)]["messages"] == SERDE.dumps_typed(want)[1]
            assert [m.content for m in read_back(sm, "aba", cid)] == [m.content for m in want]
        assert saver._memo.on


def test_a_list_changed_while_its_put_encodes_it_leaves_the_next_puts_right(where: tuple[str, str]) -> None:
    # Prevents: the memo holding the list as it was after its items were encoded (another thread
    # appended one, or replaced one) beside the bytes of the list as it was before: every later
    # put of the thread's messages failing (IndexError), or an item reused with the bytes of the
    # item it replaced.
    base = [HumanMessage(f"base {i}") for i in range(3)]
    with _open(*where) as sm:
        saver = SessionManagerSaver(sm)
        puts = Thread(saver, "grow")
        puts.put(base[:2])
        puts.put(base)
        value = [*base, AIMessage("last")]
        put_as = list(value)
        late = HumanMessage("late")
        with while_encoding(value[-1], lambda: value.append(late)):
            raced = puts.put(value)
        assert value == [*put_as, late]
        later = [puts.put(value), puts.put([*value, AIMessage("more")])]
        stored = stored_values(sm, "grow")
        assert stored[("", raced)]["messages"] == SERDE.dumps_typed(put_as)[1]  # the list as put
        for cid, want in zip(later, [value, [*value, AIMessage("more")]], strict=True):
            assert stored[("", cid)]["messages"] == SERDE.dumps_typed(want)[1]
            assert [m.content for m in read_back(sm, "grow", cid)] == [m.content for m in want]

        # An item replaced while encoded by one of another class with the same fields (its
        # ``type`` set to match): the bytes made were of the item replaced.
        puts = Thread(saver, "swap")
        puts.put(base[:2])
        puts.put(base)
        was = HumanMessage("same")
        instead = SystemMessage("same")
        object.__setattr__(instead, "type", "human")
        value = [*base, was]

        def replace() -> None:
            value[-1] = instead

        with while_encoding(was, replace):
            puts.put(value)
        after = puts.put(value)
        assert stored_values(sm, "swap")[("", after)]["messages"] == SERDE.dumps_typed(value)[1]
        assert [type(m) for m in read_back(sm, "swap", after)] == [HumanMessage] * 3 + [SystemMessage]
        assert saver._memo.on


def test_a_put_its_serializer_refuses_holds_no_memo(tmp_path: Path) -> None:
    # Prevents: a put whose later channel the serializer refuses (after the messages channel was
    # memoized) leaving the thread's memo held, never counted in cache_bytes and never let go (a
    # thread that never lands is never in the saver's index): memory growing with each such put.
    with _open("fs", str(tmp_path)) as sm:
        saver = SessionManagerSaver(sm)
        messages: list[BaseMessage] = [HumanMessage("x" * 1000), AIMessage("y" * 1000)]
        with pytest.raises(TypeError) as caught:
            SERDE.dumps_typed(object())
        for t in range(4):
            values = {"messages": messages, "other": object()}
            versions = {"messages": "1", "other": "1"}
            with pytest.raises(type(caught.value)):
                saver.put({"configurable": {"thread_id": f"r{t}"}}, checkpoint("1f0-1", values, versions), {}, versions)
        assert saver._memo.threads == {}
        assert saver._kept.total == 0
        for t in range(4):
            assert saver.get_tuple({"configurable": {"thread_id": f"r{t}"}}) is None
        puts = Thread(saver, "r0")  # the thread still takes a put, its bytes dumps_typed's
        cid = puts.put(messages)
        assert stored_values(sm, "r0")[("", cid)]["messages"] == SERDE.dumps_typed(messages)[1]
        assert [m.content for m in read_back(sm, "r0", cid)] == [m.content for m in messages]


def test_a_serializer_whose_options_or_default_were_patched_gets_no_reused_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: bytes memoized under the serializer's own msgpack options (``jsonplus._option``)
    # or its ``_msgpack_default`` reused once either is patched (sorted keys, say): a put storing
    # the bytes of before the patch, not dumps_typed's.
    value = [HumanMessage("a", additional_kwargs={"z": 1, "a": 2}), AIMessage("b"), HumanMessage("c")]
    real_default = jsonplus._msgpack_default

    def default(obj: Any) -> Any:
        if isinstance(obj, BaseMessage):
            return real_default(type(obj)(f"[{obj.content}]"))
        return real_default(obj)

    patches = [("_option", (jsonplus._option & ~ormsgpack.OPT_NON_STR_KEYS) | ormsgpack.OPT_SORT_KEYS),
               ("_msgpack_default", default)]
    with _open("fs", str(tmp_path)) as sm:
        saver = SessionManagerSaver(sm)
        unpatched = SERDE.dumps_typed(value)[1]
        for name, patched in patches:
            puts = Thread(saver, f"p{name}")
            for n in (1, 2, 3):
                puts.put(value[:n])
            with monkeypatch.context() as patching:
                patching.setattr(jsonplus, name, patched)
                want = SERDE.dumps_typed(value)[1]
                assert want != unpatched  # (the patch changes what the serializer writes)
                cid = puts.put(value)
            assert stored_values(sm, f"p{name}")[("", cid)]["messages"] == want
            after = puts.put(value)  # (unpatched: the bytes memoized before still hold)
            assert stored_values(sm, f"p{name}")[("", after)]["messages"] == SERDE.dumps_typed(value)[1]
            assert [m.content for m in read_back(sm, f"p{name}", after)] == ["a", "b", "c"]
        assert saver._memo.on


def test_puts_that_never_share_messages_are_serialized_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a thread whose every put holds new message objects (read back by get_tuple, say)
    # paying the memo every put for nothing (each message fingerprinted, copied and encoded alone,
    # the previous put's id map built: ~+50% instructions a put, review 23) where dumps_typed of
    # the whole value reuses as much; and, once puts share messages again, the memo not coming back.
    template = [HumanMessage(f"message {i}: " + "lorem ipsum " * 8) for i in range(12)]
    alone: list[Any] = []
    real = jsonplus._msgpack_enc

    def counted(data: Any) -> bytes:
        if isinstance(data, BaseMessage) and sys._getframe(1).f_code.co_name == "dumps":
            alone.append(data)  # (a message encoded alone by the memo, not within a whole value)
        return real(data)

    monkeypatch.setattr(jsonplus, "_msgpack_enc", counted)
    with _open("fs", str(tmp_path)) as sm:
        saver = SessionManagerSaver(sm)
        puts = Thread(saver, "fresh")
        put: list[tuple[str, list[Any]]] = []
        for n in range(4, 10):
            fresh = [type(m).model_validate(m.model_dump()) for m in template[:n]]
            alone.clear()
            put.append((puts.put(fresh), fresh))
            if n >= 6:  # (two puts sharing nothing with the one before: the third on, whole)
                assert alone == []
        shared = [type(m).model_validate(m.model_dump()) for m in template]
        encoded = []
        for n in (10, 11, 12, 12):  # (new objects, whole; then sharing them: memoized, then reused)
            alone.clear()
            put.append((puts.put(shared[:n]), shared[:n]))
            encoded.append(len(alone))
        assert encoded == [0, 11, 1, 0]
        stored = stored_values(sm, "fresh")
        for cid, value in put:
            assert stored[("", cid)]["messages"] == SERDE.dumps_typed(value)[1]
            assert [m.content for m in read_back(sm, "fresh", cid)] == [m.content for m in value]
        assert saver._memo.on
