"""The JSON Schema a function registers for its request or response, generated from its model."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter


def json_schema(model: Any, *, nullable: bool = False) -> dict[str, Any]:
    """The registered schema of a model or type (``null`` allowed when ``nullable``)."""
    schema = TypeAdapter(model).json_schema()
    if nullable:
        defs = schema.pop("$defs", None)
        schema = {"anyOf": [schema, {"type": "null"}]}
        if defs:
            schema["$defs"] = defs
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
