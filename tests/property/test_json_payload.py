"""The embedded hosts' payload copy: JSON values copy equal, anything else is refused by path."""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_manager._wire.validation import json_payload
from session_manager.errors import INVALID_REQUEST, SessionError

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner,
                                                                                                 max_size=4))
not_json = st.sampled_from([float("nan"), float("inf"), -float("inf"), b"x", {1, 2}, datetime.date(2020, 1, 1),
                            object()])


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_json_values_copy_equal_and_share_no_container(value: Any) -> None:
    # Prevents: the copy changing a JSON value (key order, int vs float, -0.0) or aliasing the
    # caller's dicts/lists (a later change by the caller would change what is stored).
    copied = json_payload(value)
    assert copied == value and repr(copied) == repr(value)
    if isinstance(value, dict | list) and value:
        assert copied is not value


def _insert(container: Any, leaf: Any, draw: Any) -> tuple[Any, str]:
    """``container`` with ``leaf`` put somewhere inside it, and the path to it."""
    if isinstance(container, dict):
        key = draw(st.text(min_size=1, max_size=3))
        return {**container, key: leaf}, key
    if isinstance(container, list):
        return [*container, leaf], str(len(container))
    return {"k": leaf}, "k"


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_value_json_cannot_hold_is_refused_naming_its_path(data: Any) -> None:
    # Prevents: NaN/inf or Python objects anywhere in a payload being accepted (stored as null or
    # as objects that change at the next restart) or refused without saying where.
    outer = data.draw(st.dictionaries(st.text(min_size=1, max_size=3), json_values, max_size=3))
    inner, inner_key = _insert(data.draw(json_values), data.draw(not_json), data.draw)
    outer_key = data.draw(st.text(min_size=1, max_size=3))
    payload = {**outer, outer_key: inner}
    with pytest.raises(SessionError) as refused:
        json_payload(payload)
    assert refused.value.code == INVALID_REQUEST
    assert str(refused.value).startswith(f"{INVALID_REQUEST}: {outer_key}.{inner_key}: ")


def test_tuples_become_lists_and_finite_floats_stay_floats() -> None:
    # Prevents: tuples kept as tuples (they read back as lists only after a restart).
    assert json_payload({"a": (1, (2.0, -0.0))}) == {"a": [1, [2.0, -0.0]]}
    assert math.copysign(1, json_payload([-0.0])[0]) == -1
