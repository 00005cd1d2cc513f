"""The embedded host's typed append (``_append_owned``, the adapters' hot write) and a call
(``session::append`` with a dict payload) take the same data by the same rule, over every store:
integers of any size stored and read back exactly (docs/embedded-api.md, "Exact values and
limits"); beside them NaN, unpaired surrogates, non-JSON objects refused by both as
``session/invalid_request`` naming the field, nothing written. Before, the typed append refused
any integer past 64 bits (orjson's range) that the call stored exactly."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

import session_manager
from tests.unit.store_openers import store_opener_fixture  # noqa: F401 (the fixture "opener")

WIDE = {"above": 2**70 + 1, "below": -(2**64) - 3, "u64": 2**64 - 1, "edge": 2**64, "list": [2**100, 1, -(2**63) - 1],
        "nested": {"n": 10**30}}


def by_call(sm: session_manager.SessionManager, data: Any) -> str:
    answer = sm.call("session::append", {"session_id": "S", "custom": {"custom_type": "t", "data": data}})
    return str(answer["entry_id"])


def typed(sm: session_manager.SessionManager, data: Any) -> str:
    return sm._append_owned("S", "t", data)


PATHS = {"call": by_call, "typed": typed}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_integers_past_64_bits_are_stored_exactly_on_both_append_paths(opener: Callable[[], Any], path: str) -> None:
    # Prevents: the typed append refusing 2**70 + 1 ("not representable as JSON") that
    # session::append stores exactly, or either path rounding it.
    store = opener()
    sm = session_manager.open(store=store)
    added: list[dict[str, Any]] = []
    sm.observe({"function_id": session_manager.ON_MESSAGE_ADDED}, added.append)
    try:
        sm.call("session::ensure", {"session_id": "S"})
        entry_id = PATHS[path](sm, dict(WIDE))
        stored = store.get_entry("S", entry_id)["data"]
        assert stored == WIDE and type(stored["above"]) is int
        items = sm.call("session::messages", {"session_id": "S", "include_custom": True})["messages"]
        assert [(i["entry_id"], i["custom"]["data"]) for i in items] == [(entry_id, WIDE)]
        assert [(e["entry_id"], e["custom"]["data"]) for e in added] == [(entry_id, WIDE)]
    finally:
        sm.close()
    again = opener()  # after a restart: read back exactly
    try:
        assert again.get_entry("S", entry_id)["data"] == WIDE
    finally:
        again.close()


# (A NaN alone is outside the typed append's promise, exact JSON with finite floats, which its
# builders keep: orjson writes it as null there, unchecked on the hot path.)
REFUSED = [
    pytest.param({"x": [1, "\ud800"]}, "custom.data.x", id="surrogate"),
    pytest.param({"x": {1, 2}}, "custom.data.x", id="set"),
    pytest.param({"x": 2**70, "y": math.inf}, "custom.data.y", id="wide-and-infinite"),
    pytest.param({"x": 2**70, 3: "three"}, "custom.data", id="wide-and-int-key"),
]


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize(("data", "field"), REFUSED)
def test_both_append_paths_refuse_the_same_values_naming_the_field(opener: Callable[[], Any], path: str,
                                                                 data: Any, field: str) -> None:
    # Prevents: the two paths disagreeing on what they take (a value beside a wide integer let
    # through by one, or refused with another code), or a refusal leaving an entry behind.
    store = opener()
    sm = session_manager.open(store=store)
    try:
        sm.call("session::ensure", {"session_id": "S"})
        with pytest.raises(session_manager.SessionError) as refused:
            PATHS[path](sm, data)
        assert refused.value.code == "session/invalid_request"
        assert field in str(refused.value)
        assert store.entries("S") == []
        assert sm.call("session::get", {"session_id": "S"})["meta"]["message_count"] == 0
    finally:
        sm.close()
