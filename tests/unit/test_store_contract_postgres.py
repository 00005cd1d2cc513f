"""The storage contract over the postgres adapter (a private schema per test).

Skips, naming the reason, when no server answers (a failure under
``SESSION_MANAGER_REQUIRE_POSTGRES=1``, as on CI).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from session_manager.store import SessionStore
from session_manager.testing import StoreContract
from tests import pg_support

pytestmark = pytest.mark.postgres


class TestPostgresStore(StoreContract):
    _schema: str
    _opened: list[Any]

    def open_store(self, tmp_path: Path) -> Iterator[SessionStore]:
        with pg_support.schema() as name:
            self._schema = name
            store = pg_support.open_store(name)
            self._opened = [store]
            yield store
            for opened in self._opened:
                opened.close()

    def reopened(self, tmp_path: Path) -> list[SessionStore]:
        # A second instance over the same schema reads back what the first wrote.
        again = pg_support.open_store(self._schema)
        self._opened.append(again)
        return [again]
