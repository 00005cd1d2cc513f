"""Attachment data: standard padded base64, checked without decoding, then
decoded and hashed in chunks so an upload is never held whole."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterator
from typing import Any

from ..errors import invalid_request

_B64_CHUNK = 4 * 64 * 1024  # base64 characters decoded per step (a multiple of 4)
_B64_SHAPE = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def decoded_size(data: str) -> int:
    """Decoded length of standard padded base64, checked without decoding."""
    n = len(data)
    if n % 4:
        raise invalid_request("data: attachment data is not valid base64 (length is not a multiple of 4)")
    if n == 0:
        return 0
    # A regex scan allocates nothing, so bad input is refused before an id is
    # taken or a folder made; the last quantum must be canonical (zero spare bits).
    if _B64_SHAPE.fullmatch(data) is None:
        raise invalid_request("data: attachment data is not valid base64 (unexpected character or padding)")
    if base64.b64encode(base64.b64decode(data[-4:])).decode("ascii") != data[-4:]:
        raise invalid_request("data: attachment data is not valid base64 (non-zero trailing bits)")
    pad = 2 if data.endswith("==") else 1 if data.endswith("=") else 0
    return n // 4 * 3 - pad


def decode_chunks(data: str, meta: dict[str, Any]) -> Iterator[bytes]:
    """Decoded bytes in chunks; once exhausted, ``meta["sha256"]`` is set."""
    digest = hashlib.sha256()
    for start in range(0, len(data), _B64_CHUNK):
        part = data[start : start + _B64_CHUNK]
        if "=" in part[:-2] or (start + _B64_CHUNK < len(data) and "=" in part):
            raise invalid_request("data: attachment data is not valid base64 (padding inside the data)")
        try:
            chunk = base64.b64decode(part, validate=True)
        except (binascii.Error, ValueError) as e:
            raise invalid_request(f"data: attachment data is not valid base64: {e}") from None
        digest.update(chunk)
        yield chunk
    meta["sha256"] = digest.hexdigest()
