"""Ids as stored in text columns, which refuse NUL.

U+0000 and U+0001 become two-character escapes (``\\x01\\x01`` and
``\\x01\\x02``). The code is prefix-free and monotone, so stored keys sort
exactly as the service sorts ids (by code point, under ``COLLATE "C"``).
"""

from __future__ import annotations

import re

_ESCAPED = re.compile("\x01([\x01\x02])", re.DOTALL)


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
