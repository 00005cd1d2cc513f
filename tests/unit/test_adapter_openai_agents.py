"""The OpenAI Agents SDK adapter, driven by the real SDK (Runner.run with a scripted model)."""

from __future__ import annotations

import asyncio
import json
import threading
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._wire.events import ON_MESSAGE_ADDED
from session_manager.adapters.openai_agents import ITEM_TYPE, AgentsSession
from session_manager.clock import ManualClock
from session_manager.errors import INVALID_REQUEST, SessionError
from session_manager.ids import SequentialIds
from session_manager.messages import custom, user_message

# The SDK is imported only by the tests that run it (tests.agents_sdk): importing it here cost every
# xdist worker seconds at collection. Without the extra, the whole module skips, as before.
pytestmark = pytest.mark.skipif(find_spec("agents") is None, reason="the openai-agents extra is not installed")


def open_store(where: Path) -> session_manager.SessionManager:
    return session_manager.open(where, ids=SequentialIds(), clock=ManualClock(1_000_000))


class RecordingSession(AgentsSession):
    """Remembers exactly what the SDK handed to add_items."""

    added: list[Any]

    async def add_items(self, items: list[Any]) -> None:
        self.added = [*getattr(self, "added", []), *json.loads(json.dumps(items))]
        await super().add_items(items)


def test_runner_runs_stored_natively_and_read_back_equal(tmp_path: Path) -> None:
    # Prevents: items stored opaquely (invisible to session::messages and role filters), items
    # reading back different from what the SDK added, or memory not reaching the next turn.
    from tests.agents_sdk import Agent, ResponseFunctionToolCall, Runner, ScriptedModel, Session, get_weather, say

    model = ScriptedModel([
        [ResponseFunctionToolCall(type="function_call", id="fc_1", call_id="call_1", name="get_weather",
                                  arguments='{"city":"Paris"}', status="completed")],
        [say("It is sunny.", "msg_1")],
        [say("Bye.", "msg_2")],
    ])
    agent = Agent(name="weather", model=model, tools=[get_weather])
    added: list[Any] = []
    with open_store(tmp_path / "d") as sm:
        sm.observe({"function_id": ON_MESSAGE_ADDED}, added.append)
        session = RecordingSession("chat-1", sm, model="scripted", provider="test")
        assert isinstance(session, Session)

        async def run() -> tuple[Any, Any]:
            first = await Runner.run(agent, "Weather in Paris?", session=session)
            second = await Runner.run(agent, "thanks", session=session)
            return first.final_output, second.final_output

        assert asyncio.run(run()) == ("It is sunny.", "Bye.")
        # Turn two saw turn one's history, through the adapter.
        assert model.inputs[-1] == [*session.added[:4], {"content": "thanks", "role": "user"}]
        assert asyncio.run(session.get_items()) == session.added
        assert len(session.added) == 6
        # Native: ordinary messages, one entry per item, role filters work.
        page = sm.messages("chat-1").messages
        roles = [m.message.role for m in page if m.message is not None]
        assert roles == ["user", "assistant", "function_result", "assistant", "user", "assistant"]
        results = sm.messages("chat-1", roles=["function_result"]).messages
        assert [(r.message.function_id, r.message.content[0].text) for r in results] == [  # type: ignore[union-attr]
            ("get_weather", "sunny in Paris")]
        call = page[1].message
        assert call is not None and call.stop_reason == "function_call" and call.model == "scripted"  # type: ignore[union-attr]
        assert call.content[0].arguments == {"city": "Paris"}  # type: ignore[union-attr]
        assert all(m.custom is None for m in sm.messages("chat-1", include_custom=True).messages[1:])
        # One event per entry: the sentinel root, then the six items.
        assert [e.get("custom", {}).get("custom_type") for e in added[:1]] == ["openai_agents.root"]
        assert len(added) == 7 and [e["entry_id"] for e in added[1:]] == [m.entry_id for m in page]
        stored = session.added
    with open_store(tmp_path / "d") as again:  # after a restart
        assert asyncio.run(AgentsSession("chat-1", again).get_items()) == stored
        assert asyncio.run(AgentsSession("chat-1", again).get_items(limit=2)) == stored[-2:]


