"""``dump`` without pydantic's serializer: the append path's copy of a message.

:func:`~session_manager._wire.models.dump` (``model_dump(mode="json")``)
costs more than the rest of an append together, mostly in the Python wrap
serializer every :class:`~session_manager._wire.models.Wire` model runs to
leave out its ``None`` fields. :func:`fast_dump` gives the same dict from a
small function per model, generated from its fields (as
:mod:`.shape` does): the fields in declaration order, ``None`` left out but
for the model's ``_keep_null``, nested models dumped the same way, and JSON
values (``Any``, ``dict[str, Any]``, lists) copied, so the result shares
nothing with the model.

It only takes the shapes a model validated from JSON holds: exact ``str``,
``int``, ``float``, ``bool``, ``None``, ``list`` and ``dict`` with string keys.
Anything else (a model some code built with a tuple or a ``datetime``, a
model with its own serializers, values nested past :data:`MAX_DEPTH`) goes to
:func:`dump`, so the answer is always the one it gives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from .models import JsonObject, Wire, dump

Dumper = Callable[[Any, int], JsonObject]

_SCALARS = frozenset({str, int, float, bool})
# Deeper values go to dump, whose serializer has its own depth limit (refusals included).
MAX_DEPTH = 64


class _Unusual(Exception):
    """A value :func:`fast_dump` does not take: :func:`dump` decides."""


def _value(v: Any, depth: int) -> Any:
    """A copy of a field's value: nested models dumped, JSON copied."""
    t = type(v)
    if t in _SCALARS or v is None:
        # inf and nan (a lax float parses "inf"; code may build them): model_dump's JSON mode makes them null.
        if t is float and v - v != 0.0:
            raise _Unusual
        return v
    if depth > MAX_DEPTH:
        raise _Unusual
    depth += 1
    if t is list:
        return [_value(x, depth) for x in v]
    if t is dict:
        out = {}
        for k, x in v.items():
            if type(k) is not str:
                raise _Unusual
            out[k] = _value(x, depth)
        return out
    return _DUMPERS[t](v, depth)


def _plain_wire(model: type) -> bool:
    """A Wire model whose only serializer is Wire's own (None left out), declared
    with the wire models: pydantic dumps a subclass instance some code put in a
    field as the field's declared type, so a subclass goes to model_dump."""
    if not (isinstance(model, type) and issubclass(model, Wire)) or model.__module__ != Wire.__module__:
        return False
    decorators = model.__pydantic_decorators__
    return (set(decorators.model_serializers) <= {"_leave_out_absent"} and not decorators.field_serializers
            and not model.__pydantic_computed_fields__)


def _scalar(annotation: Any) -> bool:
    """A field holding one JSON scalar (its value is checked, never walked)."""
    if annotation in (str, int, float, bool):
        return True
    origin = getattr(annotation, "__origin__", None)
    return origin is not None and str(origin) == "typing.Literal" and all(
        type(a) is str for a in annotation.__args__)


def _exact_type(annotation: Any) -> type | None:
    """The type a :func:`_scalar` field's validated value has, where a value of it passes the
    scalar test whole (``str``, ``int``, ``bool``; a ``float`` is also checked finite: ``None``)."""
    if annotation in (str, int, bool):
        return annotation  # type: ignore[no-any-return]
    return str if annotation is not float else None  # (a Literal of strs: _scalar)


def _models_list(annotation: Any) -> bool:
    """A ``list`` of Wire models (one, or a union of them: content blocks), each
    dumped by its own function; anything else in it is ``_Unusual`` there."""
    if getattr(annotation, "__origin__", None) is not list:
        return False
    (item,) = annotation.__args__
    while getattr(item, "__metadata__", None) is not None:  # Annotated[Union[...], discriminator]
        item = item.__origin__
    members = item.__args__ if str(getattr(item, "__origin__", None)) == "typing.Union" else (item,)
    return all(isinstance(m, type) and issubclass(m, Wire) for m in members)


def _generate(model: type[BaseModel]) -> Dumper:
    if not _plain_wire(model):
        def unusual(_m: Any, _depth: int) -> JsonObject:
            raise _Unusual
        return unusual
    keep = model._keep_null  # type: ignore[attr-defined]
    lines = [f"def dump_{model.__name__}(_m, _depth):", "    _out = {}"]
    for n, field in model.model_fields.items():
        lines.append(f"    v = _m.{n}")
        if _scalar(field.annotation):
            # The field's own type first (str, int, bool): the rest of the test is then false, and
            # is not run for the value a validated model holds.
            expected = _exact_type(field.annotation)
            first = f"type(v) is not {expected.__name__} and (" if expected is not None else "("
            lines += [f"    if {first}type(v) not in _SCALARS or type(v) is float and v - v != 0.0):",
                      "        raise _Unusual", f"    _out[{n!r}] = v"]
        elif _models_list(field.annotation) and n not in keep:
            # _value's walk of the list and of each item, inline: one call per item, not three.
            lines += ["    if v is not None:",
                      "        if type(v) is not list or _depth >= MAX_DEPTH:", "            raise _Unusual",
                      f"        _out[{n!r}] = [_DUMPERS[type(x)](x, _depth + 2) for x in v]"]
        elif n in keep:
            lines.append(f"    _out[{n!r}] = _value(v, _depth)")
        else:
            lines += ["    if v is not None:", f"        _out[{n!r}] = _value(v, _depth)"]
    lines.append("    return _out")
    scope: dict[str, Any] = {"_SCALARS": _SCALARS, "_Unusual": _Unusual, "_value": _value, "_DUMPERS": _DUMPERS,
                             "MAX_DEPTH": MAX_DEPTH}
    name = f"dump_{model.__name__}"
    exec(compile("\n".join(lines), f"<{name}>", "exec"), scope)  # built from field names only
    fn: Dumper = scope[name]
    return fn


class _PerType(dict[type, Dumper]):
    def __missing__(self, t: type) -> Dumper:
        fn = self[t] = _generate(t)
        return fn


_DUMPERS = _PerType()


def fast_dump(model: BaseModel) -> JsonObject:
    """What :func:`dump` returns for ``model``, built without its serializer."""
    try:
        out: JsonObject = _DUMPERS[type(model)](model, 0)
        return out
    except (_Unusual, RecursionError):
        return dump(model)


def exact_dump(model: BaseModel) -> JsonObject:
    """What ``model.model_dump(mode="python")`` returns for ``model``, when that is exact
    JSON nested at most :data:`MAX_DEPTH` below it (string keys, finite floats, no tuple):
    new containers, shared with nothing. :class:`ValueError` for any other model (its
    dump may hold what a JSON copy refuses or changes: the caller takes its exact path)."""
    try:
        out: JsonObject = _DUMPERS[type(model)](model, 0)
    except (_Unusual, RecursionError):
        raise ValueError("not exact JSON") from None
    return out
