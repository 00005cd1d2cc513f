"""Adapters read back exactly what they were given, whatever the item's shape
(hypothesis over item and message shapes, through a restart of an fs store)."""

from __future__ import annotations

import asyncio
import json
import tempfile
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import session_manager
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds

pytest.importorskip("langchain_core", reason="the langchain extra is not installed")

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, message_to_dict

from session_manager.adapters.langchain import SessionChatMessageHistory
from session_manager.adapters.openai_agents import AgentsSession

# Its adapter imports the SDK only when used: the skip looks for it without importing it (seconds per
# xdist worker at collection).
pytestmark = pytest.mark.skipif(find_spec("agents") is None, reason="the openai-agents extra is not installed")

text = st.text(max_size=12)
numbers = st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | numbers | text
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3), max_leaves=6
)
extras = st.dictionaries(st.sampled_from(["id", "status", "annotations", "logprobs", "x_extra"]), json_values,
                         max_size=2)
text_parts = st.lists(st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text"]), "text": text},
                                            optional={"annotations": st.just([])}), max_size=3)
content = text | text_parts | st.lists(st.fixed_dictionaries({"type": st.just("input_image"), "image_url": text}),
                                       min_size=1, max_size=2)
arguments = json_values.map(lambda v: json.dumps(v, separators=(",", ":"))) | json_values.map(json.dumps) | text
item = st.one_of(
    st.builds(lambda r, c, e: {**e, "role": r, "content": c}, st.sampled_from(["user", "assistant"]), content, extras),
    st.builds(lambda r, c, e: {**e, "type": "message", "role": r, "content": c},
              st.sampled_from(["user", "assistant", "system", "developer"]), content, extras),
    st.builds(lambda i, n, a, e: {**e, "type": "function_call", "call_id": i, "name": n, "arguments": a},
              text, text, arguments, extras),
    st.builds(lambda i, o, e: {**e, "type": "function_call_output", "call_id": i, "output": o},
              text, text | text_parts, extras),
    st.builds(lambda s, e: {**e, "type": "reasoning", "summary": [{"type": "summary_text", "text": s}]}, text, extras),
)

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.lists(item, min_size=1, max_size=6), st.integers(0, 7))
def test_agents_items_read_back_equal_in_full_from_the_tail_and_after_a_restart(items: list[Any], n: int) -> None:
    # Prevents: any item shape (extra keys, non-compact or invalid argument strings, list outputs,
    # image parts, odd roles) reading back different from what was added.
    with tempfile.TemporaryDirectory() as where:
        with session_manager.open(Path(where), ids=SequentialIds(), clock=ManualClock(1)) as sm:
            session = AgentsSession("s", sm)
            asyncio.run(session.add_items(json.loads(json.dumps(items))))
            assert asyncio.run(session.get_items()) == items
            assert asyncio.run(session.get_items(limit=n)) == (items[-n:] if n else [])
        with session_manager.open(Path(where)) as again:
            session = AgentsSession("s", again)
            assert asyncio.run(session.get_items()) == items
            assert asyncio.run(session.pop_item()) == items[-1]
            assert asyncio.run(session.get_items()) == items[:-1]


lc_content = text | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": text}), max_size=3) | st.lists(
    st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": text})}),
    min_size=1, max_size=2)
meta = st.dictionaries(st.sampled_from(["model_name", "finish_reason", "k"]), json_values, max_size=2)
tool_call = st.fixed_dictionaries({"name": text, "args": st.dictionaries(text, json_values, max_size=3),
                                   "id": text.filter(bool)})
lc_message = st.one_of(
    st.builds(lambda c, i: HumanMessage(c, id=i), lc_content, st.none() | text),
    st.builds(lambda c, calls, m: AIMessage(c, tool_calls=calls, response_metadata=m), lc_content,
              st.lists(tool_call, max_size=2), meta),
    st.builds(lambda c, i, s, n: ToolMessage(c, tool_call_id=i, status=s, name=n), lc_content, text,
              st.sampled_from(["success", "error"]), st.none() | text),
    st.builds(SystemMessage, text),
)


@FAST
@given(st.lists(lc_message, min_size=1, max_size=5))
def test_langchain_messages_read_back_equal_after_a_restart(messages: list[Any]) -> None:
    # Prevents: lost tool calls, metadata, ids or content forms in the LangChain history.
    with tempfile.TemporaryDirectory() as where:
        with session_manager.open(Path(where), ids=SequentialIds(), clock=ManualClock(1)) as sm:
            SessionChatMessageHistory("s", sm).add_messages(messages)
        with session_manager.open(Path(where)) as again:
            back = SessionChatMessageHistory("s", again).messages
            assert [message_to_dict(m) for m in back] == [message_to_dict(m) for m in messages]
