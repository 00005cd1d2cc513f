"""What a request must be before any work is done on it: exact JSON, and
within the size limits. Both hosts run :func:`admit` on the raw payload,
before validation, so a refused request costs O(its size) and nothing else.

Exact JSON: integers of any size and floats are kept as they are (see
:func:`session_manager.store._records.loads` for the way back); what JSON cannot carry --
``NaN``, ``±Infinity``, text with an unpaired UTF-16 surrogate (it has no
UTF-8 form) -- is ``session/invalid_request`` naming the field, so it is
never stored as something else.

The fast path is one ``orjson.dumps``, which also measures the request
(the UTF-8 length of its compact JSON); a value it cannot encode, or an
encoding containing ``null`` (where orjson would have written a NaN), sends
the payload to an exact walk that names the field. A bulk field (an
upload's base64 ``data``) is measured by its length and never encoded: an
ASCII string's length is known without reading it, so a 64 MiB upload costs
nothing to measure.
"""

from __future__ import annotations

import functools
import math
import re
import sys
from collections.abc import Mapping
from typing import Any

import orjson

from .._wire.validation import ProvenPayload, _NotPlain, _plain_copy, json_payload, proven_copy
from ..errors import invalid_request
from .limits import Limits

# The deepest nesting of arrays and objects a request may have, the payload
# object included. The Rust reference and the iii engine parse JSON with
# serde_json, which refuses nesting past 128 levels: a log line or a response
# nests a request's values one to three levels deeper than the request, so
# every line we write stays readable to the reference (and below orjson's own
# bound of 254). Every later stage here handles a value this deep with room to spare.
MAX_DEPTH = 120

# A field carrying bulk bytes (base64), measured by its length, never copied.
BULK_FIELDS: Mapping[str, str] = {"session::put-attachment": "data"}

# The batch a mutation carries, per function: what max_batch_entries caps.
BATCH_FIELDS: Mapping[str, str] = {
    "session::append-many": "messages",
    "session::set-draft": "attachment_ids",
    "session::messages-range": "entry_ids",
}


def admit(function_id: str, payload: Any, limits: Limits, *, mutates: bool, proven: bool = False,
          batch_checked: bool = False) -> None:
    """Raise ``session/invalid_request`` unless ``payload`` may be served.
    ``proven``: the caller has shown ``payload`` holds no NaN or infinity and
    nests at most :data:`MAX_DEPTH` deep (the embedded host's private copy,
    :func:`~session_manager._wire.validation.proven_copy`), so the encoding
    is not scanned for either; ``batch_checked``: its batch was checked already."""
    if not isinstance(payload, dict):
        return  # the request model reports a payload of the wrong shape
    if not batch_checked:
        _check_batch(function_id, payload, limits)
    bulk = BULK_FIELDS.get(function_id)
    rest = payload
    try:
        extra = 0
        if bulk is not None and isinstance(payload.get(bulk), str):
            rest = {k: v for k, v in payload.items() if k != bulk}
            try:
                extra = _text_size(payload[bulk]) + len(bulk) + 4
            except Unrepresentable as bad:
                bad.path.append(bulk)
                raise
        size = _fast_size(rest, proven) + extra
    except TooDeep as bad:
        # The field it is in, not a path hundreds of levels long.
        raise invalid_request(f"{bad.path[-1] if bad.path else 'payload'}: {bad.why}") from None
    except Unrepresentable as bad:
        where = ".".join(reversed(bad.path)) or "payload"
        raise invalid_request(f"{where}: {bad.why}") from None
    except RecursionError:
        raise invalid_request("payload: nested too deeply") from None
    if extra:
        # The upload's data is bounded by max_attachment_bytes (decoded), so its base64 up to that cap
        # is not counted here: an upload at the cap is always admitted, and one a little past it gets
        # the handler's attachment_too_large. Beyond the allowance it counts, so a huge string is still
        # refused before any work.
        size -= min(extra, _bulk_allowance(limits.max_attachment_bytes, bulk or ""))
    if mutates:
        admit_size(size, limits)


def admit_size(size: int, limits: Limits) -> None:
    """``session/invalid_request`` unless a mutating request of ``size`` bytes of compact
    JSON is within ``max_request_bytes`` (:func:`admit`'s bound; also the embedded
    host's typed append, which measures its request without building it)."""
    if size > limits.max_request_bytes:
        raise invalid_request(
            f"payload: {size} bytes of JSON exceed max_request_bytes ({limits.max_request_bytes})")


def _check_batch(function_id: str, payload: dict[str, Any], limits: Limits) -> None:
    batch = BATCH_FIELDS.get(function_id)
    if batch is not None:
        items = payload.get(batch)
        if isinstance(items, list) and len(items) > limits.max_batch_entries:
            raise invalid_request(
                f"{batch}: {len(items)} entries exceed max_batch_entries ({limits.max_batch_entries})")


