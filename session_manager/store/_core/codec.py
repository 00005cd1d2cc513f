"""The JSON line codec every adapter stores records with: strict, exact JSON, one
compact UTF-8 line per value, as the reference writes them (the fs adapter's log
lines, the SQL adapters' JSON columns and outbox payloads)."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

from ...errors import UnstorableValue

__all__ = ["encode_line", "loads", "loads_texts"]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (math.inf, -math.inf):
        raise ValueError(f"{text} does not fit a double")
    return value


# orjson reads an integer past 64 bits as a float instead of failing; any run
# of 19+ digits (i64 ends at 19 digits, u64 at 20) that can be a number's sends
# the line to the exact decoder. A number's digits follow the line's start, a
# structural character, whitespace, a sign or an exponent mark: a run after
# anything else is inside a string (an id's hex, "e_4a2659646718433496769462467e1d80"),
# which orjson reads exactly. (Any such run sent the line to the standard library
# before: ~0.1% of uuid4-hex ids hold one, and a path window holding that entry
# took ms instead of us to decode, every time.) The test is a byte translation
# (digits to "0", those number starts to "!", the rest to ".") and a substring
# search: C speed, where a regular expression cost more than the decoding itself.
_NUMBER_START = b":,[ \t\n\r-+eE"
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= b <= 0x39 else 0x21 if b in _NUMBER_START else 0x2E for b in range(256))
_LONG_RUN = b"0" * 19
_LONG_NUMBER = b"!" + _LONG_RUN


def _may_hold_a_long_integer(line: bytes) -> bool:
    digits = line.translate(_DIGITS_AS_ZERO)
    return _LONG_NUMBER in digits or digits.startswith(_LONG_RUN)


def loads(line: bytes) -> Any:
    """Parse one line as strict, exact JSON (UTF-8, no NaN, integers of any
    size stay integers). orjson does the work; a line it could misread or
    refuses gets the standard library's exact decoder."""
    if not _may_hold_a_long_integer(line):
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            pass
    return json.loads(line.decode("utf-8"), parse_constant=_reject_constant, parse_float=_finite_float)


def loads_texts(texts: list[str]) -> list[Any]:
    """:func:`loads` of each stored JSON text, in one parse: the texts joined as one
    array (each is a whole JSON value, so the array's elements are their values).
    A window of a path is decoded so: one C call, not one per entry."""
    if not texts:
        return []
    values = loads(("[" + ",".join(texts) + "]").encode("utf-8"))
    if not isinstance(values, list) or len(values) != len(texts):
        raise ValueError("a stored text is not one JSON value")
    return values


def encode_line(record: dict[str, Any]) -> bytes:
    """One compact UTF-8 JSON line, as the reference writes them."""
    try:
        return orjson.dumps(record)
    except TypeError:
        pass  # integers past 64 bits or unpaired surrogates: let json decide
    try:
        return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        raise UnstorableValue("text contains an unpaired UTF-16 surrogate, which cannot be stored") from None
    except RecursionError:
        raise UnstorableValue("a value is nested too deeply to be stored") from None
