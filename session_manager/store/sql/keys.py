"""Ids as stored in text columns, which refuse NUL.

U+0000 and U+0001 become two-character escapes (``\\x01\\x01`` and
``\\x01\\x02``). The code is prefix-free and monotone, so stored keys sort
exactly as the service sorts ids (by code point, under ``COLLATE "C"``).
"""

from __future__ import annotations

import re
from typing import Any

from ...errors import UnstorableValue

_ESCAPED = re.compile("\x01([\x01\x02])", re.DOTALL)
# The longest id (UTF-8 bytes of its stored key) an entry may carry: a
# (session_id, entry_id) pair must fit PostgreSQL's btree row limit (2704
# bytes), whatever the id's compressibility.
ID_BYTES = 1024


def key(value: str) -> str:
    """The stored key of an id."""
    if "\x00" not in value and "\x01" not in value:
        return value
    return value.replace("\x01", "\x01\x02").replace("\x00", "\x01\x01")


def unkey(value: str) -> str:
    """The id a stored key names (the inverse of :func:`key`)."""
    if "\x01" not in value:
        return value
    return _ESCAPED.sub(lambda m: "\x00" if m.group(1) == "\x01" else "\x01", value)


def key_or_none(value: Any) -> str | None:
    """The stored key of an optional id (a parent link, a leaf)."""
    return key(value) if isinstance(value, str) else None


def check_id(field: str, value: str) -> None:
    """:class:`UnstorableValue` naming ``field`` when the id's key is past :data:`ID_BYTES`."""
    if len(value) <= ID_BYTES // 4:
        return  # (each code point's key takes at most 4 bytes: the usual id needs no encoding)
    size = len(key(value).encode("utf-8"))
    if size > ID_BYTES:
        raise UnstorableValue(f"{field} is too long: it takes {size} bytes and the postgres adapter "
                              f"allows {ID_BYTES} (PostgreSQL's index row limit)")