ODD_ITEMS: list[Any] = [
    {"role": "system", "content": "Be brief."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    {"role": "user", "content": [{"type": "input_text", "text": "look"},
                                 {"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thinking"}]},
    {"type": "function_call", "call_id": "c2", "name": "f", "arguments": '{"a": 1.0, "b": [1, 2]}'},
    {"type": "function_call", "call_id": "c3", "name": "g", "arguments": "not json"},
    {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "ok"}]},
    {"type": "function_call_output", "call_id": "c3", "output": ""},
    {"id": "m1", "type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "a", "annotations": [], "logprobs": []},
                 {"type": "refusal", "refusal": "no"}]},
    {"role": "assistant", "content": ""},
]


def test_every_item_shape_reads_back_equal_and_only_shapeless_ones_are_custom(tmp_path: Path) -> None:
    # Prevents: lossy storage of ids, statuses, annotations, non-compact argument strings or
    # list outputs; and items with a native shape hidden in custom entries.
    with open_store(tmp_path / "d") as sm:
        session = AgentsSession("s", sm)
        asyncio.run(session.add_items(json.loads(json.dumps(ODD_ITEMS))))
        assert asyncio.run(session.get_items()) == ODD_ITEMS
        for n in (1, 3, len(ODD_ITEMS), 50):
            assert asyncio.run(session.get_items(limit=n)) == ODD_ITEMS[-n:]
        assert asyncio.run(session.get_items(limit=0)) == []
        entries = sm.messages("s", include_custom=True).messages[1:]  # after the root
        assert len(entries) == len(ODD_ITEMS)
        custom = [i for i, e in enumerate(entries) if e.custom is not None]
        assert custom == [0, 2, 3]  # system message, an image part, reasoning
        assert all(entries[i].custom.custom_type == ITEM_TYPE for i in custom)  # type: ignore[union-attr]
        by_call = {m.message.function_call_id: m.message.function_id  # type: ignore[union-attr]
                   for m in sm.messages("s", roles=["function_result"]).messages}
        assert by_call == {"c2": "f", "c3": "g"}


def test_pop_item_is_a_branch_move_down_to_the_first_item(tmp_path: Path) -> None:
    # Prevents: pop destroying history, failing on the first item (no empty path to move to), or
    # new items after a pop overwriting instead of branching.
    items = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
             {"role": "user", "content": "three"}]
    with open_store(tmp_path / "d") as sm:
        session = AgentsSession("s", sm)
        assert asyncio.run(session.pop_item()) is None  # nothing stored yet
        asyncio.run(session.add_items(items))
        assert asyncio.run(session.pop_item()) == items[2]
        assert asyncio.run(session.get_items()) == items[:2]
        assert asyncio.run(session.pop_item()) == items[1]
        assert asyncio.run(session.pop_item()) == items[0]
        assert asyncio.run(session.get_items()) == []
        assert asyncio.run(session.pop_item()) is None
        asyncio.run(session.add_items([{"role": "user", "content": "again"}]))
        assert asyncio.run(session.get_items()) == [{"role": "user", "content": "again"}]
        # Nothing destroyed: the popped entries are still in the session, on the old branch.
        for entry_id in ("e_001", "e_002", "e_003"):
            assert sm.get_message("s", entry_id=entry_id) is not None
        new = sm.get_message("s", entry_id="e_004")
        assert new is not None and new.entry.parent_id == "openai_agents-root"
        sm.set_active_leaf("s", entry_id="e_003")  # the old branch comes back whole
        assert asyncio.run(session.get_items()) == items


