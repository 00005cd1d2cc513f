"""Writes ``typed.py``: one typed method per row of the function table.

Run ``python -m session_manager._hosts.typed_gen`` after changing the table
(``surface.py``) or a request/response model; ``tests/unit/test_typed_api.py``
fails while the checked-in file differs from what this prints. Parameters
are the request model's fields in order, with the annotations written in
the model's source (so the aliases ``Id``, ``Limit``, ... show in IDEs);
``session_id`` is positional where required, everything else keyword-only; arguments left
at ``None`` are absent from the payload. Two widenings over the models: a
``content`` parameter also takes a string and plain strings among its blocks
(as the message constructors do), and a ``limit`` above ``max_list_limit``
warns (:class:`~session_manager.errors.LimitWarning`) instead of silently
returning fewer; the wire schemas are unchanged.

The generator imports the package, which imports ``typed.py``: if that file
is broken, restore the checked-in one (``git checkout``) before rerunning.
"""

from __future__ import annotations

import builtins
import inspect
import keyword
import re
import sys
import textwrap
from pathlib import Path

from pydantic import BaseModel

from .. import types
from .surface import FUNCTIONS, Function

# Functions whose ``limit`` is not a page clamped to ``max_list_limit`` (purge: its own 1..1000, refused past it).
OWN_LIMIT = frozenset({"session::purge"})
# How to read on past a clamped page, where it is not check_limit's default (next_cursor).
PAGE_ON = {
    "session::messages": "page on with next_cursor, or read everything with sm.transcript()",
    "session::messages-tail": "page back with before_entry_id=oldest_entry_id",
}

# The two mention-provider functions serve the console's @session menu;
# they stay reachable through call() but get no typed method.
UNTYPED: frozenset[str] = frozenset({"session::mention::search", "session::mention::get"})

TARGET = Path(__file__).with_name("typed.py")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Inside the class a method named ``list`` shadows the builtin for mypy.
_BUILTIN_LIST = re.compile(r"(?<![\w.])list\[")
# A content parameter (a list of blocks in the model) also takes a string, as user_message() does.
_CONTENT = "list[ContentBlock]"
CONTENT_ANNOTATION = "str | Sequence[Content]"


def typed_functions() -> list[Function]:
    """The table rows that get a typed method, in table order."""
    return [f for f in FUNCTIONS if f.id not in UNTYPED]


def method_name(function_id: str) -> str:
    """``session::append-many`` -> ``append_many``."""
    return function_id.removeprefix("session::").replace("-", "_")


def source_annotation(model: type[BaseModel], field: str) -> str:
    """The annotation of ``field`` as written in the model's class body."""
    for cls in model.__mro__:
        written = inspect.get_annotations(cls).get(field)
        if written is not None:
            return written if isinstance(written, str) else getattr(written, "__name__", repr(written))
    raise LookupError(f"{model.__name__}.{field} has no annotation")


def _docstring(function: Function, indent: str) -> list[str]:
    lines = textwrap.wrap(function.description, 100)
    described = [(name, info.description) for name, info in function.request.model_fields.items()
                 if info.description]
    if described:
        lines += ["", "Args:"]
        for name, description in described:
            lines += textwrap.wrap(f"{name}: {description}", 100, initial_indent="    ",
                                   subsequent_indent="        ")
    lines += ["", f"Calls ``{function.id}``; raises :class:`~session_manager.SessionError`."]
    body = [f'{indent}"""{lines[0]}'] + [f"{indent}{line}" if line else "" for line in lines[1:]]
    return [*body, f'{indent}"""']


