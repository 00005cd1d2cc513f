"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests import pg_support


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh, uniquely named PostgreSQL schema, dropped afterwards (skips when no server answers)."""
    with pg_support.schema() as name:
        yield name


@pytest.fixture
def relay() -> Iterator[Any]:
    """A misbehaving TCP relay to the test server (tests/pg_relay.py; skips when no server answers)."""
    pg_support.require()
    from tests.pg_relay import Relay

    r = Relay()
    yield r
    r.close()


@pytest.fixture
def background_rewrites(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every log past the soft line rewritten in the background, however small: these tests'
    logs are a few KB, which the store otherwise rewrites inline (``_rewrite.INLINE_LIVE``)."""
    from session_manager.store.fs import _rewrite

    monkeypatch.setattr(_rewrite, "INLINE_LIVE", 0)