def admit_copy(function_id: str, payload: Any, limits: Limits, *, mutates: bool) -> Any:
    """:func:`admit`, then the in-process caller's private copy
    (:func:`~session_manager._wire.validation.json_payload`): the same errors in
    the same order. A payload copied within :data:`MAX_DEPTH` is proven free of
    NaN, infinities and deeper nesting, so admission skips its scans for them;
    any other takes admission's exact path first, then the copy's refusal, then
    admission of the copy (its tuples are lists: see :func:`_within_depth`)."""
    exact = type(payload) is dict
    if not exact and type(payload) is ProvenPayload:  # (a typed call's: its builder made it as our copy)
        if function_id in BULK_FIELDS:
            admit(function_id, payload, limits, mutates=mutates, proven=True)
            return payload
        if function_id in BATCH_FIELDS:
            _check_batch(function_id, payload, limits)
        try:
            size = len(orjson.dumps(payload))  # (its keys proven plain strs here: see ProvenPayload)
        except TypeError:
            payload = dict(payload)  # as any payload: the exact path names what is wrong
            exact = True
        else:
            if mutates and size > limits.max_request_bytes:  # (admit_size's test: no call when within)
                admit_size(size, limits)
            return payload
    if exact:
        if function_id in BATCH_FIELDS:  # first: an oversized batch is refused without copying it
            _check_batch(function_id, payload, limits)
        if function_id not in BULK_FIELDS:
            # The copy of exact types, then one encoding of it that both proves its keys plain strs
            # (and its text and integers JSON's) and measures it: admit's own, shared. Anything
            # either refuses takes the exact path below, which names it.
            try:  # (plain_copy, inline)
                private = _plain_copy(payload, MAX_DEPTH)
            except (_NotPlain, RecursionError):
                private = None
            if private is not None:
                try:
                    size = len(orjson.dumps(private))
                except TypeError:  # (orjson.JSONEncodeError is one)
                    pass
                else:
                    if mutates and size > limits.max_request_bytes:  # (admit_size's test: no call when within)
                        admit_size(size, limits)
                    return private
        private = proven_copy(payload, MAX_DEPTH)
    else:
        private = None
    if private is not None:
        # The copy is what is stored, so it is what is measured (a dict subclass's items(), which the
        # copy took, may say other than what it holds, which orjson reads); its leaves and key texts
        # are the caller's, so the same errors name the same fields (its batch too: a list subclass
        # may say another length).
        admit(function_id, private, limits, mutates=mutates, proven=True)
        return private
    admit(function_id, payload, limits, mutates=mutates, batch_checked=exact)
    private = json_payload(payload)
    # orjson does not count tuples toward its depth limit, so admission's depth proof
    # (_within_depth) passes tuples nested past MAX_DEPTH; the copy holds lists there.
    admit(function_id, private, limits, mutates=mutates)
    return private