def test_clear_session_empties_the_session_for_real(tmp_path: Path) -> None:
    # Prevents: clear_session keeping the cleared items (counted, on a dead branch) or leaving them
    # readable (issue 25 #9; the bytes on disk: test_adapter_clear.py).
    with open_store(tmp_path / "d") as sm:
        session = AgentsSession("s", sm)
        asyncio.run(session.clear_session())  # unknown session: nothing to do
        assert sm.get("s") is None
        asyncio.run(session.add_items([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]))
        asyncio.run(session.clear_session())
        assert asyncio.run(session.get_items()) == []
        assert asyncio.run(session.pop_item()) is None
        meta = sm.get("s")
        assert meta is not None and meta.meta.message_count == 0
        assert sm.get_message("s", entry_id="e_001") is None
        asyncio.run(session.add_items([{"role": "user", "content": "c"}]))
        assert asyncio.run(session.get_items()) == [{"role": "user", "content": "c"}]
    with open_store(tmp_path / "d") as again:
        assert asyncio.run(AgentsSession("s", again).get_items()) == [{"role": "user", "content": "c"}]


def test_a_session_the_adapter_did_not_start_reads_natively_and_refuses_popping_its_first_entry(
    tmp_path: Path,
) -> None:
    # Prevents: a foreign session's first entry being "popped" to nowhere (or the leaf left broken).
    with open_store(tmp_path / "d") as sm:
        sm.ensure("s")
        sm.append("s", message=user_message("hello", timestamp=1))
        session = AgentsSession("s", sm)
        assert asyncio.run(session.get_items()) == [{"role": "user", "content": "hello"}]
        asyncio.run(session.add_items([{"role": "assistant", "content": "hi"}]))
        assert asyncio.run(session.pop_item()) == {"role": "assistant", "content": "hi"}
        with pytest.raises(SessionError) as refused:
            asyncio.run(session.pop_item())
        assert refused.value.code == INVALID_REQUEST
        assert asyncio.run(session.get_items()) == [{"role": "user", "content": "hello"}]
        asyncio.run(session.clear_session())  # a clear needs no root: it deletes and re-creates
        assert asyncio.run(session.get_items()) == []


def test_limited_reads_walk_back_from_the_tail(tmp_path: Path) -> None:
    # Prevents: get_items(limit=N) reading the whole path (O(session)) instead of the tail.
    with open_store(tmp_path / "d") as sm:
        session = AgentsSession("s", sm)
        asyncio.run(session.add_items([{"role": "user", "content": str(i)} for i in range(30)]))
        called: list[str] = []
        real = sm.call

        def spy(function_id: str, payload: Any = None) -> Any:
            called.append(function_id)
            return real(function_id, payload)

        sm.call = spy  # type: ignore[method-assign]
        assert asyncio.run(session.get_items(limit=3)) == [{"role": "user", "content": str(i)} for i in (27, 28, 29)]
        assert called == ["session::messages-tail"]


def test_two_adapters_starting_one_session_at_once_write_one_root(tmp_path: Path) -> None:
    # Prevents: two first writers each writing a root (two roots: a pop to the "root" then
    # depends on which one the leaf reached).
    with open_store(tmp_path / "d") as sm:
        barrier = threading.Barrier(2)

        def writer(n: int) -> None:
            session = AgentsSession("s", sm)
            barrier.wait()
            asyncio.run(session.add_items([{"role": "user", "content": f"w{n}"}]))

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        everything = sm.messages("s", include_custom=True).messages
        roots = [e for e in everything if e.custom is not None]
        assert [r.entry_id for r in roots] == ["openai_agents-root"]
        assert sorted(json.dumps(i) for i in asyncio.run(AgentsSession("s", sm).get_items())) == sorted(
            json.dumps({"role": "user", "content": f"w{n}"}) for n in range(2))


def test_a_limit_beyond_the_page_cap_still_returns_that_many_items(tmp_path: Path) -> None:
    # Prevents: get_items(limit=N) silently returning max_list_limit items when N is larger
    # (messages-tail clamps its page; the adapter must page on back from the tail).
    items = [{"role": "user", "content": str(i)} for i in range(23)]
    with session_manager.open(tmp_path / "d", ids=SequentialIds(), clock=ManualClock(1_000_000),
                              max_list_limit=5) as sm:
        session = AgentsSession("s", sm)
        asyncio.run(session.add_items(items))
        for n in (4, 5, 6, 11, 22, 23, 24, 1000):
            assert asyncio.run(session.get_items(limit=n)) == items[-n:]
        assert asyncio.run(session.get_items()) == items
    with open_store(tmp_path / "d") as again:  # the read changed nothing
        assert asyncio.run(AgentsSession("s", again).get_items(limit=100)) == items


