"""Admission's fast depth proof agrees with the nesting, level for level."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from session_manager._service import admission
from session_manager._service.admission import MAX_DEPTH


def depth(value: Any) -> int:
    """Containers nested in ``value``, counted as admission counts them (the payload is 1)."""
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


@st.composite
def payloads(draw: st.DrawFn) -> dict[str, Any]:
    """A chain of dicts and lists around MAX_DEPTH deep, with bracket-laden strings and
    siblings at random levels, sometimes padded past the bracket count's 4 KB reach."""
    levels = draw(st.integers(MAX_DEPTH - 6, MAX_DEPTH + 6))
    value: Any = draw(st.text(alphabet="[]{}x\"\\", max_size=40))
    # One byte per level says its kind, its sibling and their order (three draws per level made
    # generating one ~120-level example take 50-150 ms: the suite's slowest test). Shrinks to 0:
    # a list, no sibling.
    shape = draw(st.binary(min_size=levels - 1, max_size=levels - 1))
    texts = draw(st.lists(st.text(alphabet="[]{}", max_size=20), min_size=1, max_size=4))
    for byte in shape:
        kind = byte & 3
        sibling: Any = None if kind == 0 else texts[(byte >> 4) % len(texts)] if kind == 1 else [] if kind == 2 else {}
        if byte & 4:
            value = {"k": value} if sibling is None else {"k": value, "s": sibling}
        else:
            value = [value] if sibling is None else ([value, sibling] if byte & 8 else [sibling, value])
    pad = draw(st.sampled_from(["", "]" * 2500 + "[" * 2500]))
    return {"v": value, "pad": pad}


@settings(max_examples=150, deadline=None)
@given(payloads())
def test_the_fast_depth_proof_says_what_the_nesting_is(payload: dict[str, Any]) -> None:
    # Prevents: the encoder-based (or bracket-count) depth proof admitting a payload nested one level
    # past MAX_DEPTH, or sending one within it to the slow walk for its depth alone (null-free here).
    body = orjson.dumps(payload)
    within = depth(payload) <= MAX_DEPTH
    assert admission._shallow(payload, body) is within
    if within:
        assert admission._fast_size(payload) == len(body)
    else:
        try:
            admission._fast_size(payload)
        except admission.TooDeep:
            pass
        else:
            raise AssertionError("a payload past the depth bound was measured, not refused")