def _method(function: Function, *, is_async: bool) -> list[str]:
    fields = function.request.model_fields
    params = ["self"]
    keyword_only = False
    for name, info in fields.items():
        annotation = _param_annotation(function, name)
        if name == "session_id" and info.is_required():  # (an optional one: a filter, keyword-only)
            params.append(f"{name}: {annotation}")
            continue
        if not keyword_only:
            params.append("*")
            keyword_only = True
        default = "" if info.is_required() else " = None"
        params.append(f"{name}: {annotation}{default}")
    result = function.response.__name__ + (" | None" if function.nullable else "")
    prefix = "async def" if is_async else "def"
    head = f"    {prefix} {method_name(function.id)}("
    signature = [head + ", ".join(params) + f") -> {result}:"]
    if len(signature[0]) > 120:
        signature = [head, *[f"        {p}," for p in params], f"    ) -> {result}:"]
    args = ", ".join(f"{name}={_argument(function, name)}" for name in fields)
    wait = "await " if is_async else ""
    convert = "optional_response" if function.nullable else "response"
    call = f'{wait}self.call("{function.id}", payload({args}))'
    body = [f"        result = {call}"]
    if len(body[0]) > 120:
        body = [f'        result = {wait}self.call(', f'            "{function.id}",',
                f"            payload({args}),", "        )"]
        if len(body[2]) > 120:
            body[2:3] = ["            payload(", *[f"                {n}={_argument(function, n)}," for n in fields],
                         "            ),"]
    if "limit" in fields and function.id not in OWN_LIMIT:
        more = PAGE_ON.get(function.id)
        body.insert(0, "        check_limit(limit, self._list_limit_cap()" + (f", \"{more}\")" if more else ")"))
    body.append(f"        return {convert}({function.response.__name__}, result)")
    return [*signature, *_docstring(function, "        "), *body]


def _param_annotation(function: Function, name: str) -> str:
    written = source_annotation(function.request, name)
    if name == "content" and written == _CONTENT:
        return CONTENT_ANNOTATION
    return _BUILTIN_LIST.sub("builtins.list[", written)


def _argument(function: Function, name: str) -> str:
    """The payload value of parameter ``name`` (a widened content parameter made blocks)."""
    return f"as_content({name})" if _param_annotation(function, name) == CONTENT_ANNOTATION else name


def _imports(functions: list[Function]) -> list[str]:
    names: set[str] = set()
    for function in functions:
        names.add(function.response.__name__)
        for field in function.request.model_fields:
            names.update(_NAME.findall(_param_annotation(function, field)))
    names -= set(dir(builtins)) | set(keyword.kwlist) | {"builtins", "Sequence", "Content"}
    typing_names = sorted(names & {"Any"})
    names -= {"Any"}
    missing = sorted(n for n in names if not hasattr(types, n))
    if missing:
        raise LookupError(f"session_manager.types does not export {', '.join(missing)}")
    out = ["import builtins", "from collections.abc import Sequence"]
    if typing_names:
        out.append(f"from typing import {', '.join(typing_names)}")
    out.append("")
    out.append("from ..messages import Content")
    out.append("from ..types import (")
    out += [f"    {n}," for n in sorted(names)]
    out.append(")")
    out.append("from .typed_support import as_content, check_limit, optional_response, payload, response")
    return out


def render() -> str:
    """The source of ``_typed.py``."""
    functions = typed_functions()
    lines = [
        "# Generated by `python -m session_manager._hosts.typed_gen` from the function table",
        "# (surface.py); do not edit: change the table or the models and rerun it.",
        '"""Typed methods over the function table, sync and async (generated)."""',
        "",
        "from __future__ import annotations",
        "",
        *_imports(functions),
        "",
        "",
    ]
    for cls, is_async in (("TypedMethods", False), ("AsyncTypedMethods", True)):
        kind = "coroutine" if is_async else "method"
        lines += [
            f"class {cls}:",
            f'    """One {kind} per ``session::*`` function: keyword arguments in, response model out."""',
            "",
            f"    {'async def' if is_async else 'def'} call(self, function_id: str, payload: Any = None) -> Any:",
            "        raise NotImplementedError",
            "",
            "    def _list_limit_cap(self) -> int | None:",
            '        """The max_list_limit a page is clamped to (None: unknown, no warning)."""',
            "        return None",
        ]
        for function in functions:
            lines += ["", *_method(function, is_async=is_async)]
        lines += ["", ""]
    return "\n".join(lines[:-2]) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    source = render()
    if args == ["--check"]:
        return 0 if TARGET.read_text(encoding="utf-8") == source else 1
    TARGET.write_text(source, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
