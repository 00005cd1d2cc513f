"""The ``KEY=VALUE`` metadata filters of ``session-manager data ls --meta`` and the viewer's list."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError


def metadata_filter(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; a value that parses as JSON is that JSON (``n=3`` is the number 3)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--meta {pair!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out
