"""The append path's generated dump gives exactly what pydantic's ``model_dump`` gives."""

from __future__ import annotations

import datetime
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_manager._wire import api
from session_manager._wire.dumping import MAX_DEPTH, fast_dump
from session_manager._wire.models import AssistantMessage, CustomMessage, TextBlock, Usage, UserMessage, dump
from session_manager._wire.validation import parse_request
from session_manager.errors import UnstorableValue

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8)
# Each optional field: left out, an explicit null, or a value.
MISSING: Any = object()


def maybe(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(MISSING), st.none(), values)


def obj(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    def drop(d: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if v is not MISSING}
    # An unknown key too, now and then: models ignore it, so the dump must not carry it.
    return st.fixed_dictionaries({**fields, "unknown_key": st.just(MISSING) | json_values}).map(drop)


texts = st.text(max_size=4)
blocks: st.SearchStrategy[dict[str, Any]] = st.deferred(lambda: st.one_of(
    obj(type=st.just("text"), text=texts),
    obj(type=st.just("image"), mime=texts, data=texts, attachment_id=maybe(texts)),
    obj(type=st.just("file"), attachment_id=texts, name=texts, mime=texts, size=st.integers(0, 2**64 - 1)),
    obj(type=st.just("thinking"), text=texts, signature=maybe(texts)),
    obj(type=st.just("redacted_thinking"), data=texts),
    obj(type=st.just("function_call"), id=texts, function_id=texts, arguments=maybe(json_values)),
    obj(type=st.just("function_result"), function_call_id=texts, content=st.lists(blocks, max_size=2),
        is_error=maybe(st.booleans())),
))
contents = st.lists(blocks, max_size=3)
stamps = st.integers(-(2**63), 2**63 - 1)
usage = obj(input=maybe(st.integers(0, 2**64 - 1)), output=maybe(st.integers(0, 9)),
            cache_read=maybe(st.integers(0, 9)), cache_write=maybe(st.integers(0, 9)),
            reasoning=maybe(st.integers(0, 9)), cost_usd=maybe(st.floats(0, 10) | st.integers(0, 10)))
messages = st.one_of(
    obj(role=st.just("user"), content=contents, timestamp=stamps),
    obj(role=st.just("assistant"), content=contents, stop_reason=st.sampled_from(["end", "length", "error"]),
        native_stop_reason=maybe(texts), error_message=maybe(texts),
        error_kind=maybe(st.sampled_from(["transient", "permanent"])), warnings=maybe(st.lists(texts, max_size=2)),
        usage=maybe(usage), agent=maybe(texts), model=texts, provider=texts, timestamp=stamps),
    obj(role=st.just("function_result"), function_call_id=texts, function_id=texts, content=contents,
        details=maybe(json_values), is_error=st.just(MISSING) | st.booleans(), timestamp=stamps),
    obj(role=st.just("custom"), custom_type=texts, content=contents, display=maybe(texts),
        details=maybe(json_values), timestamp=stamps),
)


@settings(max_examples=400, deadline=None)
@given(messages)
def test_the_fast_dump_is_model_dump_byte_for_byte(message: dict[str, Any]) -> None:
    # Prevents: an append storing other bytes than model_dump would (key order, a kept or dropped null,
    # a default left out, an unknown key kept, 3 for a float field) -- the log must not change.
    req = parse_request(api.AppendRequest, {"session_id": "s", "message": message})
    assert req.message is not None
    fast, slow = fast_dump(req.message), dump(req.message)
    assert orjson.dumps(fast) == orjson.dumps(slow)
    assert fast == slow


def test_a_dump_shares_nothing_with_the_model() -> None:
    # Prevents: a stored entry aliasing the request's JSON values (a later change to one shows in the other).
    req = parse_request(api.AppendRequest, {"session_id": "s", "message": {
        "role": "function_result", "function_call_id": "c", "function_id": "f", "content": [],
        "details": {"rows": [1, {"a": 2}]}, "timestamp": 1}})
    assert req.message is not None
    out = fast_dump(req.message)
    assert out["details"] == req.message.details  # type: ignore[union-attr]
    assert out["details"] is not req.message.details  # type: ignore[union-attr]
    assert out["details"]["rows"][1] is not req.message.details["rows"][1]  # type: ignore[union-attr]


def test_values_no_json_payload_holds_go_to_model_dump() -> None:
    # Prevents: a model built in code with a tuple or a datetime in a JSON field being stored unconverted.
    when = datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone.utc)
    for details in ((1, 2), when, {"at": when}, {1: "non-string key"}):
        custom = CustomMessage(role="custom", custom_type="t", content=[], details=details, timestamp=1)
        assert fast_dump(custom) == dump(custom)
    built = UserMessage.model_construct(role="user", content=[], timestamp=None)  # type: ignore[arg-type]  # a required field unset
    assert fast_dump(built) == dump(built)


