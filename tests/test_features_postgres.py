"""The @pure scenarios again, over the postgres adapter.

Same feature files, same steps; only the ``world_store`` fixture differs.
``conftest.py`` keeps the scenarios tagged @pure that read no JSONL or
attachment files (those test the fs adapter's format), and gives them the
``postgres`` marker instead of ``pure``. They need a server: without one they
skip with the reason (and fail under ``SESSION_MANAGER_REQUIRE_POSTGRES=1``).
"""

import pytest
from pytest_bdd import scenarios

pytestmark = pytest.mark.postgres


@pytest.fixture
def world_store() -> str:
    return "postgres"


scenarios(".")
