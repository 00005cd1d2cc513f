"""Where the tests find things: the repository's own fixtures, and optional
material beside the repository.

Every fact a test needs lives under ``tests/fixtures`` or ``tests/snapshots``.
The reference material (golden schemas, the shared token cases) is optional:
``$SESSION_MANAGER_REFERENCE`` or ``../shared/reference`` from the repository
root; a test that needs it skips, with the reason, when it is absent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SNAPSHOTS = REPO / "tests" / "snapshots"


def reference_dir() -> Path | None:
    """The reference material beside the repository, or ``None``."""
    chosen = os.environ.get("SESSION_MANAGER_REFERENCE")
    path = Path(chosen) if chosen else REPO.parent / "shared" / "reference"
    return path if path.is_dir() else None


def require_reference(name: str) -> Path:
    """``<reference>/<name>``, or skip the calling test with the reason."""
    base = reference_dir()
    if base is None or not (base / name).exists():
        pytest.skip(f"optional reference material {name!r} not beside the repository "
                    "(../shared/reference; or set SESSION_MANAGER_REFERENCE)")
    return base / name


def golden_schemas() -> dict[str, dict[str, Any]]:
    """The reference's golden schemas by function id, or skip the calling test."""
    folder = require_reference("golden-schemas")
    docs = (json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json")))
    return {d["function_id"]: d for d in docs}