def test_two_adapter_objects_on_one_session_keep_every_batch_on_the_path(tmp_path: Path) -> None:
    # Prevents: a per-object lock letting two AgentsSession objects for one conversation (one per
    # request, as the SDK's own sessions are used) interleave their chained batches, so one batch
    # forks off and drops out of get_items.
    with open_store(tmp_path / "d") as sm:
        barrier = threading.Barrier(3)

        def writer(tag: str) -> None:
            session = AgentsSession("s", sm)
            barrier.wait()
            for i in range(15):
                asyncio.run(session.add_items([{"role": "user", "content": f"{tag}{i}a"},
                                               {"role": "assistant", "content": f"{tag}{i}b"}]))

        threads = [threading.Thread(target=writer, args=(tag,)) for tag in "XYZ"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        items = asyncio.run(AgentsSession("s", sm).get_items())
        assert len(items) == 90
        pairs = [(a["content"], b["content"]) for a, b in zip(items[::2], items[1::2], strict=True)]
        assert sorted(pairs) == sorted((f"{t}{i}a", f"{t}{i}b") for t in "XYZ" for i in range(15))
        meta = sm.get("s")
        assert meta is not None and meta.meta.message_count == 90  # no stray branch either
        assert len(sm.messages("s", include_custom=True, limit=500).messages) == 91  # + the root


def test_arguments_json_only_python_parses_read_back_as_written(tmp_path: Path) -> None:
    # Prevents: model-produced argument strings such as "NaN" or {"x": 1e400} parsing to float
    # nan/inf, which JSON cannot hold: stored as null, they read back as "null" (item changed).
    odd = ["NaN", '{"x": Infinity}', '{"x": -Infinity}', '{"x": 1e400}', '[NaN]']
    items = [{"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": a} for i, a in enumerate(odd)]
    with open_store(tmp_path / "d") as sm:
        asyncio.run(AgentsSession("s", sm).add_items(json.loads(json.dumps(items))))
        assert asyncio.run(AgentsSession("s", sm).get_items()) == items
        blocks = [m.message.content[0] for m in sm.messages("s").messages]  # type: ignore[union-attr]
        assert [b.arguments for b in blocks] == odd  # type: ignore[union-attr]  # kept as the string
    with open_store(tmp_path / "d") as again:
        assert asyncio.run(AgentsSession("s", again).get_items()) == items


def test_get_items_without_a_limit_uses_the_session_settings_limit(tmp_path: Path) -> None:
    # Prevents: session_settings=SessionSettings(limit=N) being accepted and then ignored by
    # get_items() (the SDK's own sessions read the newest N when no limit is passed).
    from agents.memory import SessionSettings

    items = [{"role": "user", "content": str(i)} for i in range(5)]
    with open_store(tmp_path / "d") as sm:
        session = AgentsSession("s", sm, session_settings=SessionSettings(limit=2))
        asyncio.run(session.add_items(items))
        assert asyncio.run(session.get_items()) == items[-2:]
        assert asyncio.run(session.get_items(limit=4)) == items[-4:]  # an explicit limit wins
        assert asyncio.run(AgentsSession("s", sm).get_items()) == items  # no settings: everything


def test_pop_item_steps_over_other_writers_bookkeeping_to_the_newest_item(tmp_path: Path) -> None:
    # Prevents: pop_item answering None ("empty") while items remain, because the newest entry is
    # a custom entry another writer appended (it is no item, so nothing was returned).
    items = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}]
    with open_store(tmp_path / "d") as sm:
        session = AgentsSession("s", sm)
        asyncio.run(session.add_items(items))
        sm.append("s", custom=custom("app.note", {"seen": True}))
        assert asyncio.run(session.pop_item()) == items[1]
        assert asyncio.run(session.get_items()) == items[:1]
        assert asyncio.run(session.pop_item()) == items[0]
        assert asyncio.run(session.pop_item()) is None
        note = sm.get_message("s", entry_id="e_003")  # moved off the path with the popped item, not lost
        assert note is not None and note.entry.custom_type == "app.note"  # type: ignore[union-attr]
    with open_store(tmp_path / "d") as again:
        assert asyncio.run(AgentsSession("s", again).get_items()) == []


