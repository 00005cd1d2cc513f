"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import pg_support


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh, uniquely named PostgreSQL schema, dropped afterwards (skips when no server answers)."""
    with pg_support.schema() as name:
        yield name
