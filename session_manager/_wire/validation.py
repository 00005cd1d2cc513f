"""Payload validation shared by both hosts: bad input becomes
``session/invalid_request`` naming the field, never a traceback."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from .._bus import CALLER_KEY
from ..errors import invalid_request

M = TypeVar("M", bound=BaseModel)


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "payload"


def describe(error: ValidationError) -> str:
    """A one-line account of what is wrong, field first."""
    return _describe(error.errors(include_url=False), error.error_count())


def _describe(errors: Sequence[ErrorDetails], count: int) -> str:
    problems = []
    for e in errors[:3]:
        problems.append(f"{_where(tuple(e.get('loc', ())))}: {e.get('msg', 'invalid')}")
    more = count - len(problems)
    if more > 0:
        problems.append(f"(+{more} more)")
    return "; ".join(problems)


# A top-level list longer than this is validated a chunk at a time: one pydantic call over a
# 10,000-message batch holds the GIL for ~100 ms, and an asyncio caller's loop stalls for it.
CHUNK_ITEMS = 256


def parse_request(model: type[M], payload: Any) -> M:
    """Validate ``payload`` (a JSON object) as ``model``."""
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise invalid_request(f"payload: expected a JSON object, got {type(payload).__name__}")
    for field, value in payload.items():  # (a few keys: this runs on every call)
        if type(value) is list and len(value) > CHUNK_ITEMS and field in model.model_fields:
            return _parse_chunked(model, payload, field)
    try:
        # model_validate with no options, without its Python wrapper (this runs on every call).
        return model.__pydantic_validator__.validate_python(payload)  # type: ignore[no-any-return]
    except ValidationError as e:
        raise invalid_request(describe(e)) from None


def _parse_chunked(model: type[M], payload: dict[str, Any], field: str) -> M:
    """:func:`parse_request` of a payload whose ``field`` is a long list: the rest once, then
    the list :data:`CHUNK_ITEMS` items at a time through the same model (so the same rules),
    with the same errors in the same order as one call would report."""
    validate = model.__pydantic_validator__.validate_python
    items: list[Any] = payload[field]
    errors: list[ErrorDetails] = []
    count = 0
    head: M | None = None
    try:
        head = validate({**payload, field: []})
    except ValidationError as e:
        errors.extend(e.errors(include_url=False))
        count += e.error_count()
    out: list[Any] = []
    for start in range(0, len(items), CHUNK_ITEMS):
        try:
            chunk = validate({**payload, field: items[start:start + CHUNK_ITEMS]})
        except ValidationError as e:
            mine = [d for d in e.errors(include_url=False) if d["loc"][:1] == (field,)]
            for d in mine:  # the item's index in the whole list
                d["loc"] = (field, start + int(d["loc"][1]), *d["loc"][2:]) if len(d["loc"]) > 1 else d["loc"]
            errors.extend(mine)
            count += len(mine)
        else:
            out.extend(getattr(chunk, field))
    if head is None or count:
        order = {name: i for i, name in enumerate(model.model_fields)}
        errors.sort(key=lambda d: order.get(str(d["loc"][0]) if d["loc"] else "", -1))  # (stable: field order)
        raise invalid_request(_describe(errors, count))
    setattr(head, field, out)
    return head




# The top-level keys each request model accepts (computed once per model).
_ALLOWED_KEYS: dict[type[BaseModel], frozenset[str]] = {}


def reject_unknown_keys(model: type[BaseModel], payload: Any) -> None:
    """Refuse top-level keys ``model`` does not define (a misspelt ``limt``
    would otherwise be dropped silently). The embedded host only: the wire
    ignores unknown keys, as the reference's serde types do; nested objects
    keep that handling everywhere. ``_caller_worker_id`` is always allowed."""
    if not isinstance(payload, dict):
        return
    allowed = _ALLOWED_KEYS.get(model)
    if allowed is None:
        allowed = _ALLOWED_KEYS[model] = frozenset([*model.model_fields, CALLER_KEY])
    if payload.keys() <= allowed:  # one set comparison: this runs on every embedded call
        return
    unknown = [k for k in payload if k not in allowed]
    if unknown:
        names = ", ".join(str(k) for k in unknown)
        known = ", ".join(model.model_fields) or "no fields"
        raise invalid_request(f"{names}: unknown field{'s' if len(unknown) > 1 else ''} (expected: {known})")


def json_payload(value: Any) -> Any:
    """A private deep copy of an in-process caller's payload, refusing what
    JSON cannot hold: NaN and infinities (they would be stored as null),
    non-string keys, and any other Python object (datetimes, sets, bytes, ...),
    each with ``session/invalid_request`` naming where it is. Tuples are JSON
    arrays and become lists. The wire needs none of this: it carries JSON."""
    try:
        return _json_copy(value, _UNBOUNDED)
    except RecursionError:
        raise invalid_request("payload: nested too deeply") from None
    except _NotJson as e:
        raise invalid_request(f"{_where(tuple(reversed(e.path)))}: {e.reason}") from None


def proven_copy(value: dict[str, Any], max_depth: int) -> dict[str, Any] | None:
    """:func:`json_payload`'s copy of ``value`` when it succeeds with ``value``
    nested at most ``max_depth`` deep (``value`` is 1), else ``None`` (the caller
    then takes the exact path, which names what is wrong). A copy made here
    proves there is no NaN or infinity and no deeper nesting, so admission need
    not scan the encoding for either."""
    try:
        copied: dict[str, Any] = _json_copy(value, max_depth)
    except (_NotJson, RecursionError):
        return None
    return copied


def plain_copy(value: dict[str, Any], max_depth: int) -> dict[str, Any] | None:
    """A copy of ``value`` (an exact ``dict``) when it holds only exact JSON types (``dict``,
    ``list``, ``str``, ``int``, ``bool``, ``None``, finite ``float``; a ``tuple`` is copied as a
    list, as :func:`json_payload` copies it) nested at most ``max_depth``
    deep (``value`` is 1), else ``None``. Its keys are not looked at: the caller proves them
    (exact ``str``) by encoding the copy with orjson, which refuses any other key, and takes the
    exact path when it does. Where it succeeds and the encoding does, the copy is
    :func:`proven_copy`'s (its values are the caller's leaves, untouched), at fewer steps."""
    try:
        copied: dict[str, Any] = _plain_copy(value, max_depth)
    except (_NotPlain, RecursionError):
        return None
    return copied


class _NotPlain(Exception):
    """A value :func:`plain_copy` does not take: the exact path decides."""


# Exact leaf types kept as they are (a float is checked to be finite where it is met).
_PLAIN_LEAVES = frozenset({str, int, bool, type(None)})


def _plain_copy(value: Any, room: int) -> Any:
    """``value``: an exact dict, list or tuple (anything else is refused); ``room``: the levels of
    containers it may still open. A float is finite iff ``v - v == 0.0`` (NaN and infinities
    give NaN), checked inline: no call per float (an assistant message's usage has a dozen)."""
    if room <= 0:
        raise _NotPlain
    t = type(value)
    if t is dict:
        out = value.copy()
        for k, v in out.items():
            t = type(v)
            if t not in _PLAIN_LEAVES:
                if t is float:
                    if v - v != 0.0:
                        raise _NotPlain
                elif t is list and room > 2:
                    # A list of exact leaves and objects of exact leaves (a message's content), copied
                    # here as the list branch would copy it: no call. Anything else: that branch.
                    items = v.copy()
                    for i, x in enumerate(items):
                        if type(x) not in _PLAIN_LEAVES:
                            if type(x) is dict:
                                item = x.copy()
                                for y in item.values():
                                    if type(y) not in _PLAIN_LEAVES:
                                        break
                                else:
                                    items[i] = item
                                    continue
                            out[k] = _plain_copy(v, room - 1)
                            break
                    else:
                        out[k] = items
                elif t is dict or t is list or t is tuple:
                    out[k] = _plain_copy(v, room - 1)  # (a value replaced while iterating: the keys stay)
                else:
                    raise _NotPlain
        return out
    if t is list or t is tuple:
        copied = value.copy() if t is list else list(value)  # (a tuple is a JSON array: a list)
        for i, v in enumerate(copied):
            t = type(v)
            if t not in _PLAIN_LEAVES:
                if t is dict and room > 1:
                    # An object of exact leaves (a content block), copied here: no call.
                    item = v.copy()
                    for x in item.values():
                        if type(x) not in _PLAIN_LEAVES:
                            break
                    else:
                        copied[i] = item
                        continue
                if t is float:
                    if v - v != 0.0:
                        raise _NotPlain
                elif t is dict or t is list or t is tuple:
                    copied[i] = _plain_copy(v, room - 1)
                else:
                    raise _NotPlain
        return copied
    raise _NotPlain


class ProvenPayload(dict[str, Any]):
    """A request payload this package built as :func:`plain_copy` would have copied it:
    new containers of exact JSON types (no NaN or infinity; keys not yet looked at), nested
    at most admission's ``MAX_DEPTH`` deep, holding only the request's own top-level keys,
    shared with nobody (the typed methods' payloads: ``_hosts.typed_support.payload``).
    Admission takes it as its private copy once its encoding proves the keys plain strs
    (else as any payload: copied on the exact path, which names what is wrong)."""

    __slots__ = ()


def private_value(value: Any, room: int, dump: Callable[[Any], Any]) -> Any:
    """A field's value copied as :func:`plain_copy` copies it (``room``: the levels of
    containers it may open; keys not looked at: :class:`ProvenPayload`), where a model, the
    value itself or an item of it, is ``dump(model)`` (exact JSON, new: no further copy).
    :class:`ValueError` where the copy is refused (the caller then takes the exact path,
    which names what is wrong)."""
    try:
        t = type(value)
        if t is dict:  # (first: a dict is no model, and isinstance of a model class costs more)
            return _plain_copy(value, room)
        if isinstance(value, BaseModel):
            return dump(value)
        if t is list or t is tuple:
            if room <= 0:
                raise ValueError("nested too deeply")
            return [dump(v) if isinstance(v, BaseModel) else _plain_value(v, room - 1) for v in value]
        return _plain_value(value, room)
    except (_NotPlain, RecursionError):
        raise ValueError("not exact JSON") from None


def _plain_value(value: Any, room: int) -> Any:
    """:func:`_plain_copy` of any value: an exact leaf as it is, a float checked finite."""
    t = type(value)
    if t in _PLAIN_LEAVES:
        return value
    if t is float:
        if value - value != 0.0:
            raise _NotPlain
        return value
    return _plain_copy(value, room)


# No depth bound (json_payload's own: only Python's recursion limit).
_UNBOUNDED = 1 << 62


class _NotJson(Exception):
    """Raised where a value is not JSON; the path is collected on the way out
    (so the copy itself builds no paths)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.path: list[Any] = []


# Exact types copied as they are (a str or int subclass takes the general path below).
_LEAVES = frozenset({str, int, bool, type(None)})


def _json_copy(value: Any, room: int) -> Any:
    """The copy, exact JSON types first: an exact dict or list is copied whole
    in C, then its keys checked and only its non-leaf values replaced (this
    walk runs on every embedded call: no call, and no Python store, per leaf).
    ``room``: the levels of containers ``value`` may still open (0: none)."""
    t = type(value)
    if t in _LEAVES:
        return value
    if room <= 0 and (t is dict or t is list or isinstance(value, dict | list | tuple)):
        raise _NotJson("nested too deeply")
    if t is dict:
        out = value.copy()
        for k, v in out.items():
            if type(k) is not str:
                return _json_copy_general(value, room)  # the copy's keys are made plain strs there
            if type(v) not in _LEAVES:
                try:
                    out[k] = _json_copy(v, room - 1)  # (a value replaced while iterating: the keys stay as they are)
                except _NotJson as e:
                    e.path.append(k)
                    raise
        return out
    if t is list:
        copied = value.copy()
        for i, v in enumerate(copied):
            if type(v) not in _LEAVES:
                if type(v) is dict and room > 1:
                    # An object of string keys and exact leaves (a content block), copied here: no call.
                    # Any other value (a float, a container, another key) takes the call below.
                    item = v.copy()
                    for k, x in item.items():
                        if type(k) is not str or type(x) not in _LEAVES:
                            break
                    else:
                        copied[i] = item
                        continue
                try:
                    copied[i] = _json_copy(v, room - 1)
                except _NotJson as e:
                    e.path.append(i)
                    raise
        return copied
    return _json_copy_general(value, room)


def _json_copy_general(value: Any, room: int) -> Any:
    if isinstance(value, str | int) or value is None:  # bool is an int
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise _NotJson(f"object keys must be strings, got {type(k).__name__} {k!r}")
            try:
                # A str subclass key as a plain str (str.__str__: its own __str__ may say anything):
                # the caller's key object, whose hash may change, is never kept.
                key = k if type(k) is str else str.__str__(k)
                if key in out:  # (a subclass key equal only to itself, beside the str it spells)
                    raise _NotJson(f"object keys must be distinct strings, {key!r} is given twice")
                out[key] = _json_copy(v, room - 1)
            except _NotJson as e:
                e.path.append(k)
                raise
        return out
    if isinstance(value, list | tuple):
        copied = []
        for i, v in enumerate(value):
            try:
                copied.append(_json_copy(v, room - 1))
            except _NotJson as e:
                e.path.append(i)
                raise
        return copied
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotJson(f"{value} is not a JSON number")
        return value
    raise _NotJson(f"a {type(value).__name__} is not a JSON value")