def test_a_session_deleted_under_the_adapter_starts_afresh_on_the_next_write(tmp_path: Path) -> None:
    # Prevents: an AgentsSession (or chat history) that outlives a session::delete of its session
    # (the console's delete, an app's reset) failing every later add_items with session/not_found.
    with open_store(tmp_path / "d") as sm:
        session = AgentsSession("s", sm)
        asyncio.run(session.add_items([{"role": "user", "content": "old"}]))
        assert sm.delete("s").deleted
        assert asyncio.run(session.get_items()) == []
        asyncio.run(session.add_items([{"role": "user", "content": "new"}, {"role": "assistant", "content": "hi"}]))
        assert asyncio.run(session.get_items()) == [{"role": "user", "content": "new"},
                                                     {"role": "assistant", "content": "hi"}]
        assert asyncio.run(session.pop_item()) == {"role": "assistant", "content": "hi"}
        assert asyncio.run(session.pop_item()) == {"role": "user", "content": "new"}  # the new root is there
    with open_store(tmp_path / "d") as again:
        entries = again.messages("s", include_custom=True).messages
        assert [e.entry_id for e in entries] == ["openai_agents-root"]


def test_a_limited_read_counts_items_not_entries_that_hold_none(tmp_path: Path) -> None:
    # Prevents: get_items(limit=N) returning fewer than N items while more exist, because some
    # of the newest N entries are another writer's custom entries (they stand for no item).
    items = [{"role": "user", "content": str(i)} for i in range(4)]
    with open_store(tmp_path / "d") as sm:
        session = AgentsSession("s", sm)
        asyncio.run(session.add_items(items[:2]))
        sm.append("s", custom=custom("app.note", 1))
        asyncio.run(session.add_items(items[2:3]))
        sm.append("s", custom=custom("app.note", 2))
        sm.append("s", custom=custom("app.note", 3))
        asyncio.run(session.add_items(items[3:]))
        for n in (1, 2, 3, 4, 5):
            assert asyncio.run(session.get_items(limit=n)) == items[-n:]


def test_runner_turns_see_what_the_sdks_own_sqlite_session_gives(tmp_path: Path) -> None:
    # Prevents: history that differs from the SDK's reference session once a turn holds a
    # reasoning item and parallel function calls (the model would be fed another conversation).
    from agents import SQLiteSession
    from openai.types.responses import ResponseReasoningItem
    from openai.types.responses.response_reasoning_item import Summary

    from tests.agents_sdk import Agent, ResponseFunctionToolCall, Runner, ScriptedModel, get_weather, say

    def script() -> list[list[Any]]:
        return [
            [ResponseReasoningItem(id="rs_1", type="reasoning", summary=[Summary(type="summary_text", text="plan")]),
             ResponseFunctionToolCall(type="function_call", id="fc_1", call_id="c1", name="get_weather",
                                      arguments='{"city": "Paris"}', status="completed"),
             ResponseFunctionToolCall(type="function_call", id="fc_2", call_id="c2", name="get_weather",
                                      arguments='{"city":"Rome"}', status="completed")],
            [say("Both sunny.", "msg_1")],
            [say("Still.", "msg_2")],
        ]

    async def converse(session: Any) -> tuple[list[Any], list[Any]]:
        model = ScriptedModel(script())
        agent = Agent(name="weather", model=model, tools=[get_weather])
        await Runner.run(agent, "Paris and Rome?", session=session)
        await Runner.run(agent, [{"role": "user", "content": [{"type": "input_text", "text": "now?"}]}],
                         session=session)
        return model.inputs, await session.get_items()

    reference = asyncio.run(converse(SQLiteSession("chat", str(tmp_path / "ref.sqlite"))))
    with open_store(tmp_path / "d") as sm:
        ours = asyncio.run(converse(AgentsSession("chat", sm)))
        kinds = [e.message.role if e.message else e.custom.custom_type  # type: ignore[union-attr]
                 for e in sm.messages("chat", include_custom=True).messages]
    assert ours == reference
    assert len(reference[1]) == 9
    assert kinds == ["openai_agents.root", "user", ITEM_TYPE, "assistant", "assistant", "function_result",
                     "function_result", "assistant", "user", "assistant"]
    with open_store(tmp_path / "d") as again:
        assert asyncio.run(AgentsSession("chat", again).get_items()) == reference[1]


