"""Values as the postgres adapter stores them: the exact JSON text (the fs
store's encoder, so a value round-trips byte for byte) and the jsonb image
that serves list filters."""

from __future__ import annotations

from typing import Any

import orjson

from .._core.codec import encode_line as encode_json
from .keys import key


def events_prefix(session_id: str) -> str:
    """How every outbox payload of ``session_id``'s events begins (``session_id`` is the
    first field of each event model): deleting a session deletes those rows too, whose
    payloads hold its text (erasure), found by this prefix without parsing JSON."""
    return encode_json({"session_id": session_id}).decode()[:-1] + ","  # the object left open


def json_text(value: Any) -> str:
    """The exact JSON text stored for a value (a body, a meta): :func:`encode_json`'s."""
    # orjson's answer is encode_json's whenever orjson takes the value (its first step): called
    # here directly, a frame fewer on each of a warm append's four texts; anything orjson
    # refuses goes through encode_json, which decides. Decoded with no codec named (UTF-8, the
    # default, without the name's lookup on each call).
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return encode_json(value).decode()


def sanitize(value: Any) -> Any:
    """A jsonb-storable image of a JSON value: NUL (which jsonb refuses) escaped
    in strings and keys as in ids (:func:`.keys.key`, injective, so distinct
    keys stay distinct), integral floats as the exact integer they
    are (so ``2**70`` and ``1.1805916207174113e+21`` meet, as the service's rule
    has it). Applied to stored metadata and to filters alike, so values the
    service calls equal contain each other; the service rechecks the rest."""
    if isinstance(value, str):
        return key(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {sanitize(k): sanitize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitize(v) for v in value]
    return value
