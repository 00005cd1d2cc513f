"""Opaque pagination cursors: standard base64 of a small JSON object.

The encodings match the reference worker's, so a cursor issued by either
implementation reads back in the other: list cursors are
``{"o": order, "k": sort_key, "id": session_id}`` (bound to the order they
were issued for), message cursors ``{"id": last_entry_id}``.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, TypeGuard

from ..errors import INVALID_CURSOR, SessionError


def encode(payload: dict[str, Any]) -> str:
    # Raw UTF-8 like the reference's serde_json, so cursors match byte for byte.
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return base64.b64encode(text.encode("utf-8", "surrogatepass")).decode()


def decode(raw: str) -> dict[str, Any]:
    try:
        data = base64.b64decode(raw.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as e:
        raise SessionError(INVALID_CURSOR, f"cursor is not valid base64: {e}") from None
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as e:  # ValueError covers UnicodeDecodeError
        raise SessionError(INVALID_CURSOR, f"cursor payload is malformed: {e}") from None
    if not isinstance(value, dict):
        raise SessionError(INVALID_CURSOR, "cursor payload is malformed: not an object")
    return value


def list_cursor(order: str, key: int, session_id: str) -> str:
    return encode({"o": order, "k": key, "id": session_id})


def decode_list_cursor(raw: str, order: str) -> tuple[int, str]:
    value = decode(raw)
    o, k, sid = value.get("o"), value.get("k"), value.get("id")
    if not isinstance(o, str) or not isinstance(k, int) or isinstance(k, bool) or not _storable(sid):
        raise SessionError(INVALID_CURSOR, "cursor payload is malformed: expected o, k and id")
    if o != order:
        raise SessionError(
            INVALID_CURSOR, f"cursor was issued for order {o} but the request asks for {order}"
        )
    return k, sid


def entry_cursor(entry_id: str) -> str:
    return encode({"id": entry_id})


def decode_entry_cursor(raw: str) -> str:
    entry_id = decode(raw).get("id")
    if not _storable(entry_id):
        raise SessionError(INVALID_CURSOR, "cursor payload is malformed: expected id")
    return entry_id


def _storable(value: Any) -> TypeGuard[str]:
    """An id some stored session or entry may hold: text without unpaired
    surrogates (which no store accepts, the reference's parser refuses, and a
    database driver cannot even send)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