@pytest.mark.parametrize("bad", [
    {"role": "user", "content": "x" * 30_000},  # past max_request_bytes
    {"role": "user", "content": "lone \ud800 surrogate"},  # text no store can hold
], ids=["oversized", "surrogate"])
def test_a_batch_the_store_refuses_part_of_leaves_the_path_as_it_was(tmp_path: Path, bad: Any) -> None:
    # Prevents: add_items half-applying a batch: the items before the refused one stayed on the
    # active path, so the history read on (and the SDK replayed) a turn that was never saved.
    before = [{"role": "user", "content": "before"}]
    batch = [{"role": "user", "content": "one"},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}, bad]
    with session_manager.open(tmp_path / "d", ids=SequentialIds(), clock=ManualClock(1_000_000),
                              max_request_bytes=20_000) as sm:
        session = AgentsSession("s", sm)
        asyncio.run(session.add_items(before))
        added: list[Any] = []
        sm.observe({"function_id": ON_MESSAGE_ADDED}, added.append)
        with pytest.raises(SessionError) as refused:
            asyncio.run(session.add_items(batch))
        assert refused.value.code == INVALID_REQUEST
        assert asyncio.run(session.get_items()) == before
        assert asyncio.run(session.get_items(limit=2)) == before
        # The two written entries stay in the session, off the path (nothing is destroyed).
        assert [e["entry_id"] for e in added] == ["e_002", "e_003"]
        assert all(sm.get_message("s", entry_id=e) is not None for e in ("e_002", "e_003"))
        asyncio.run(session.add_items([{"role": "user", "content": "two"}]))
        assert asyncio.run(session.get_items()) == [*before, {"role": "user", "content": "two"}]
        assert asyncio.run(session.pop_item()) == {"role": "user", "content": "two"}
        assert asyncio.run(session.pop_item()) == before[0]
    with open_store(tmp_path / "d") as again:  # after a restart
        assert asyncio.run(AgentsSession("s", again).get_items()) == []


@pytest.mark.parametrize("arguments", [
    '{"s":"\\ud800"}',  # ASCII JSON whose value is a lone surrogate
    "[" * 117 + "]" * 117,  # one level deeper than a block's arguments may nest (116 stays native)
    "[" * 5000 + "]" * 5000,  # deeper than Python's JSON parser recurses
], ids=["escaped-surrogate", "just-too-deep", "very-deep"])
def test_arguments_whose_parse_cannot_be_stored_are_kept_as_the_string(tmp_path: Path, arguments: str) -> None:
    # Prevents: a function_call whose arguments string is storable as-is being refused (or
    # failing with a RecursionError traceback) because the adapter stored the parsed value,
    # which the store cannot hold; the SDK's own sessions keep any such item.
    items = [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": arguments},
             {"type": "function_call_output", "call_id": "c1", "output": "ok"}]
    with open_store(tmp_path / "d") as sm:
        asyncio.run(AgentsSession("s", sm).add_items(items))
        assert asyncio.run(AgentsSession("s", sm).get_items()) == items
        call = sm.messages("s").messages[0].message
        assert call is not None and call.content[0].arguments == arguments  # type: ignore[union-attr]
        results = sm.messages("s", roles=["function_result"]).messages
        assert [r.message.function_id for r in results] == ["f"]  # type: ignore[union-attr]
    with open_store(tmp_path / "d") as again:
        assert asyncio.run(AgentsSession("s", again).get_items(limit=2)) == items


