"""session_manager.open(): what a bad option or an unreachable store answers."""

from __future__ import annotations

from pathlib import Path

import pytest

import session_manager
from session_manager.errors import STORAGE, SessionError
from session_manager.store.memory import MemoryStore

UNREACHABLE = "postgresql://nobody:s3cret-pw@127.0.0.1:1/none"  # port 1: refused at once


def test_an_unreachable_postgres_uri_is_a_session_storage_error() -> None:
    # Prevents: open("postgresql://...") raising the internal StoreError where the fs open
    # (and the README's contract) raises SessionError session/storage, so a caller catching
    # SessionError missed it; its text must still mask the password.
    pytest.importorskip("psycopg")
    with pytest.raises(SessionError) as raised:
        session_manager.open(UNREACHABLE)
    assert raised.value.code == STORAGE
    assert "s3cret-pw" not in str(raised.value)
    assert "cannot open the database" in str(raised.value)


def test_read_only_is_refused_where_it_cannot_hold(tmp_path: Path) -> None:
    # Prevents: read_only=True silently ignored for a given writable store, so an
    # "inspection" open took every mutation (sqlite and postgres have a read-only mode:
    # tests/unit/test_read_only_databases.py).
    with pytest.raises(ValueError, match="read_only"):
        session_manager.open(store=MemoryStore(), read_only=True)
    # A data_dir's read-only open is unchanged: it takes no mutation and creates nothing.
    (tmp_path / "d").mkdir()
    sm = session_manager.open(tmp_path / "d", read_only=True)
    with pytest.raises(SessionError) as refused:
        sm.call("session::create", {})
    assert refused.value.code == STORAGE
    assert sm.call("session::list", {})["sessions"] == []
    sm.close()
    assert list((tmp_path / "d").iterdir()) == []
