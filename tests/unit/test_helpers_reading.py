"""The helpers a new user reaches for (issue 27): the whole transcript, ``.text``,
a string as content, a warning for a limit above the cap, the system prompt."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import aio
from session_manager.clock import ManualClock
from session_manager.errors import INVALID_REQUEST, NOT_FOUND, LimitWarning, SessionError
from session_manager.ids import SequentialIds
from session_manager.messages import assistant_message, custom, function_call, text, user_message
from session_manager.types import MessageItem, ThinkingBlock, TranscriptItem

CAP = 7


def open_store(where: Path) -> session_manager.SessionManager:
    return session_manager.open(where, ids=SequentialIds(), clock=ManualClock(1_000), default_list_limit=3,
                                max_list_limit=CAP)


def fill(sm: session_manager.SessionManager, n: int) -> str:
    sid = sm.create().session_id
    for i in range(n):
        sm.append(sid, message=user_message(f"m{i}"))
        if i % 5 == 0:
            sm.append(sid, custom=custom("note", {"i": i}))
    return sid


def test_transcript_pages_through_everything_and_items_always_carry_a_message(tmp_path: Path) -> None:
    # Prevents: transcripts silently cut to the first page (the README's `["messages"]`), and custom
    # entries (message None) mixed into the default iteration.
    with open_store(tmp_path) as sm:
        sid = fill(sm, 23)
        items = list(sm.transcript(sid))
        assert [i.message.text for i in items] == [f"m{i}" for i in range(23)]
        assert all(type(i) is TranscriptItem for i in items)
        assert [i.text for i in sm.transcript(sid, page_size=2)] == [f"m{i}" for i in range(23)]
        mixed = list(sm.transcript(sid, include_custom=True))
        assert len(mixed) == 23 + 5 and sum(i.custom is not None for i in mixed) == 5
        assert all(isinstance(i, MessageItem) for i in mixed) and mixed[1].text == ""
        after = [i.text for i in sm.transcript(sid, after_entry_id=items[20].entry_id)]
        assert after == ["m21", "m22"]
        assert [i.text for i in sm.transcript(sid, from_entry_id=items[1].entry_id)] == ["m0", "m1"]
        with pytest.raises(SessionError) as e:
            sm.transcript("s_nope")  # raised at the call, not at the first next()
        assert e.value.code == NOT_FOUND


def test_a_limit_above_the_cap_warns_in_the_typed_api_only(tmp_path: Path) -> None:
    # Prevents: `limit=1000` silently returning the capped page (issue 27), and a warning leaking
    # into the dict API, whose behaviour is the wire's.
    with open_store(tmp_path) as sm:
        sid = fill(sm, 10)
        with pytest.warns(LimitWarning, match=f"max_list_limit \\({CAP}\\)") as caught:
            page = sm.messages(sid, limit=1000)
        assert len(page.messages) == CAP and page.next_cursor is not None
        assert caught[0].filename == __file__  # points at the caller's line
        with pytest.warns(LimitWarning):
            sm.list(limit=CAP + 1)
        with pytest.warns(LimitWarning, match="page back with before_entry_id"):
            sm.messages_tail(sid, limit=CAP + 1)
        with pytest.warns(LimitWarning):
            assert len(list(sm.transcript(sid, page_size=100))) == 10
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert len(sm.messages(sid, limit=CAP).messages) == CAP
            # purge's limit is its own (1..1000, refused past it), never clamped to the page cap: a
            # warning there was false (it warned at limit=CAP + 1 and then purged that many).
            assert sm.purge(metadata={"none": 1}, limit=CAP + 1, dry_run=True).session_ids == []
            assert len(sm.call("session::messages", {"session_id": sid, "limit": 1000})["messages"]) == CAP

        async def main() -> None:
            asm = aio.AsyncSessionManager(sm)
            with pytest.warns(LimitWarning):
                await asm.messages(sid, limit=1000)
            got = [i.message.text async for i in asm.transcript(sid, page_size=3)]
            assert got == [f"m{i}" for i in range(10)]
            assert len([i async for i in asm.transcript(sid, include_custom=True)]) == 12
            await asm.close()

        asyncio.run(main())


def test_update_message_takes_a_string_as_content_and_fires_as_the_dict_call(tmp_path: Path) -> None:
    # Prevents: `update_message(content="streamed text")` refused (`content: Input should be a valid
    # list`) although user_message("...") takes a string.
    with open_store(tmp_path) as sm:
        sid = sm.create().session_id
        reply = sm.append(sid, message=assistant_message()).entry_id
        seen: list[dict[str, Any]] = []
        sm.observe({"function_id": session_manager.ON_MESSAGE_UPDATED}, seen.append)
        assert sm.update_message(sid, entry_id=reply, content="It ").revision == 1
        assert sm.update_message(sid, entry_id=reply, content=["It might.", function_call("f", id="c")]).revision == 2
        assert [e["message"]["content"][0] for e in seen] == [text("It ").model_dump(), text("It might.").model_dump()]
        with pytest.raises(SessionError) as e:
            sm.update_message(sid, entry_id=reply, content=5)  # type: ignore[arg-type]
        assert e.value.code == INVALID_REQUEST and "content" in e.value.detail
        assert len(seen) == 2
    with open_store(tmp_path) as again:
        got = again.get_message(sid, entry_id=reply)
        assert got is not None and got.entry.revision == 2
        assert got.entry.message.text == "It might."  # type: ignore[union-attr]


def test_text_joins_the_text_blocks_and_leaves_everything_else_out() -> None:
    # Prevents: `item.message.content[0].text` (a 7-way union, six mypy errors) as the only way in.
    message = assistant_message("one", ThinkingBlock(type="thinking", text="hidden"), function_call("f"), "two")
    assert message.text == "one\ntwo"
    assert user_message().text == ""
    assert MessageItem(entry_id="e", custom=custom("k")).text == ""
    assert MessageItem(entry_id="e", message=user_message("hi")).text == "hi"


def test_system_prompt_is_a_custom_entry_on_the_branch(tmp_path: Path) -> None:
    # Prevents: a system prompt with no documented home, one that leaks into the model transcript
    # (messages without include_custom), or one a branch made before it still sees.
    with open_store(tmp_path) as sm:
        sid = sm.create().session_id
        assert sm.system_prompt(sid) is None
        seen: list[dict[str, Any]] = []
        sm.observe({"function_id": session_manager.ON_MESSAGE_ADDED}, seen.append)
        first = sm.set_system_prompt(sid, "Be brief.")
        assert seen[-1]["custom"] == {"custom_type": "system_prompt", "data": {"text": "Be brief."}}
        question = sm.append(sid, message=user_message("Rain?")).entry_id
        assert sm.system_prompt(sid) == "Be brief."
        assert [i.entry_id for i in sm.messages(sid).messages] == [question]
        sm.set_system_prompt(sid, "Be verbose.")
        assert sm.system_prompt(sid) == "Be verbose."
        # The first message is editable: it has the prompt as its parent.
        edited = sm.edit(sid, question, "Snow?")
        assert edited.parent_id == first.entry_id and sm.system_prompt(sid) == "Be brief."
        with pytest.raises(SessionError) as bad:
            sm.set_system_prompt(sid, None)  # type: ignore[arg-type]
        assert bad.value.code == INVALID_REQUEST and "text" in bad.value.detail
        with pytest.raises(SessionError) as unknown:
            sm.system_prompt("s_nope")
        assert unknown.value.code == NOT_FOUND
    with open_store(tmp_path) as again:
        assert again.system_prompt(sid) == "Be brief."

        async def main() -> None:
            asm = aio.AsyncSessionManager(again)
            await asm.set_system_prompt(sid, "Async.")
            assert await asm.system_prompt(sid) == "Async."
            await asm.close()

        asyncio.run(main())