def test_pop_item_of_another_writers_multi_item_message_removes_one_item(tmp_path: Path) -> None:
    # Prevents: pop_item on a message another writer stored (text plus parallel calls: three
    # items) moving the leaf past the whole entry: one item returned, three gone from get_items
    # (and the SDK's retry rewind, which pops one item per expected item, losing history).
    call = {"role": "assistant", "stop_reason": "function_call", "model": "m", "provider": "p", "timestamp": 1,
            "content": [{"type": "text", "text": "Checking."},
                        {"type": "function_call", "id": "c1", "function_id": "get_weather", "arguments": {"c": "P"}},
                        {"type": "function_call", "id": "c2", "function_id": "get_weather", "arguments": {"c": "R"}}]}
    with open_store(tmp_path / "d") as sm:
        session = AgentsSession("s", sm)
        asyncio.run(session.add_items([{"role": "user", "content": "w?"}]))
        sm.call("session::append", {"session_id": "s", "message": call})
        items = asyncio.run(session.get_items())
        assert len(items) == 4
        assert asyncio.run(session.pop_item()) == items[3]
        assert asyncio.run(session.get_items()) == items[:3]
        assert asyncio.run(session.get_items(limit=2)) == items[1:3]
        assert asyncio.run(session.pop_item()) == items[2]
        assert asyncio.run(session.pop_item()) == items[1]
        assert asyncio.run(session.get_items()) == items[:1]
        original = sm.get_message("s", entry_id="e_002")  # the other writer's entry: untouched, off the path
        assert original is not None and len(original.entry.message.content) == 3  # type: ignore[union-attr]
    with open_store(tmp_path / "d") as again:
        assert asyncio.run(AgentsSession("s", again).get_items()) == items[:1]


def test_session_settings_given_as_a_dict_work_as_the_sdks_own_sessions_take_them(tmp_path: Path) -> None:
    # Prevents: AgentsSession(session_settings={"limit": 2}) (the SDK's SQLiteSession accepts a
    # dict) failing every get_items, and Runner.run, with AttributeError: 'dict' has no 'limit'.
    from agents.memory import SessionSettings

    from tests.agents_sdk import Agent, Runner, ScriptedModel, say

    items = [{"role": "user", "content": str(i)} for i in range(4)]
    with open_store(tmp_path / "d") as sm:
        session = AgentsSession("s", sm, session_settings={"limit": 2})
        assert session.session_settings == SessionSettings(limit=2)
        asyncio.run(session.add_items(items))
        assert asyncio.run(session.get_items()) == items[-2:]
        model = ScriptedModel([[say("ok", "msg_1")]])
        asyncio.run(Runner.run(Agent(name="a", model=model), "next", session=session))
        assert model.inputs[0] == [*items[-2:], {"content": "next", "role": "user"}]


def test_session_settings_default_to_an_empty_session_settings_as_the_sdks_sessions_do(tmp_path: Path) -> None:
    # Prevents: AgentsSession("s", sm).session_settings being None where every SDK session
    # (SQLiteSession, the SQLAlchemy, Redis, ... sessions) holds SessionSettings(), so code
    # written for them (session.session_settings.limit) raised AttributeError on ours.
    from agents.memory import SessionSettings

    items = [{"role": "user", "content": str(i)} for i in range(3)]
    with open_store(tmp_path / "d") as sm:
        session = AgentsSession("s", sm)
        assert isinstance(session.session_settings, SessionSettings)
        assert session.session_settings == SessionSettings() and session.session_settings.limit is None
        assert session.session_settings.resolve(SessionSettings(limit=1)).limit == 1
        asyncio.run(session.add_items(items))
        assert asyncio.run(session.get_items()) == items  # no limit: every item
        given = SessionSettings(limit=2)
        assert AgentsSession("s", sm, session_settings=given).session_settings is given
    with open_store(tmp_path / "d") as again:
        assert asyncio.run(AgentsSession("s", again).get_items()) == items
