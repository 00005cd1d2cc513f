"""Attacks on the embedded host's admission after pgadm (admission's copy checks value types only;
one orjson encoding of it proves the keys and measures the request; typed calls' ProvenPayload).
Each compares with what the exact path (or the store) must do: the same copy or the same
``session/invalid_request`` naming the field, never a traceback, and what is stored reads back
exactly, over the fs store and sqlite."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import session_manager
from session_manager._service.admission import admit, admit_copy, json_size
from session_manager._service.limits import Limits
from session_manager._wire.validation import json_payload
from session_manager.errors import INVALID_REQUEST, SessionError
from tests.property.test_proven_copy import _same


class Text(str):
    pass


@pytest.fixture(params=["fs", "sqlite"])
def manager(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    where = str(tmp_path / "d") if request.param == "fs" else f"sqlite:///{tmp_path.resolve()}/d.db"
    with session_manager.open(where, max_request_bytes=100_000) as sm:
        yield sm


def _refused(run: Callable[[], Any]) -> str:
    with pytest.raises(SessionError) as caught:
        run()
    assert caught.value.code == INVALID_REQUEST
    return caught.value.detail


# Values at the edges of orjson's own bounds (u64 / i64), of float repr and of JSON's escapes.
EDGES = [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 2**200, -(2**200), 0, -0.0, 1e308,
         -1.7976931348623157e308, 5e-324, 2.2250738585072014e-308, 0.1 + 0.2, 1 / 3, "\u2028\u2029",
         "\x00\x01\x1f\x7f\t\n\r\b\f", '"\\/', "\U0001f600é", True, False, None, [], {}, [[-0.0, 2**64 - 1]]]


@pytest.mark.parametrize("value", EDGES, ids=[f"{type(v).__name__}{i}" for i, v in enumerate(EDGES)])
def test_edge_values_read_back_exactly_through_call_and_typed_call(manager: Any, value: Any) -> None:
    # Prevents: a value orjson's encoding passes (a positive int in (2**63, 2**64), -0.0, a subnormal,
    # U+2028) stored as something else, or refused, by either store or either call form.
    sid = manager.call("session::create", {})["session_id"]
    by_call = manager.call("session::append", {"session_id": sid, "custom": {"custom_type": "t", "data": {"v": value}}})
    typed = manager.append(sid, custom={"custom_type": "t", "data": {"v": value}})
    entries = manager.call("session::messages-range", {"session_id": sid,
                                                       "entry_ids": [by_call["entry_id"], typed.entry_id]})["messages"]
    for entry in entries:
        assert _same(entry["custom"]["data"]["v"], value)


def test_an_integer_too_long_for_text_is_refused_naming_the_field(manager: Any) -> None:
    # Prevents: an int past Python's int-to-text limit (4300 digits) passing admission (its size is
    # estimated, and far within the bound) and raising ValueError from the store's encoder: a traceback.
    sid = manager.call("session::create", {})["session_id"]
    huge = 10**5000
    detail = _refused(lambda: manager.call(
        "session::append", {"session_id": sid, "custom": {"custom_type": "t", "data": {"v": [1, huge]}}}))
    assert detail.startswith("custom.data.v.1: ")
    assert _refused(lambda: manager.append(sid, custom={"custom_type": "t", "data": {"v": [1, huge]}})) == detail
    assert _refused(lambda: manager.call("session::create", {"metadata": {"k": -huge}})).startswith("metadata.k: ")
    assert manager.call("session::messages-range", {"session_id": sid, "entry_ids": []})["messages"] == []
    assert len(manager.call("session::list", {})["sessions"]) == 1  # nothing half-applied
    # At the limit it is stored and read back.
    at_limit = 10**4299
    got = manager.call("session::create", {"metadata": {"k": at_limit}})
    assert manager.call("session::get", {"session_id": got["session_id"]})["meta"]["metadata"]["k"] == at_limit


def test_a_recursive_value_in_a_typed_call_is_refused_as_the_dict_call(manager: Any) -> None:
    # Prevents: a typed call whose value contains itself raising RecursionError from its payload builder's
    # model walk (to_json), where the dict call answers session/invalid_request naming the field.
    loop: list[Any] = [1]
    loop.append(loop)
    mapping: dict[str, Any] = {}
    mapping["x"] = mapping
    for value in (loop, mapping):
        want = _refused(lambda: manager.call("session::create", {"metadata": {"a": value}}))  # noqa: B023
        assert _refused(lambda: manager.create(metadata={"a": value})) == want  # noqa: B023
    assert manager.call("session::list", {})["sessions"] == []


# JSON values orjson encodes (ints within 64 bits, finite floats, text without lone surrogates).
_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=False,
              allow_infinity=False), _text),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_text, inner, max_size=4)),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(_text)
def test_the_exact_walk_measures_text_as_its_json(text: str) -> None:
    # Prevents: the exact walk (json_size: every payload orjson refuses, e.g. one holding a str-subclass
    # key or an int past 64 bits) counting a control character as one byte where JSON writes \uXXXX.
    assert json_size(text) == len(orjson.dumps(text))
    assert json_size({text: ""}) == len(orjson.dumps({text: ""}))


def test_control_characters_cannot_carry_a_request_past_the_bound() -> None:
    # Prevents: 1,000 control characters (6,000 bytes of JSON) admitted under a 1,500-byte bound whenever
    # the payload takes the exact walk: a dict call holding a big int or a str-subclass key, and since
    # pgadm a typed call holding a str-subclass key (before it the typed call measured its copy exactly).
    from session_manager._hosts.typed_support import payload as typed_payload

    limits = Limits(max_request_bytes=1500)
    message = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}
    control = "\x01" * 1000
    for details in ([2**70, control], {Text("k"): control}):
        payload = {"session_id": "s", "message": {**message, "details": details}}
        assert "exceed max_request_bytes (1500)" in _refused(
            lambda: admit_copy("session::append", payload, limits, mutates=True))  # noqa: B023
        built = typed_payload(session_id="s", message={**message, "details": details})
        assert "exceed max_request_bytes (1500)" in _refused(
            lambda: admit_copy("session::append", built, limits, mutates=True))  # noqa: B023


@settings(max_examples=300, deadline=None)
@given(_json)
def test_the_exact_walk_measures_every_json_value_as_orjson_does(value: Any) -> None:
    # Prevents: the exact walk's estimates (20 bytes an int, 24 a float, 5 a bool or null) refusing a
    # request within the bound: since pgadm a typed call holding a str-subclass key takes that walk,
    # where before its copy (keys made plain) was measured by orjson exactly.
    assert json_size(value) == len(orjson.dumps(value))


def test_an_int_past_64_bits_is_measured_as_its_digits() -> None:
    # Prevents: an int past 64 bits measured short (bit_length * 3 // 10 + 2: 3,988 for 4,000 digits).
    for value in (2**64, -(2**64) - 5, 10**3999, -(10**4000 - 1), 2**1000):
        assert json_size(value) == len(str(value))


def test_a_typed_call_with_a_str_subclass_key_is_measured_as_before_pgadm() -> None:
    # Prevents: a typed call holding a str-subclass key refused at its exact size (its estimate,
    # 1,185 bytes for 216, counted instead): before pgadm its copy's keys were plain and measured exactly.
    from session_manager._hosts.typed_support import payload as typed_payload

    message = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1,
               "details": {Text("k"): [1] * 50, "f": [0.5] * 10, "b": [True, None]}}
    plain = {"session_id": "s", "message": {**message, "details": {"k": [1] * 50, "f": [0.5] * 10,
                                                                   "b": [True, None]}}}
    size = len(orjson.dumps(plain))
    for cap, admitted in ((size, True), (size - 1, False)):
        limits = Limits(max_request_bytes=cap)
        built = typed_payload(session_id="s", message=message)
        payload = {"session_id": "s", "message": message}
        for run in (lambda: admit_copy("session::append", built, limits, mutates=True),  # noqa: B023
                    lambda: admit_copy("session::append", payload, limits, mutates=True)):  # noqa: B023
            if admitted:
                assert _same(dict(run()), plain)
            else:
                assert _refused(run) == f"payload: {size} bytes of JSON exceed max_request_bytes ({cap})"


@pytest.mark.parametrize("key", ["a", Text("a"), True, 1, None, 1.5, (1,)])
def test_keys_of_other_types_are_refused_or_made_plain_as_the_exact_path(key: Any) -> None:
    # Prevents: the copy's unchecked keys (left to orjson's encoding) letting a bool, int, None or
    # tuple key through, or keeping a str-subclass key object in what is stored.
    payload = {"session_id": "s", "message": {"role": "user", "content": [{"type": "text", "text": "x", key: 1}]}}
    try:  # the exact path: admission, the copy, admission of the copy
        admit("session::append", payload, Limits(), mutates=True)
        want: Any = json_payload(payload)
        admit("session::append", want, Limits(), mutates=True)
    except SessionError as e:
        assert _refused(lambda: admit_copy("session::append", payload, Limits(), mutates=True)) == e.detail
    else:
        got = admit_copy("session::append", payload, Limits(), mutates=True)
        assert _same(got, want)
        assert all(type(k) is str for k in got["message"]["content"][0])


def test_a_payload_changed_after_admission_leaves_the_stored_copy_alone(manager: Any) -> None:
    # Prevents: admission validating or measuring one object and the store keeping another the caller
    # still holds (the copy must be private before it is proven).
    sid = manager.call("session::create", {})["session_id"]
    data: dict[str, Any] = {"v": [1, {"w": "x"}], "t": [[2]]}
    payload = {"session_id": sid, "custom": {"custom_type": "t", "data": data}}
    eid = manager.call("session::append", payload)["entry_id"]
    data["v"][1]["w"] = "changed"
    data["t"][0].append(3)
    data["new"] = 1
    got = manager.call("session::messages-range", {"session_id": sid, "entry_ids": [eid]})["messages"][0]
    assert got["custom"]["data"] == {"v": [1, {"w": "x"}], "t": [[2]]}


@pytest.mark.parametrize("depth", [119, 120, 121])
def test_nesting_at_the_bound_through_a_typed_call(manager: Any, depth: int) -> None:
    # Prevents: the typed call's copy (one level below the payload) counting a level other than the dict call.
    value: Any = "x"
    for i in range(depth - 2):  # the payload and custom: two levels above the value
        value = [value] if i % 2 else {"k": value}
    sid = manager.call("session::create", {})["session_id"]
    payload = {"session_id": sid, "custom": {"custom_type": "t", "data": value}}
    try:
        manager.call("session::append", payload)
    except SessionError as e:
        assert depth > 120
        assert _refused(lambda: manager.append(sid, custom={"custom_type": "t", "data": value})) == e.detail
    else:
        assert depth <= 120
        manager.append(sid, custom={"custom_type": "t", "data": value})


class Alias(str):
    """A key equal only to itself: a dict holds it beside the plain str it spells."""

    def __hash__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        return other is self


def test_a_key_spelling_another_keys_text_is_refused_not_dropped(manager: Any) -> None:
    # Prevents: {"a": 1, Alias("a"): 2} stored as {"a": 2} (the copy makes the subclass key the plain
    # str it spells, and the second silently replaced the first: a value lost, nothing said).
    for metadata in ({"a": 1, Alias("a"): 2}, {"x": {Alias("a"): 1, "a": 2}}):
        detail = _refused(lambda: manager.call("session::create", {"metadata": metadata}))  # noqa: B023
        assert detail.startswith("metadata") and "a" in detail
        assert _refused(lambda: manager.create(metadata=metadata)) == detail  # noqa: B023
    assert manager.call("session::list", {})["sessions"] == []


class Lying(dict[str, Any]):
    """A mapping whose items() answer other than what it holds (orjson reads what it holds)."""

    def items(self) -> Any:
        return [("k", "x" * 5000)]


class Counting(str):
    """Text whose own methods lie about it."""

    def count(self, *args: Any) -> int:
        return -(10**6)

    def isascii(self) -> bool:
        return True

    def encode(self, *args: Any, **kwargs: Any) -> bytes:
        return b""


@pytest.mark.parametrize("kind", ["fs", "sqlite"])
def test_what_is_stored_is_what_is_measured(tmp_path: Path, kind: str) -> None:
    # Prevents: the exact path measuring the caller's payload (orjson reads a dict subclass's storage)
    # while the copy it stores is built from the subclass's items(): 5,000 bytes stored under a
    # 2,000-byte bound. The copy is what must be measured.
    where = str(tmp_path / "d") if kind == "fs" else f"sqlite:///{tmp_path.resolve()}/d.db"
    with session_manager.open(where, max_request_bytes=2000) as sm:
        for run in (lambda: sm.call("session::create", {"metadata": {"m": Lying()}}),
                    lambda: sm.create(metadata={"m": Lying()})):
            assert "exceed max_request_bytes (2000)" in _refused(run)
        assert sm.call("session::list", {})["sessions"] == []


def test_a_str_subclass_cannot_shrink_its_own_measure() -> None:
    # Prevents: the exact walk asking a str subclass (a key, or a value the copy keeps) for its own
    # count/isascii/encode: a count of -1,000,000 admitted any request past the bound.
    limits = Limits(max_request_bytes=2000)
    for data in ({"v": [2**70, Counting("y" * 5000)]}, {Counting("k" * 5000): 2**70}):
        payload = {"session_id": "s", "custom": {"custom_type": "t", "data": data}}
        assert "exceed max_request_bytes (2000)" in _refused(
            lambda: admit_copy("session::append", payload, limits, mutates=True))  # noqa: B023


class Short(list[Any]):
    """A list claiming no length (iterated, it holds its items)."""

    def __len__(self) -> int:
        return 0


@pytest.mark.parametrize("kind", ["fs", "sqlite"])
def test_a_batch_claiming_no_length_is_capped_by_what_is_copied(tmp_path: Path, kind: str) -> None:
    # Prevents: max_batch_entries checked only on the caller's list (its len() a subclass's say) while
    # the copy stored holds every item: 10 entries appended under a cap of 3 (before pgadm too).
    where = str(tmp_path / "d") if kind == "fs" else f"sqlite:///{tmp_path.resolve()}/d.db"
    with session_manager.open(where, max_batch_entries=3) as sm:
        sid = sm.call("session::create", {})["session_id"]
        message = {"role": "user", "content": [{"type": "text", "text": "x"}], "timestamp": 1}
        batch = {"session_id": sid, "messages": Short([message] * 10)}
        detail = _refused(lambda: sm.call("session::append-many", batch))
        assert detail == "messages: 10 entries exceed max_batch_entries (3)"
        assert sm.call("session::messages", {"session_id": sid})["messages"] == []


CONSTRUCTED = [{"k": float("nan")}, [float("inf")], {"k": Text("v")}, {1: 2}, (1, 2), {1, 2}, 2**70, {Text("k"): 1},
               {"a": 1, Alias("a"): 2}, -0.0]


@pytest.mark.parametrize("data", CONSTRUCTED, ids=[f"{type(d).__name__}{i}" for i, d in enumerate(CONSTRUCTED)])
def test_an_unvalidated_model_in_a_typed_call_is_admitted_as_the_dict_call(manager: Any, data: Any) -> None:
    # Prevents: a model built without validation (model_construct) carrying into the typed call's prebuilt
    # payload (ProvenPayload: encoded by orjson only, which writes NaN as null) what the dict call refuses.
    from session_manager._wire.models import CustomPayload

    sid = manager.call("session::create", {})["session_id"]
    try:
        want = manager.call("session::append", {"session_id": sid, "custom": {"custom_type": "t", "data": data}})
    except SessionError as e:
        built = CustomPayload.model_construct(custom_type="t", data=data)
        assert _refused(lambda: manager.append(sid, custom=built)) == e.detail
        return
    got = manager.append(sid, custom=CustomPayload.model_construct(custom_type="t", data=data))
    stored = manager.call("session::messages-range", {"session_id": sid,
                                                      "entry_ids": [want["entry_id"], got.entry_id]})["messages"]
    assert _same(stored[0]["custom"], stored[1]["custom"])


@settings(max_examples=150, deadline=None)
@given(_json, st.booleans(), st.integers(-1, 1))
def test_every_path_admits_exactly_up_to_the_bound(value: Any, subclass_key: bool, off: int) -> None:
    # Prevents: any of the four ways in (dict call or typed call; the fast path, or the exact walk a
    # str-subclass key sends it down) measuring a request otherwise than its compact JSON, at the bound
    # and a byte either side (multi-byte text, escapes, -0.0, ints at the 64-bit edges).
    from session_manager._hosts.typed_support import payload as typed_payload

    key = Text("k") if subclass_key else "k"
    custom = {"custom_type": "t", "data": {key: value}}
    size = len(orjson.dumps({"session_id": "s", "custom": {"custom_type": "t", "data": {"k": value}}}))
    limits = Limits(max_request_bytes=size + off)
    for run in (lambda: admit_copy("session::append", {"session_id": "s", "custom": custom}, limits, mutates=True),
                lambda: admit_copy("session::append", typed_payload(session_id="s", custom=custom), limits,
                                   mutates=True)):
        if off >= 0:
            got = dict(run())
            assert orjson.dumps(got) == orjson.dumps({"session_id": "s", "custom": {"custom_type": "t",
                                                                                    "data": {"k": value}}})
        else:
            assert _refused(run) == f"payload: {size} bytes of JSON exceed max_request_bytes ({size - 1})"
