"""What the generated typed methods (``typed.py``) share: turning keyword
arguments into the ``call()`` payload and its result into a response model.

A typed call goes through ``call()`` itself, so it is validated once, by the
same models, and stores exactly the bytes the equivalent dict call stores.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from .._service.admission import MAX_DEPTH
from .._wire.dumping import exact_dump
from .._wire.models import ContentBlock
from .._wire.validation import ProvenPayload, private_value
from ..errors import LimitWarning, invalid_request
from ..messages import Content, blocks

M = TypeVar("M", bound=BaseModel)


_LEAVES = frozenset({str, int, float, bool, type(None)})
# Exact values a private copy keeps as they are (a float is checked to be finite: private_value).
_EXACT = frozenset({str, int, bool})


def to_json(value: Any) -> Any:
    """``value`` with every model in it replaced by its plain form (dicts and
    lists). Not the JSON dump: that would turn NaN into null and a datetime
    into a string, where call() refuses both; call() checks what this gives.
    A dict or list holding no model (nor tuple) is handed back as it is:
    call() makes its own private copy of the payload anyway."""
    t = type(value)
    if t in _LEAVES:
        return value
    if t is dict or t is list:
        items = value.items() if t is dict else enumerate(value)
        out = None
        for k, v in items:
            if type(v) in _LEAVES:
                continue
            plain = to_json(v)
            if plain is not v:
                if out is None:
                    out = value.copy()  # the first value that changed: from here on, a new container
                out[k] = plain
        return value if out is None else out
    if isinstance(value, BaseModel):
        try:
            return value.model_dump(mode="python")
        except (PydanticSerializationError, RecursionError):
            raise invalid_request("payload: nested too deeply") from None
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value


# A typed call's payload nests its fields' values one level below the payload object.
_ROOM = MAX_DEPTH - 1


def payload(**fields: Any) -> dict[str, Any]:
    """The request payload: arguments left at ``None`` are absent, as in the JSON form.

    Built as the private copy call() would make (a :class:`ProvenPayload`: models
    dumped, containers copied and checked in one walk, so call() neither copies
    nor scans it again); where a value is not plainly JSON, the caller's values with
    only their models replaced (:func:`to_json`), which call() checks and copies as
    any payload, naming what is wrong. (A loop, leaves kept without a call: this
    runs on every typed call.)"""
    out = ProvenPayload()
    for name, value in fields.items():
        if value is not None:
            if type(value) in _EXACT:
                out[name] = value
                continue
            try:
                out[name] = private_value(value, _ROOM, exact_dump)
            except ValueError:
                return _plain_payload(fields)
    return out


def _plain_payload(fields: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, value in fields.items():
        if value is not None:
            try:
                out[name] = value if type(value) in _LEAVES else to_json(value)
            except RecursionError:  # (a value holding itself: admission names it, as the dict call's)
                out[name] = value
    return out


def response(model: type[M], result: Any) -> M:
    """The response model of a call's JSON result (model_validate with no options,
    without its Python wrapper: this runs on every typed call)."""
    return model.__pydantic_validator__.validate_python(result)  # type: ignore[no-any-return]


def optional_response(model: type[M], result: Any) -> M | None:
    """As :func:`response`, for the functions that answer ``null`` for unknown ids."""
    return None if result is None else model.__pydantic_validator__.validate_python(result)


def as_content(content: str | Sequence[Content]) -> list[ContentBlock]:
    """A content parameter as blocks: a string is one text block, and so is each string in a list."""
    if isinstance(content, str):
        return blocks((content,))
    if isinstance(content, list | tuple):
        return blocks(content)
    raise invalid_request(f"content: expected a string or a list of content blocks, got {type(content).__name__}")


def check_limit(limit: int | None, cap: int | None, more: str = "page on with next_cursor") -> None:
    """Warn when ``limit`` asks for more than a page can hold (the call clamps it to ``cap``);
    ``more``: how to read past the page."""
    if limit is not None and cap is not None and type(limit) is int and limit > cap:
        warnings.warn(f"limit={limit} is above max_list_limit ({cap}): the page holds at most {cap}; {more}",
                      LimitWarning, stacklevel=3)
