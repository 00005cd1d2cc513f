"""``text[]`` parameters encoded once, by this module, not by psycopg per statement.

psycopg's list dumper works out each list's element type and dimensions on every
``execute`` (looking through the list for a non-null element, choosing a dumper per
element, a key for its prepared-statement cache): about a third of the client's time
per append went there, for seven short lists of strings. A :class:`TextArray` is a
list of ``str | None`` already known to be a ``text[]``: its binary form is built here
directly (the wire format of ``array_send``), and psycopg sees one parameter of one
fixed type, as cheap to pass as a string.

The dumper is registered on psycopg's global adapters for this private type only
(every connection made after the import has it; nothing else is a ``TextArray``).
"""

from __future__ import annotations

from struct import Struct
from typing import Any

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

__all__ = ["LENGTH", "ONE_HEADER", "TEXT_ARRAY_OID", "FixedTextArray", "TextArray", "encode"]

TEXT_OID = 25
TEXT_ARRAY_OID = 1009
_HEADER = Struct("!iiiii")  # ndim, has nulls, element oid, length, lower bound
_EMPTY = Struct("!iii").pack(0, 0, TEXT_OID)
_LEN = Struct("!i")
_NULL = _LEN.pack(-1)
_ONE = _HEADER.pack(1, 0, TEXT_OID, 1, 1)
_ONE_NULL = _HEADER.pack(1, 1, TEXT_OID, 1, 1) + _NULL
# A one-element array is ONE_HEADER, LENGTH.pack(len(data)), data (for callers inlining the usual case).
ONE_HEADER, LENGTH = _ONE, _LEN


class TextArray(list[str | None]):
    """A list of strings (or ``None``) sent as one binary ``text[]`` parameter."""

    __slots__ = ()


class FixedTextArray(TextArray):
    """A :class:`TextArray` never changed after it is made: its encoding is kept."""

    __slots__ = ("wire",)

    def __init__(self, items: list[str | None]) -> None:
        super().__init__(items)
        self.wire = encode(self)


def encode(items: list[str | None]) -> bytes:
    """The binary wire form of a one-dimensional ``text[]`` holding ``items``."""
    if len(items) == 1:  # the usual case: one entry, one event
        item = items[0]
        if item is None:
            return _ONE_NULL
        data = item.encode("utf-8")
        return _ONE + _LEN.pack(len(data)) + data
    if not items:
        return _EMPTY
    parts = [b""]
    nulls = 0
    pack = _LEN.pack
    for item in items:
        if item is None:
            parts.append(_NULL)
            nulls = 1
        else:
            data = item.encode("utf-8")
            parts.append(pack(len(data)))
            parts.append(data)
    parts[0] = _HEADER.pack(1, nulls, TEXT_OID, len(items), 1)
    return b"".join(parts)


class _TextArrayBinaryDumper(Dumper):
    format = Format.BINARY
    oid = TEXT_ARRAY_OID

    def dump(self, obj: Any) -> bytes:
        return obj.wire if type(obj) is FixedTextArray else encode(obj)


psycopg.adapters.register_dumper(TextArray, _TextArrayBinaryDumper)
