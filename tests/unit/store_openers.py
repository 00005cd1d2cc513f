"""The ``opener`` fixture the framework adapters' tests share: a store opened again at each
call (a restart), over fs, sqlite or postgres (skipped where no server answers). A test module
uses it by importing it: ``from tests.unit.store_openers import Opener, opener_fixture``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.store import FsStore, MemoryStore
from session_manager.store.sqlite import SqliteSettings, SqliteStore
from tests import pg_support

Opener = Callable[[], Any]


@pytest.fixture(name="opener", params=["fs", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def opener_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens the same store again each call (a restart), over fs, sqlite or postgres."""
    if request.param == "fs":
        yield lambda: session_manager.open(tmp_path / "d")
        return
    if request.param == "sqlite":
        yield lambda: session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db")
        return
    with pg_support.schema() as name:
        yield lambda: session_manager.open(store=pg_support.open_store(name))


STORES = ["memory", "fs", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@contextlib.contextmanager
def bare_opener(kind: str, tmp_path: Path) -> Iterator[Opener]:
    """Opens the same bare store (no manager) of ``kind`` again at each call (a restart, where
    the store persists; memory: the same object): memory, fs, sqlite or postgres (its own schema,
    dropped afterwards; skipped where no server answers)."""
    if kind == "memory":
        store = MemoryStore()
        yield lambda: store
    elif kind == "fs":
        yield lambda: FsStore(tmp_path / "d")
    elif kind == "sqlite":
        yield lambda: SqliteStore(SqliteSettings(str(tmp_path / "sm.db")))
    else:
        with pg_support.schema() as name:
            yield lambda: pg_support.open_store(name)


@pytest.fixture(name="opener", params=STORES)
def store_opener_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """:func:`bare_opener` over each of memory, fs, sqlite and postgres. A module uses it by
    importing ``store_opener_fixture`` (its fixture is named ``opener`` too)."""
    with bare_opener(request.param, tmp_path) as opener:
        yield opener

@contextlib.contextmanager
def manager(kind: str, tmp_path: Path) -> Iterator[session_manager.SessionManager]:
    """A manager over a new store of ``kind`` (fs, sqlite, memory or postgres: its own schema,
    dropped afterwards; skipped where no server answers), closed afterwards."""
    if kind == "postgres":
        with pg_support.schema("smtest_mgr") as name, session_manager.open(store=pg_support.open_store(name)) as sm:
            yield sm
        return
    if kind == "fs":
        sm = session_manager.open(tmp_path / "d")
    elif kind == "sqlite":
        sm = session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db")
    else:
        sm = session_manager.open(store=MemoryStore())
    with sm:
        yield sm
