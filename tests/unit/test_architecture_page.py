"""The architecture page lists every module of the package, one table row each."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "session_manager"
PAGE = ROOT / "docs" / "architecture.md"


def test_the_architecture_page_has_one_row_per_module() -> None:
    # Prevents: a module added, moved or removed without the layout page following it (the page
    # is the map a new maintainer reads first; a stale row sends them to a file that is not there).
    rows = re.findall(r"^\| `([^`]+\.py)` \|", PAGE.read_text(encoding="utf-8"), flags=re.M)
    listed = set(rows)
    actual = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    assert sorted(actual - listed) == [], "modules without a row on docs/architecture.md"
    assert sorted(listed - actual) == [], "rows on docs/architecture.md naming no module"
    assert len(rows) == len(listed), "a module listed twice"
