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


def test_only_a_long_run_that_can_be_a_number_takes_the_exact_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a run of 19+ digits inside a string (the hex of an "e_<uuid4>" id holds one about
    # once in a thousand ids) sending a whole path window to the standard library's decoder
    # (ms instead of us, on every tail that window serves); and an integer past 64 bits, in
    # any position a number can take, read by orjson (as a float).
    from session_manager.store._core import codec

    exact: list[str] = []
    stdlib_loads = codec.json.loads

    def counted(text: str, **kw: object) -> object:
        exact.append(text)
        return stdlib_loads(text, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(codec.json, "loads", counted)
    ids = ['{"id":"e_4a2659646718433496769462467e1d80","parent_id":"x1234567890123456789012"}',
           '{"t":"a 1.12345678901234567890123 b"}', '[1.12345678901234567890123]']
    assert [loads(t.encode()) for t in ids] == [stdlib_loads(t) for t in ids] and exact == []
    numbers = ['{"n":12345678901234567890}', '[-12345678901234567890]', "12345678901234567890",
               '{"n": 12345678901234567890}', '[1,\n12345678901234567890]', '{"n":1e1234567890123456789}']
    for text in numbers[:-1]:
        value = loads(text.encode())
        assert value == stdlib_loads(text)
        found = value if isinstance(value, list) else [value] if isinstance(value, int) else list(value.values())
        assert 12345678901234567890 in [abs(v) for v in found]  # an int, not orjson's float
    assert len(exact) == len(numbers) - 1
    with pytest.raises(ValueError):  # a double's range exceeded: refused, as before
        loads(numbers[-1].encode())


def test_a_stored_text_is_the_line_encoders_whatever_orjson_refuses() -> None:
    # Prevents: json_text (which calls orjson itself first) storing a text other than
    # encode_line's: integers past 64 bits (orjson refuses them: the exact encoder's text), a
    # lone surrogate (refused by both: UnstorableValue, as encode_line says), unicode kept as is.
    from session_manager.errors import UnstorableValue
    from session_manager.store.sql.values import json_text

    for value in ({"a": 1, "t": "é\u2028😀", "n": None}, {"big": 2**70}, [-(2**63), 1.5, 1e300, True], "x", None):
        assert json_text(value) == encode_line(value).decode("utf-8")  # type: ignore[arg-type]
    with pytest.raises(UnstorableValue):
        json_text({"s": "\ud800"})
