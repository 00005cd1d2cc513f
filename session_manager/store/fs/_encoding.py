"""File-name encoding of caller-chosen ids, byte-compatible with the reference.

``[A-Za-z0-9._-]`` pass through; every other UTF-8 byte becomes ``%XX``
(upper-case hex). The result never contains a path separator, so an id can
never name a path outside its folder; ``decode`` is the strict inverse.
"""

from __future__ import annotations

import re

_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_HEX = frozenset(b"0123456789abcdefABCDEF")


_PLAIN = re.compile(r"[A-Za-z0-9._-]*")


def encode_id(value: str) -> str:
    if _PLAIN.fullmatch(value):
        return value  # the common id needs no escaping (checked at C speed)
    out: list[str] = []
    for byte in value.encode("utf-8", "surrogatepass"):
        out.append(chr(byte) if byte in _SAFE else f"%{byte:02X}")
    return "".join(out)


def decode_id(stem: str) -> str | None:
    """The id an encoded stem names, or ``None`` when it is not a valid encoding."""
    if "%" not in stem and stem.isascii():
        return stem  # nothing escaped (most ids): every character stands for itself
    raw = bytearray()
    i = 0
    data = stem.encode("utf-8", "surrogateescape")
    while i < len(data):
        b = data[i]
        if b == 0x25:  # '%'
            hexpart = data[i + 1 : i + 3]
            if len(hexpart) != 2 or not all(c in _HEX for c in hexpart):
                return None  # int(..., 16) alone would accept " 1" and "+1"
            try:
                raw.append(int(hexpart.decode("ascii"), 16))
            except ValueError:
                return None
            i += 3
        else:
            raw.append(b)
            i += 1
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
