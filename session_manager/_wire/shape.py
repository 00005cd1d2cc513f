"""Wire objects built from their models, without re-validating what they hold.

The pydantic models in this package are the one place a field is named.
Responses, events, entries and metas are plain JSON dicts, though: they
carry stored values that must round-trip exactly (fields a newer writer
added that our models do not name, ``3`` staying ``3``), and the append path
cannot afford a validate-and-dump per call. So each model gets two small
functions generated from its fields (cached):

* ``build[Model](**fields)``: the dict the model describes, in
  its field order, ``None`` left out as a model dump does (see
  :class:`~session_manager._wire.models.Wire`). Its parameters are the
  model's fields, keyword-only, required ones required, so Python itself
  refuses an unknown or a missing field (a bug: ``TypeError``);
* ``edit[Model](current, **changes)``: a copy of a stored dict
  with changes applied in place (keys keep their order: the bytes on disk
  depend on it); ``None`` removes a key the model does not keep null.

:func:`shape` builds from a ``base`` mapping too (e.g. an event from the
stored meta it reports); it costs a second pass, so hot paths use ``build``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from .models import Wire

Builder = Callable[..., dict[str, Any]]
Amender = Callable[..., dict[str, Any]]

_ABSENT: Any = object()


def _kept_null(model: type[BaseModel]) -> frozenset[str]:
    # A Wire model leaves out None but for the fields it names; a plain model dump keeps every None.
    return model._keep_null if issubclass(model, Wire) else frozenset(model.model_fields)


def _compile(name: str, source: str) -> Callable[..., dict[str, Any]]:
    scope: dict[str, Any] = {"_ABSENT": _ABSENT}
    exec(compile(source, f"<{name}>", "exec"), scope)  # the source is built from field names only
    fn: Callable[..., dict[str, Any]] = scope[name]
    return fn


def _builder(model: type[BaseModel]) -> Builder:
    fields, keep = model.model_fields, _kept_null(model)
    params = [n if f.is_required() else f"{n}=_ABSENT" for n, f in fields.items()]
    lines = [f"def build_{model.__name__}(*, {', '.join(params)}):", "    _out = {}"]
    for n in fields:
        test = f"{n} is not _ABSENT" if n in keep else f"{n} is not _ABSENT and {n} is not None"
        lines += [f"    if {test}:", f"        _out[{n!r}] = {n}"]
    lines.append("    return _out")
    return _compile(f"build_{model.__name__}", "\n".join(lines))


def _amender(model: type[BaseModel], only: tuple[str, ...] | None = None) -> Amender:
    """``edit[model]``; with ``only``, :func:`editor`'s: those fields, each required (no default to
    look up, no test of the fields a call does not change). Either way the given fields are applied
    in the model's field order, so a new key lands where the stored bytes expect it."""
    fields, keep = model.model_fields, _kept_null(model)
    changed = list(fields) if only is None else [n for n in fields if n in only]
    if only is None:
        head, name = f"_current, /, *, {', '.join(f'{n}=_ABSENT' for n in fields)}", f"amend_{model.__name__}"
    else:
        unknown = set(only) - set(fields)
        if unknown:
            raise TypeError(f"{model.__name__} has no field {sorted(unknown)[0]!r}")
        head, name = f"_current, /, {', '.join(only)}", f"amend_{model.__name__}_{'_'.join(only)}"
    lines = [f"def {name}({head}):", "    _out = dict(_current)"]
    for n in changed:
        indent = "    "
        if only is None:
            lines.append(f"    if {n} is not _ABSENT:")
            indent = "        "
        if n in keep:
            lines.append(f"{indent}_out[{n!r}] = {n}")
        else:
            lines += [f"{indent}if {n} is None:", f"{indent}    _out.pop({n!r}, None)",
                      f"{indent}else:", f"{indent}    _out[{n!r}] = {n}"]
    lines.append("    return _out")
    return _compile(name, "\n".join(lines))


class _PerModel(dict[type[BaseModel], Callable[..., dict[str, Any]]]):
    """Generates a model's function on first use, then hands out the same one."""

    def __init__(self, make: Callable[[type[BaseModel]], Callable[..., dict[str, Any]]]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, model: type[BaseModel]) -> Callable[..., dict[str, Any]]:
        fn = self[model] = self._make(model)
        return fn


build: Mapping[type[BaseModel], Builder] = _PerModel(_builder)
edit: Mapping[type[BaseModel], Amender] = _PerModel(_amender)
_editors: dict[tuple[type[BaseModel], tuple[str, ...]], Amender] = {}


def editor(model: type[BaseModel], *only: str) -> Amender:
    """``edit[model]`` for a hot path that always changes the same fields: ``editor(M, "a", "b")(current, a, b)``
    is ``edit[M](current, a=a, b=b)``, without the keyword defaults of every other field (cached)."""
    key = (model, only)
    fn = _editors.get(key)
    if fn is None:
        fn = _editors[key] = _amender(model, only)
    return fn


def shape(model: type[BaseModel], base: Mapping[str, Any], /, **fields: Any) -> dict[str, Any]:
    """``build[model]`` with the model's fields not given taken from ``base``."""
    picked = {k: base[k] for k in model.model_fields if k in base and k not in fields}
    return build[model](**picked, **fields)
