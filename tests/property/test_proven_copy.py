"""The embedded host's proven copy agrees with the exact path it lets admission skip."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from session_manager._service import admission
from session_manager._service.admission import MAX_DEPTH
from session_manager._wire.validation import json_payload, proven_copy
from tests.property.test_admission_depth import depth, payloads

# JSON-ish values with what the exact path refuses mixed in: NaN, infinities, tuples, a set.
_leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=8))
_values = st.recursive(_leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(st.text(max_size=4), inner, max_size=4),
    st.frozensets(st.integers(), max_size=2)), max_leaves=20)


def _exact_admits(payload: dict[str, Any]) -> bool:
    try:
        admission.json_size(payload)
    except admission.Unrepresentable:
        return False
    return True


def _same(a: Any, b: Any) -> bool:
    """Equal, type for type (3.0 stays a float, -0.0 keeps its sign)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and a == b
    return bool(a == b)


def _check(payload: dict[str, Any]) -> None:
    copied = proven_copy(payload, MAX_DEPTH)
    if copied is None:
        return  # the exact path decides, as before
    # A proven copy is json_payload's copy, and admission's exact walk finds nothing wrong in it.
    assert _same(copied, json_payload(payload))
    assert _exact_admits(payload)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=4), _values, max_size=4))
def test_a_proven_copy_is_json_payloads_copy_of_an_exact_payload(payload: dict[str, Any]) -> None:
    # Prevents: admission skipping its NaN scan for a payload whose copy let a NaN, an infinity or a
    # non-JSON value through, or the proven copy differing from json_payload's (a tuple kept, a float changed).
    _check(payload)
    if any(isinstance(v, float) and not math.isfinite(v) for v in payload.values()):
        assert proven_copy(payload, MAX_DEPTH) is None


@settings(max_examples=150, deadline=None)
@given(payloads())
def test_a_proven_copy_exists_exactly_when_the_nesting_is_within_max_depth(payload: dict[str, Any]) -> None:
    # Prevents: admission skipping its depth proof for a payload nested past MAX_DEPTH (one level too
    # many, or a level counted twice refusing a payload at exactly MAX_DEPTH).
    assert (proven_copy(payload, MAX_DEPTH) is not None) is (1 + depth(payload["v"]) <= MAX_DEPTH)
    _check(payload)
