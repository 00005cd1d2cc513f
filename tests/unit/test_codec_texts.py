"""Many stored JSON texts decoded in one parse (a path window) equal each decoded alone."""

from __future__ import annotations

import pytest

from session_manager.store._core.codec import encode_line, loads, loads_texts


def test_a_window_decoded_at_once_equals_each_entry_decoded_alone() -> None:
    # Prevents: the joined parse changing a value: integers past 64 bits (which send the
    # whole array to the exact decoder), floats, unicode, nesting, empty containers.
    values = [{"a": 1}, [], {}, "x", 2**70, -(2**63), 1.5, 1e300, None, True, {"t": "é\u2028😀"}, [[{"n": [1, 2]}]]]
    texts = [encode_line({"v": v}).decode("utf-8") for v in values]
    assert loads_texts(texts) == [loads(t.encode("utf-8")) for t in texts]
    assert [type(v["v"]) for v in loads_texts(texts)] == [type(v) for v in values]
    assert loads_texts([]) == []


def test_a_text_that_is_not_one_value_is_refused() -> None:
    with pytest.raises(ValueError):
        loads_texts(["1,2", "3"])
