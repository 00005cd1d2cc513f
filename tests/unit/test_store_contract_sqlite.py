"""The storage contract over the sqlite adapter (a file per test; stdlib only,
so it always runs). A second store over the same file plays the second
writer of the concurrency contract and the reopened store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from session_manager.store import SessionStore
from session_manager.store.sqlite import SqliteSettings, SqliteStore
from session_manager.testing import StoreContract


class TestSqliteStore(StoreContract):
    _opened: list[Any]
    _path: str

    def open_store(self, tmp_path: Path) -> Iterator[SessionStore]:
        # Beside tmp_path, not in it: the contract checks tmp_path holds no stray files.
        self._path = str(tmp_path.parent / f"{tmp_path.name}-sqlite" / "store.db")
        store = SqliteStore(SqliteSettings(path=self._path))
        self._opened = [store]
        yield store
        for opened in self._opened:
            opened.close()

    def reopened(self, tmp_path: Path) -> list[SessionStore]:
        again = SqliteStore(SqliteSettings(path=self._path))
        self._opened.append(again)
        return [again]
