"""``_plain_copy`` copies a list of leaves and leaf objects held by an object (a message's
content) in the object's own loop: the same copy as the list branch makes, or the same refusal,
whatever the list holds and however deep it sits (``room``)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from session_manager._wire.validation import _NotPlain, _plain_copy, json_payload

CASES: list[Any] = [
    [],
    ["a", 1, True, None],
    [{"type": "text", "text": "hi"}, {"type": "image", "data": "x"}],
    [{"type": "text", "text": "hi"}, 1.5],
    [{"nested": {"a": 1}}, {"t": "x"}],
    [[1, 2], {"t": "x"}],
    [{"t": (1, 2)}],
    [(1, 2)],
    [{"t": 1.0}],
    [{"t": math.nan}],
    [math.inf],
    [{"t": b"bytes"}],
    [b"bytes"],
]


def _reference(value: Any, room: int) -> Any:
    """The list branch's answer for the list itself (the object's loop delegated to it before)."""
    try:
        return ("copy", _plain_copy(value, room))
    except (_NotPlain, RecursionError):
        return ("refused",)


@pytest.mark.parametrize("items", CASES)
@pytest.mark.parametrize("room", [1, 2, 3, 4, 5])
def test_a_list_in_an_object_is_copied_as_the_list_branch_copies_it(items: Any, room: int) -> None:
    # Prevents: the object's inline copy of its list taking what the list branch refuses (a float
    # NaN, bytes, a tuple left a tuple, a level past the bound) or copying it otherwise.
    payload = {"content": items, "k": "v"}
    try:
        got: Any = ("copy", _plain_copy(payload, room))
    except (_NotPlain, RecursionError):
        got = ("refused",)
    inner = _reference(items, room - 1) if room > 1 else ("refused",)
    if inner[0] == "refused":
        assert got == ("refused",)
        return
    assert got[0] == "copy"
    copy = got[1]
    assert copy == {"content": inner[1], "k": "v"} == json_payload(payload)
    assert copy["content"] is not items
    assert type(copy["content"]) is list
    for original, copied in zip(items, copy["content"], strict=True):
        if isinstance(original, dict | list | tuple):
            assert copied is not original  # (new containers: nothing shared with the caller)