def _bulk_allowance(max_bytes: int, field: str) -> int:
    """The JSON size of ``"field": "<base64 of max_bytes bytes>"`` (as ``extra`` measures it)."""
    return 4 * -(-max_bytes // 3) + 2 + len(field) + 4


# A compiled search: it finds the literal faster than ``b"null" in body`` (an append's payload: ~0.4 us of ~0.7).
_NULL = re.compile(b"null")


def _fast_size(payload: Any, proven: bool = False) -> int:
    """orjson measures (and refuses surrogates and integers past 64 bits, then
    the exact walk decides); it writes NaN as ``null`` without complaint, so
    the walk also runs whenever the encoding contains ``null`` at all, and
    when :func:`_shallow` cannot show the nesting is at most :data:`MAX_DEPTH`
    (neither when the caller has ``proven`` both)."""
    try:
        body = orjson.dumps(payload)
    except TypeError:
        return json_size(payload)
    except orjson.JSONEncodeError:  # e.g. nested past orjson's depth limit
        return json_size(payload)
    if not proven and (_NULL.search(body) is not None or not _shallow(payload, body)):
        json_size(payload)
    return len(body)


def _shallow(payload: Any, body: bytes) -> bool:
    """Nested at most :data:`MAX_DEPTH` deep? A small encoding holding no more
    brackets than that is (brackets inside strings count too: an upper bound);
    any other asks :func:`_within_depth` (counting 5 MB of brackets costs more)."""
    if len(body) <= 4096 and body.count(b"{") + body.count(b"[") <= MAX_DEPTH:
        return True
    return _within_depth(payload)


def _within_depth(payload: Any) -> bool:
    """Is ``payload`` (already encodable) nested at most :data:`MAX_DEPTH` deep?
    Wrapped in :func:`_headroom` lists, it encodes iff it is: orjson refuses
    past its own limit, at C speed. A batch of 10,000 messages holds ~40,000
    brackets: the exact walk took ~55 ms of it, this ~3 ms. Not for tuples:
    orjson does not count them toward its limit (JSON, the wire's, has none)."""
    levels = _headroom()
    if levels <= 0:
        return False  # an orjson whose limit is not above ours: the walk decides
    wrapped = payload
    for _ in range(levels):
        wrapped = [wrapped]
    try:
        orjson.dumps(wrapped)
    except orjson.JSONEncodeError:
        return False
    return True


@functools.cache
def _headroom() -> int:
    """orjson's deepest encodable nesting (254 in orjson 3.x, probed once, not
    assumed) less :data:`MAX_DEPTH`; 0 when it is not above ours or not found."""
    def encodes(depth: int) -> bool:
        value: list[Any] = []
        for _ in range(depth - 1):
            value = [value]
        try:
            orjson.dumps(value)
        except orjson.JSONEncodeError:
            return False
        return True

    low, high = 1, 4096  # encodes(low); find the last depth that encodes below high
    if encodes(high):
        return 0  # no limit in reach: wrapping would prove nothing
    while high - low > 1:
        middle = (low + high) // 2
        if encodes(middle):
            low = middle
        else:
            high = middle
    return max(low - MAX_DEPTH, 0)


class Unrepresentable(Exception):
    """A value JSON cannot carry exactly; ``path`` is its field, innermost first."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why
        self.path: list[str] = []


class TooDeep(Unrepresentable):
    """Arrays and objects nested past :data:`MAX_DEPTH`."""


def _text_size(text: str) -> int:
    # str's own methods, not the text's: a str subclass may say anything (a count of -10**6).
    if str.isascii(text):  # O(1): CPython keeps the flag
        n = str.__len__(text)
    else:
        try:
            n = len(str.encode(text, "utf-8"))
        except UnicodeEncodeError:
            raise Unrepresentable("text contains an unpaired UTF-16 surrogate, which cannot be stored") from None
    return n + 2 + str.count(text, '"') + str.count(text, "\\")


# Control characters JSON writes escaped: \b \t \n \f \r in two bytes, the rest as \u00XX in six.
_CONTROL = re.compile("[\x00-\x1f]")
_SHORT_ESCAPES = "\b\t\n\f\r"


def _json_text_size(text: str) -> int:
    """:func:`_text_size` with control characters at their escaped length (not for a bulk field:
    that is never scanned, and its base64 is checked by its handler)."""
    n = _text_size(text)
    if _CONTROL.search(text) is not None:
        controls = _CONTROL.findall(text)
        n += 5 * len(controls) - 4 * sum(1 for c in controls if c in _SHORT_ESCAPES)
    return n


def json_size(value: Any, depth: int = 1) -> int:
    """The UTF-8 size of ``value`` as compact JSON; :class:`Unrepresentable`
    for NaN, ±Infinity, unpaired surrogates, integers past Python's int-to-text
    bound, non-string keys and non-JSON types,
    :class:`TooDeep` for containers nested past :data:`MAX_DEPTH` (``value``
    is at ``depth``)."""
    if isinstance(value, str):
        return _json_text_size(value)
    # Scalars at their written length, not an estimate: a payload with a str-subclass key (a typed
    # call's too) is measured here, and must be within the bound exactly when its JSON is.
    if isinstance(value, bool) or value is None:
        return 5 if value is False else 4
    if isinstance(value, int):
        try:  # (Python's int-to-text bound: the stores' encoder would raise past it, a traceback)
            return len(int.__repr__(value))
        except ValueError:
            raise Unrepresentable(f"an integer of more than {sys.get_int_max_str_digits()} digits "
                                  "cannot be written as JSON text") from None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Unrepresentable(f"{value} is not a JSON number (NaN and Infinity are refused)")
        return len(orjson.dumps(value)) if type(value) is float else len(float.__repr__(value))
    if isinstance(value, dict | list | tuple) and depth > MAX_DEPTH:
        raise TooDeep(f"nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, dict):
        n = 1 + max(len(value), 1)
        for key, child in value.items():
            if not isinstance(key, str):
                raise Unrepresentable("object keys must be strings")
            try:
                n += _json_text_size(key) + 1 + json_size(child, depth + 1)
            except Unrepresentable as bad:
                bad.path.append(key)
                raise
        return n
    if isinstance(value, list | tuple):
        n = 1 + max(len(value), 1)
        for i, child in enumerate(value):
            try:
                n += json_size(child, depth + 1)
            except Unrepresentable as bad:
                bad.path.append(str(i))
                raise
        return n
    raise Unrepresentable(f"a {type(value).__name__} is not a JSON value")
