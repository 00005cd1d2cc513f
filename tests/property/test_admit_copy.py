"""The embedded host's admission and private copy (``admit_copy``) give what the exact path
gives: the same copy, type for type, or the same ``session/invalid_request`` naming the same
field, for any payload a caller may pass (exact JSON, and what JSON cannot hold mixed in)."""

from __future__ import annotations

import enum
import math
import uuid
from collections import OrderedDict
from functools import partial
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_manager._service.admission import MAX_DEPTH, admit, admit_copy
from session_manager._service.limits import Limits
from session_manager._wire.validation import json_payload
from session_manager.errors import SessionError


class Text(str):
    pass


class Number(int):
    pass


class Real(float):
    pass


class Mapping(dict[Any, Any]):
    pass


class Items(list[Any]):
    pass


class Colour(enum.Enum):
    RED = "red"


class Word(enum.StrEnum):
    RED = "red"


class Count(enum.IntEnum):
    ONE = 1


class Sticky(enum.Enum):
    """An enum claiming to equal its value (a round trip through JSON compares equal to it)."""

    RED = "red"

    def __eq__(self, other: object) -> bool:
        return other == self.value or other is self

    __hash__ = enum.Enum.__hash__


# What the exact path keeps, changes or refuses; each must come out as it does there.
ODD = [float("nan"), float("inf"), -float("inf"), -0.0, 1e308, 5e-324, 2**63, 2**64, -(2**63) - 1, 2**70,
       "\ud800", "a\udfffb", Text("t"), Number(3), Real(1.5), Mapping(a=1), Items([1]), OrderedDict(b=2), (1, 2),
       ((),), {1, 2}, b"x", bytearray(b"y"), Colour.RED, Word.RED, Count.ONE, Sticky.RED,
       uuid.UUID(int=5), orjson.Fragment(b"1"), object(), None, True, {1: 2}, {Text("k"): 1}, {None: 1},
       {"null": None}, "null", 1j]

_leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6),
                    st.sampled_from(ODD))
_values = st.recursive(_leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner),
    st.dictionaries(st.one_of(st.text(max_size=4), st.sampled_from([Text("s"), 7])), inner, max_size=4)),
    max_leaves=24)
_functions = st.sampled_from(["session::append", "session::append-many", "session::put-attachment",
                              "session::get", "session::set-metadata"])


def _reference(function_id: str, payload: Any, limits: Limits, mutates: bool) -> Any:
    """The exact path: admission with nothing proven, the copy, admission of the copy."""
    admit(function_id, payload, limits, mutates=mutates)
    private = json_payload(payload)
    admit(function_id, private, limits, mutates=mutates)
    return private