def test_deep_values_get_what_model_dump_gives_refusals_included() -> None:
    # Prevents: a value nested past pydantic's serializer limit being stored by the fast path when the
    # model_dump path (and so the contract) refuses it as nested too deeply.
    for depth in (MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 2, 300):
        details: Any = 1
        for _ in range(depth):
            details = {"x": [details]}
        custom = CustomMessage(role="custom", custom_type="t", content=[], details=details, timestamp=1)
        try:
            expected: Any = dump(custom)
        except UnstorableValue as e:
            expected = e
        if isinstance(expected, UnstorableValue):
            with pytest.raises(UnstorableValue):
                fast_dump(custom)
        else:
            assert fast_dump(custom) == expected


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["inf", "-inf", "nan", "1e400", "Infinity", "-1e999", "1.5", "-0"]))
def test_a_lax_float_that_parses_to_a_non_finite_value_dumps_as_model_dump_does(cost: str) -> None:
    # Prevents: usage.cost_usd (a lax float, so the string "inf" or "1e400" validates) kept in memory
    # and returned as inf/nan while model_dump -- and so the log, and the session after a restart --
    # holds null.
    message = {"role": "assistant", "content": [], "stop_reason": "end", "model": "m", "provider": "p",
               "timestamp": 1, "usage": {"cost_usd": cost, "input": 1}}
    req = parse_request(api.AppendRequest, {"session_id": "s", "message": message})
    assert req.message is not None
    fast, slow = fast_dump(req.message), dump(req.message)
    assert orjson.dumps(fast) == orjson.dumps(slow)
    assert repr(fast) == repr(slow)  # repr: nan != nan, and None != nan


def test_non_finite_floats_in_json_fields_of_a_model_built_in_code_dump_as_model_dump_does() -> None:
    # Prevents: a model some code built holding inf/nan in an Any field stored as inf/nan in memory
    # while model_dump (the contract) turns them into null.
    for value in (float("inf"), float("-inf"), float("nan"), {"x": [float("nan")]}):
        custom = CustomMessage(role="custom", custom_type="t", content=[], details=value, timestamp=1)
        assert repr(fast_dump(custom)) == repr(dump(custom))


class _NotedText(TextBlock):
    note: str = "n"


class _BilledUsage(Usage):
    invoice: str = "i"


def test_a_subclass_of_a_wire_model_built_in_code_dumps_as_its_declared_type_does() -> None:
    # Prevents: a model some code built holding a subclass instance (fields the declared type lacks)
    # stored with those extra fields, where model_dump serializes the declared type's fields only.
    built = AssistantMessage(role="assistant", content=[_NotedText(type="text", text="x")], stop_reason="end",
                             model="m", provider="p", timestamp=1, usage=_BilledUsage(input=1))
    assert fast_dump(built) == dump(built)


@pytest.mark.parametrize("odd", [1, 1.5, float("nan"), float("inf"), True, "s", None, b"x", [1], {"a": 1}],
                         ids=lambda v: type(v).__name__ + repr(v)[:6])
def test_a_scalar_field_holding_another_type_dumps_as_before(odd: Any) -> None:
    # Prevents: the scalar fields' test (their own type first: str, int, bool) passing another value
    # it refused before, or refusing one it passed (int in a str field, NaN in a Literal, a str in
    # an int field): the fast dump or model_dump's answer, as before, with no warning either way.
    import warnings

    from session_manager._wire.dumping import _SCALARS

    for built in (TextBlock.model_construct(type="text", text=odd),
                  TextBlock.model_construct(type=odd, text="t"),
                  UserMessage.model_construct(role="user", content=[], timestamp=odd)):
        kept = type(odd) in _SCALARS and not (type(odd) is float and odd - odd != 0.0)
        with warnings.catch_warnings(record=True) as fast_warned:
            warnings.simplefilter("always")
            fast = fast_dump(built)
        with warnings.catch_warnings(record=True) as slow_warned:
            warnings.simplefilter("always")
            slow = built.model_dump(mode="json")
        if kept:  # the fast path's own answer: the value as it is, no warning
            assert not fast_warned and any(v is odd for v in fast.values())
        else:  # model_dump's
            assert repr(fast) == repr(slow) and len(fast_warned) == len(slow_warned)
