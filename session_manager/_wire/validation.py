"""Payload validation shared by both hosts: bad input becomes
``session/invalid_request`` naming the field, never a traceback."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .._bus import CALLER_KEY
from ..errors import invalid_request

M = TypeVar("M", bound=BaseModel)


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "payload"


def describe(error: ValidationError) -> str:
    """A one-line account of what is wrong, field first."""
    problems = []
    for e in error.errors(include_url=False)[:3]:
        problems.append(f"{_where(tuple(e.get('loc', ())))}: {e.get('msg', 'invalid')}")
    more = error.error_count() - len(problems)
    if more > 0:
        problems.append(f"(+{more} more)")
    return "; ".join(problems)


def parse_request(model: type[M], payload: Any) -> M:
    """Validate ``payload`` (a JSON object) as ``model``."""
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise invalid_request(f"payload: expected a JSON object, got {type(payload).__name__}")
    try:
        return model.model_validate(payload)
    except ValidationError as e:
        raise invalid_request(describe(e)) from None




def reject_unknown_keys(model: type[BaseModel], payload: Any) -> None:
    """Refuse top-level keys ``model`` does not define (a misspelt ``limt``
    would otherwise be dropped silently). The embedded host only: the wire
    ignores unknown keys, as the reference's serde types do; nested objects
    keep that handling everywhere. ``_caller_worker_id`` is always allowed."""
    if not isinstance(payload, dict):
        return
    unknown = [k for k in payload if k not in model.model_fields and k != CALLER_KEY]
    if unknown:
        names = ", ".join(str(k) for k in unknown)
        known = ", ".join(model.model_fields) or "no fields"
        raise invalid_request(f"{names}: unknown field{'s' if len(unknown) > 1 else ''} (expected: {known})")