def _same(a: Any, b: Any) -> bool:
    """Equal, type for type (3.0 stays a float, -0.0 keeps its sign, a str subclass stays one)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(type(x) is type(y) for x, y in zip(a, b, strict=True)) and all(
            _same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and (a == b or (a != a and b != b))
    return a is b or bool(a == b)


def _containers(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [id(value), *(i for v in value.values() for i in _containers(v))]
    if isinstance(value, list | tuple):
        return [id(value), *(i for v in value for i in _containers(v))]
    return []


def _outcome(run: Any) -> tuple[str, Any]:
    try:
        return "copy", run()
    except SessionError as e:
        return "error", str(e)


def _check(function_id: str, payload: Any, limits: Limits, mutates: bool) -> None:
    kind, got = _outcome(lambda: admit_copy(function_id, payload, limits, mutates=mutates))
    want_kind, want = _outcome(lambda: _reference(function_id, payload, limits, mutates))
    assert kind == want_kind, (got, want)
    if kind == "error":
        assert got == want
    else:
        assert _same(got, want), (got, want)
        assert not set(_containers(got)) & set(_containers(payload))  # nothing shared with the caller


@settings(max_examples=600, deadline=None)
@given(_functions, st.dictionaries(st.text(max_size=4), _values, max_size=4), st.integers(20, 400), st.booleans())
def test_admit_copy_agrees_with_the_exact_path(function_id: str, payload: dict[str, Any], max_bytes: int,
                                               mutates: bool) -> None:
    # Prevents: a faster copy or a shared encoding letting through what the exact path refuses (NaN,
    # a non-str key, an enum, a UUID, a set), changing what it keeps (a str subclass, a big int, -0.0,
    # a tuple made a list), naming another field, or measuring the request otherwise.
    _check(function_id, payload, Limits(max_request_bytes=max_bytes), mutates)


@pytest.mark.parametrize("odd", ODD, ids=[f"{type(o).__name__}{i}" for i, o in enumerate(ODD)])  # (no address)
@pytest.mark.parametrize("where", ["top", "message", "block", "list"])
def test_each_odd_value_is_kept_changed_or_refused_as_the_exact_path_does(odd: Any, where: str) -> None:
    # Prevents: one kind of value slipping through a fast path the property test rarely draws it on.
    message: dict[str, Any] = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}
    if where == "top":
        payload: dict[str, Any] = {"session_id": "s", "message": message, "origin": odd}
    elif where == "message":
        payload = {"session_id": "s", "message": {**message, "details": odd}}
    elif where == "block":
        payload = {"session_id": "s", "message": {**message, "content": [{"type": "text", "text": odd}]}}
    else:
        payload = {"session_id": "s", "message": {**message, "content": [{"type": "text", "text": "x"}, [odd]]}}
    for mutates in (True, False):
        _check("session::append", payload, Limits(), mutates)


@pytest.mark.parametrize("levels", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1])
def test_nesting_at_the_bound_is_admitted_and_past_it_refused_as_before(levels: int) -> None:
    # Prevents: the fast copy counting a level more or less than the exact path (the payload is 1).
    for leaf in ("x", 1.5, (1,)):
        value: Any = leaf
        for i in range(levels - 1):
            value = [value] if i % 2 else {"k": value}
        _check("session::append", {"v": value}, Limits(), True)


def test_the_request_is_measured_as_before_at_the_size_bound() -> None:
    # Prevents: the shared encoding measuring another size than admission's own (off by one at the cap).
    payload = {"session_id": "s", "message": {"role": "user", "content": [{"type": "text", "text": "é" * 40}]}}
    size = len(orjson.dumps(payload))
    for cap in (size - 1, size, size + 1):
        _check("session::append", payload, Limits(max_request_bytes=cap), True)


@pytest.mark.parametrize("odd", ODD, ids=[f"{type(o).__name__}{i}" for i, o in enumerate(ODD)])  # (no address)
@pytest.mark.parametrize("where", ["message", "key", "list"])
def test_a_typed_calls_payload_is_admitted_as_the_same_dict_would_be(odd: Any, where: str) -> None:
    # Prevents: the typed methods' prebuilt copy (ProvenPayload, its keys left to admission's
    # encoding) storing a key, a value or a size the dict call would not, or erring otherwise.
    from session_manager._hosts.typed_support import payload as typed_payload

    message: dict[Any, Any] = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}
    if where == "message":
        message["details"] = odd
    elif where == "key":
        message["content"] = [{"type": "text", "text": "x", **({odd: 1} if _hashable(odd) else {})}]
    else:
        message["content"] = [{"type": "text", "text": "x"}, [odd]]
    for mutates in (True, False):
        for cap in (10, 10_000):
            limits = Limits(max_request_bytes=cap)
            built = typed_payload(session_id="s", message=message, parent_id=None)
            kind, got = _outcome(partial(admit_copy, "session::append", built, limits, mutates=mutates))
            want_kind, want = _outcome(
                partial(_reference, "session::append", {"session_id": "s", "message": message}, limits, mutates))
            assert (kind, kind == "error" and got) == (want_kind, want_kind == "error" and want)
            if kind == "copy":
                assert _same(dict(got), want) and not set(_containers(got)[1:]) & set(_containers(message))


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
