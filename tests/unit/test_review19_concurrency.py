"""Review 19's attacks under real concurrency (threads) on the page memo's shapes over sqlite
(postgres, and the third pass's inlined append paths: test_review19_postgres.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._service import page_memo
from tests.unit.review19_support import readers_while_a_writer_appends


def test_sqlite_tail_readers_while_a_writer_appends_answer_a_fresh_page_exactly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a kept page (its shapes: compiled answers past PLAN_AFTER) answered for a version it
    # was not built from, or one thread's answer (or its change to it) showing in another's.
    shaped: list[int] = []
    real = page_memo._answer

    def answer(plan: Any) -> Any:
        shaped.append(1)
        return real(plan)

    monkeypatch.setattr(page_memo, "_answer", answer)
    uri = f"sqlite:///{tmp_path / 'c.db'}"
    with session_manager.open(uri) as sm, session_manager.open(uri) as fresh:
        assert readers_while_a_writer_appends(sm, fresh) > 0
    assert len(shaped) > 100  # (the attack reached the shapes)
