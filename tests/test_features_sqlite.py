"""The @pure scenarios again, over the sqlite adapter.

Same feature files, same steps; only the ``world_store`` fixture differs.
``conftest.py`` keeps the scenarios tagged @pure that read no JSONL or
attachment files (those test the fs adapter's format). SQLite is in the
standard library, so they always run (and stay @pure).
"""

import pytest
from pytest_bdd import scenarios


@pytest.fixture
def world_store() -> str:
    return "sqlite"


scenarios(".")
