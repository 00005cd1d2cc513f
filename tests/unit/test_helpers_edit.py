"""The edit / regenerate / alternatives / abort helpers (issue 26): what they
append, where the active leaf ends up, the events they fire and do not fire,
their errors, and what reads back after a reopen."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import aio
from session_manager.clock import ManualClock
from session_manager.errors import ENTRY_NOT_FOUND, INVALID_ENTRY_KIND, INVALID_REQUEST, NOT_FOUND, SessionError
from session_manager.ids import SequentialIds
from session_manager.messages import assistant_message, custom, function_call, function_result_message, user_message
from session_manager.types import AssistantMessage, FunctionResultMessage, TextBlock, Usage

EVENTS = session_manager.EVENT_FUNCTIONS


def open_store(where: Path) -> session_manager.SessionManager:
    return session_manager.open(where, ids=SequentialIds(), clock=ManualClock(1_000))


class Recorder:
    """Every event of the six functions, as (function_id, payload)."""

    def __init__(self, sm: session_manager.SessionManager) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        for fid in EVENTS:
            sm.observe({"function_id": fid}, lambda e, fid=fid: self.events.append((fid, e)))

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        out, self.events = self.events, []
        return out


@pytest.fixture
def chat(tmp_path: Path) -> Iterator[tuple[session_manager.SessionManager, str, dict[str, str]]]:
    """start (custom root) -> u1 (user) -> a1 (assistant)."""
    sm = open_store(tmp_path)
    sid = sm.create(title="t").session_id
    ids = {
        "start": sm.append(sid, custom=custom("start")).entry_id,
        "u1": sm.append(sid, message=user_message("Rain?")).entry_id,
        "a1": sm.append(sid, message=assistant_message("Maybe.", usage=Usage(input=3))).entry_id,
    }
    yield sm, sid, ids
    sm.close()


def path_ids(sm: session_manager.SessionManager, sid: str) -> list[str]:
    return [m.entry_id for m in sm.messages(sid, include_custom=True).messages]


def test_edit_appends_a_sibling_that_becomes_the_active_leaf_and_keeps_the_original(
        chat: tuple[session_manager.SessionManager, str, dict[str, str]], tmp_path: Path) -> None:
    # Prevents: an edit that overwrites the original (update-message), lands under the wrong parent,
    # leaves the active leaf on the old branch, or fires anything but one on-message-added.
    sm, sid, ids = chat
    events = Recorder(sm)
    edited = sm.edit(sid, ids["u1"], "Snow?")
    assert edited.parent_id == ids["start"]
    assert path_ids(sm, sid) == [ids["start"], edited.entry_id]
    [(fid, event)] = events.take()
    assert fid == session_manager.ON_MESSAGE_ADDED and event["entry_id"] == edited.entry_id
    assert event["message"]["role"] == "user" and event["message"]["content"] == [{"type": "text", "text": "Snow?"}]
    versions = sm.alternatives(sid, edited.entry_id)
    assert [(v.entry_id, v.active) for v in versions] == [(ids["u1"], False), (edited.entry_id, True)]
    assert events.take() == []  # alternatives is a read
    sm.close()
    with open_store(tmp_path) as again:  # read back from disk
        assert path_ids(again, sid) == [ids["start"], edited.entry_id]
        original = again.get_message(sid, entry_id=ids["u1"])
        assert original is not None and original.entry.message.content == [TextBlock(type="text", text="Rain?")]
        assert [v.entry_id for v in again.alternatives(sid, ids["a1"])] == [ids["a1"]]
        assert again.alternatives(sid, ids["a1"])[0].active is False


def test_edit_of_an_assistant_reply_keeps_its_fields_but_not_its_usage(
        chat: tuple[session_manager.SessionManager, str, dict[str, str]]) -> None:
    # Prevents: an edited assistant turn that loses model/stop_reason (refused by append) or claims
    # the original's token usage.
    sm, sid, ids = chat
    edited = sm.edit(sid, ids["a1"], [TextBlock(type="text", text="Yes."), "Take an umbrella."])
    got = sm.get_message(sid, entry_id=edited.entry_id)
    assert got is not None
    message = got.entry.message
    assert isinstance(message, AssistantMessage)
    assert message.usage is None and message.stop_reason == "end"
    assert [b.text for b in message.content if isinstance(b, TextBlock)] == ["Yes.", "Take an umbrella."]
    assert edited.parent_id == ids["u1"]


@pytest.mark.parametrize(("target", "code"), [("nope", ENTRY_NOT_FOUND), ("start", INVALID_ENTRY_KIND)])
def test_edit_of_an_unknown_or_custom_entry_is_refused_naming_entry_id(
        chat: tuple[session_manager.SessionManager, str, dict[str, str]], target: str, code: str) -> None:
    # Prevents: a traceback or a half-applied edit for bad input.
    sm, sid, ids = chat
    events = Recorder(sm)
    with pytest.raises(SessionError) as e:
        sm.edit(sid, ids.get(target, target), "x")
    assert e.value.code == code and "entry_id" in e.value.detail
    assert events.take() == [] and path_ids(sm, sid) == [ids["start"], ids["u1"], ids["a1"]]


def test_edit_of_a_root_message_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    # Prevents: an "edit" of a first message silently appended under the active leaf (append's
    # default parent), which would chain it after the reply instead of beside the original.
    with open_store(tmp_path) as sm:
        sid = sm.create().session_id
        root = sm.append(sid, message=user_message("hi")).entry_id
        events = Recorder(sm)
        with pytest.raises(SessionError) as e:
            sm.edit(sid, root, "hello")
        assert e.value.code == INVALID_REQUEST and "entry_id" in e.value.detail
        assert events.take() == [] and path_ids(sm, sid) == [root]
        with pytest.raises(SessionError) as bad:
            sm.edit(sid, root, 42)  # type: ignore[arg-type]
        assert bad.value.code == INVALID_REQUEST
        with pytest.raises(SessionError) as unknown:
            sm.edit("s_nope", root, "x")
        assert unknown.value.code == NOT_FOUND


def test_regenerate_moves_the_leaf_to_the_parent_silently_and_the_next_reply_is_an_alternative(
        chat: tuple[session_manager.SessionManager, str, dict[str, str]], tmp_path: Path) -> None:
    # Prevents: a regenerate that fires events, deletes the old reply, or leaves the next append
    # chained after the old reply instead of beside it.
    sm, sid, ids = chat
    events = Recorder(sm)
    assert sm.regenerate(sid, ids["a1"]) == ids["u1"]
    assert events.take() == []
    assert path_ids(sm, sid) == [ids["start"], ids["u1"]]
    again = sm.append(sid, message=assistant_message("Sunny.")).entry_id
    versions = sm.alternatives(sid, ids["a1"])
    assert [(v.entry_id, v.active) for v in versions] == [(ids["a1"], False), (again, True)]
    assert versions[0].message is not None and versions[0].message.role == "assistant"
    sm.close()
    with open_store(tmp_path) as reopened:
        assert path_ids(reopened, sid) == [ids["start"], ids["u1"], again]


@pytest.mark.parametrize(("target", "code"), [("u1", INVALID_ENTRY_KIND), ("start", INVALID_ENTRY_KIND),
                                              ("nope", ENTRY_NOT_FOUND)])
def test_regenerate_refuses_what_is_not_an_assistant_message(
        chat: tuple[session_manager.SessionManager, str, dict[str, str]], target: str, code: str) -> None:
    # Prevents: regenerating a user turn (the leaf moved to before the question) by mistake.
    sm, sid, ids = chat
    with pytest.raises(SessionError) as e:
        sm.regenerate(sid, ids.get(target, target))
    assert e.value.code == code and "entry_id" in e.value.detail
    assert path_ids(sm, sid) == [ids["start"], ids["u1"], ids["a1"]]


def test_alternatives_of_unknown_ids_name_the_field(
        chat: tuple[session_manager.SessionManager, str, dict[str, str]]) -> None:
    # Prevents: an empty list (or a KeyError) for a mistyped id.
    sm, sid, _ = chat
    with pytest.raises(SessionError) as e:
        sm.alternatives(sid, "e_nope")
    assert e.value.code == ENTRY_NOT_FOUND
    with pytest.raises(SessionError) as s:
        sm.alternatives("s_nope", "e_nope")
    assert s.value.code == NOT_FOUND
    with pytest.raises(SessionError) as empty:
        sm.alternatives(sid, "")
    assert empty.value.code == INVALID_REQUEST and "entry_id" in empty.value.detail


def test_abort_pairs_every_unanswered_call_with_an_error_result_once(tmp_path: Path) -> None:
    # Prevents: a transcript the next model call refuses (a call without a result), a result added
    # twice when abort is repeated, and a result for a call that already had one.
    sm = open_store(tmp_path)
    sid = sm.create().session_id
    sm.append(sid, message=user_message("Weather in Paris and Rome?"))
    paris, rome, oslo = function_call("w", {"c": "Paris"}), function_call("w", {"c": "Rome"}), function_call("w")
    reply = sm.append(sid, message=assistant_message("Checking", paris, rome, oslo)).entry_id
    sm.append(sid, message=function_result_message(rome, "sunny"))
    events = Recorder(sm)
    added = sm.abort(sid, reply)
    assert added == [f"{reply}.abort.1", f"{reply}.abort.3"]
    fired = events.take()
    assert [(f, e["entry_id"]) for f, e in fired] == [(session_manager.ON_MESSAGE_ADDED, i) for i in added]
    assert sm.abort(sid, reply) == [] and events.take() == []
    sm.close()
    with open_store(tmp_path) as again:
        tail = again.messages(sid).messages[-2:]
        results = [i.message for i in tail]
        assert all(isinstance(m, FunctionResultMessage) and m.is_error for m in results)
        assert [m.function_call_id for m in results if isinstance(m, FunctionResultMessage)] == [paris.id, oslo.id]
        assert again.abort(sid, reply) == []


def test_abort_refuses_a_reply_off_the_active_path_and_non_assistant_entries(
        chat: tuple[session_manager.SessionManager, str, dict[str, str]]) -> None:
    # Prevents: error results appended under an unrelated branch's leaf.
    sm, sid, ids = chat
    call = function_call("f")
    cut = sm.append(sid, message=assistant_message(call), parent_id=ids["u1"]).entry_id
    sm.set_active_leaf(sid, entry_id=ids["a1"])
    events = Recorder(sm)
    with pytest.raises(SessionError) as off:
        sm.abort(sid, cut)
    assert off.value.code == INVALID_REQUEST and "entry_id" in off.value.detail and "active path" in off.value.detail
    with pytest.raises(SessionError) as kind:
        sm.abort(sid, ids["u1"])
    assert kind.value.code == INVALID_ENTRY_KIND
    assert events.take() == [] and path_ids(sm, sid) == [ids["start"], ids["u1"], ids["a1"]]


def test_the_async_helpers_do_what_the_sync_ones_do(tmp_path: Path) -> None:
    # Prevents: coroutine helpers that drift from the sync ones or block the event loop's thread.
    async def main() -> None:
        async with aio.open(tmp_path, ids=SequentialIds(), clock=ManualClock(5)) as asm:
            sid = (await asm.create()).session_id
            await asm.append(sid, custom=custom("start"))
            u1 = (await asm.append(sid, message=user_message("a"))).entry_id
            call = function_call("f")
            a1 = (await asm.append(sid, message=assistant_message(call))).entry_id
            seen: list[str] = []
            asm.sync.observe({"function_id": session_manager.ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
            assert await asm.abort(sid, a1) == [f"{a1}.abort.0"]
            assert await asm.regenerate(sid, a1) == u1
            edited = await asm.edit(sid, u1, "b")
            assert [v.active for v in await asm.alternatives(sid, u1)] == [False, True]
            assert seen == [f"{a1}.abort.0", edited.entry_id]
            with pytest.raises(SessionError):
                await asm.regenerate(sid, u1)

    asyncio.run(main())


def test_concurrent_aborts_of_one_reply_add_each_result_once(tmp_path: Path) -> None:
    # Prevents: two stop buttons (or a stop racing a crash recovery) pairing a call twice, which a
    # model API refuses as loudly as a call with no result.
    import threading

    with open_store(tmp_path) as sm:
        sid = sm.create().session_id
        sm.append(sid, message=user_message("go"))
        calls = [function_call("f", {"n": n}) for n in range(3)]
        reply = sm.append(sid, message=assistant_message(*calls)).entry_id
        events = Recorder(sm)
        barrier = threading.Barrier(4)
        answers: list[list[str]] = []

        def stop() -> None:
            barrier.wait()
            answers.append(sm.abort(sid, reply))

        threads = [threading.Thread(target=stop) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        expected = [f"{reply}.abort.{n}" for n in range(3)]
        assert len(answers) == 4 and all(set(a) <= set(expected) for a in answers)
        results = [i for i in sm.transcript(sid) if i.message.role == "function_result"]
        assert [i.entry_id for i in results] == expected
        assert sorted(e["entry_id"] for _, e in events.take()) == expected  # one event per result


@pytest.mark.parametrize("adapter", ["memory", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_tree_helpers_work_on_every_adapter(adapter: str, request: pytest.FixtureRequest) -> None:
    # Prevents: alternatives in another order (or missing versions) where entries() is not the fs
    # adapter's insertion-ordered map (postgres orders by its sequence).
    if adapter == "postgres":
        from tests import pg_support

        store = pg_support.open_store(request.getfixturevalue("schema"))
    else:
        store = session_manager.MemoryStore()
    with session_manager.open(store=store, ids=SequentialIds(), clock=ManualClock(7)) as sm:
        sid = sm.create().session_id
        sm.set_system_prompt(sid, "p")
        question = sm.append(sid, message=user_message("q")).entry_id
        replies = [sm.append(sid, message=assistant_message(function_call("f"))).entry_id]
        for n in range(3):
            sm.regenerate(sid, replies[0])
            replies.append(sm.append(sid, message=assistant_message(f"r{n}")).entry_id)
        versions = sm.alternatives(sid, replies[1])
        assert [(v.entry_id, v.active) for v in versions] == [(r, r == replies[-1]) for r in replies]
        assert sm.edit(sid, question, "q2").entry_id not in replies
        assert [v.active for v in sm.alternatives(sid, question)] == [False, True]
        sm.set_active_leaf(sid, entry_id=replies[0])
        assert sm.abort(sid, replies[0]) == [f"{replies[0]}.abort.0"]
        assert sm.system_prompt(sid) == "p"
