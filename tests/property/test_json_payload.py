"""The embedded hosts' payload copy: JSON values copy equal, anything else is refused by path."""

from __future__ import annotations

import datetime
import math
from collections import OrderedDict
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



class DriftingKey(str):
    """A str subclass whose hash changes after it went into the caller's dict (it hashes a
    field the caller changed later): an entry is found under it again only by a fresh insert."""

    salt = 0

    def __hash__(self) -> int:
        return hash((str(self), self.salt))


def test_a_str_subclass_key_is_copied_as_a_plain_str() -> None:
    # Prevents: the whole-dict copy re-storing a container under a key whose hash no longer
    # matches the one the copy kept (a second entry mid-iteration: a RuntimeError traceback
    # instead of the copy), and the copy keeping the caller's key object, a mutable one.
    key = DriftingKey("a")
    nested = {"b": [1]}
    payload = {key: nested, "c": 2, "d": OrderedDict({DriftingKey("e"): [3]})}
    key.salt = 1
    copied = json_payload(payload)
    assert copied == {"a": {"b": [1]}, "c": 2, "d": {"e": [3]}}
    assert [type(k) for k in copied] == [str, str, str] and [type(k) for k in copied["d"]] == [str]
    assert copied["a"] is not nested and copied["a"]["b"] is not nested["b"]
    nested["b"].append(2)
    assert copied["a"] == {"b": [1]}
