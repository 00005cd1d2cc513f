"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from session_manager.store import _aio_fsync
from tests import pg_support


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh, uniquely named PostgreSQL schema, dropped afterwards (skips when no server answers)."""
    with pg_support.schema() as name:
        yield name


@pytest.fixture(params=["waiter-syncs", "started-at-write"])
def fsync_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs a group-commit test twice: every sync made by its first waiter, and every sync started
    in the background at write time and reaped later (``_aio_fsync.ThreadBackend``, which calls
    whatever ``os.fsync`` the test installed, so injected blocks and failures apply to both)."""
    backend = _aio_fsync.ThreadBackend() if request.param == "started-at-write" else None
    with _aio_fsync.use(backend):
        yield str(request.param)
