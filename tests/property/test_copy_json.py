"""The embedded host's copy of every result and event payload: equal, and sharing no container."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from session_manager._hosts.embedded import copy_json

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner,
                                                                                                 max_size=4))


def _containers(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [value, *(c for v in value.values() for c in _containers(v))]
    if isinstance(value, list):
        return [value, *(c for v in value for c in _containers(v))]
    return []


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_a_result_copies_equal_and_shares_no_dict_or_list(value: Any) -> None:
    # Prevents: a caller changing a dict or list of its result (or an observer its event)
    # and so changing the cached session it was copied from; or the copy changing a value.
    copied = copy_json(value)
    assert copied == value and repr(copied) == repr(value)
    originals = {id(c) for c in _containers(value)}
    assert not originals & {id(c) for c in _containers(copied)}


class _Dict(dict[str, Any]):
    pass


class _List(list[Any]):
    pass


def test_dict_and_list_subclasses_copy_as_plain_ones() -> None:
    # Prevents: a subclass instance (a store's own mapping type) handed to the caller as
    # itself, sharing its contents, instead of as a plain JSON copy.
    value = _Dict(a=_List([_Dict(b=[1])]), c=(1, 2))
    copied = copy_json(value)
    assert copied == {"a": [{"b": [1]}], "c": (1, 2)}
    assert type(copied) is dict and type(copied["a"]) is list and type(copied["a"][0]) is dict
    assert copied["a"][0]["b"] is not value["a"][0]["b"]
