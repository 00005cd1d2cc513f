"""An append that names its parent: the active leaf needs no lookup (it is an entry
of the session), any other named parent is still looked up and refused when absent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.errors import PARENT_NOT_FOUND, SessionError
from tests import pg_support


@pytest.fixture(params=["fs", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def sm(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "fs":
        with session_manager.open(tmp_path / "d") as opened:
            yield opened
        return
    if request.param == "sqlite":
        with session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db") as opened:
            yield opened
        return
    with pg_support.schema() as name, session_manager.open(store=pg_support.open_store(name)) as opened:
        yield opened


def _custom(sm: Any, parent: str | None, entry_id: str | None = None) -> str:
    payload: dict[str, Any] = {"session_id": "s", "custom": {"custom_type": "t", "data": None}}
    if parent is not None:
        payload["parent_id"] = parent
    if entry_id is not None:
        payload["entry_id"] = entry_id
    return str(sm.call("session::append", payload)["entry_id"])


def test_naming_the_active_leaf_as_parent_reads_no_entry_and_other_parents_are_still_checked(
        sm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the parent check of an append naming the entry it follows (the LangGraph saver's
    # chain of checkpoints) costing an entry read (a query over a database), and the shortcut letting
    # a parent through that is not the leaf and does not exist.
    sm.call("session::ensure", {"session_id": "s"})
    first = _custom(sm, None)
    store = sm.service.store
    looked: list[str] = []
    real = store.entry_held

    def get_entry(session_id: str, entry_id: str) -> Any:
        looked.append(entry_id)
        return real(session_id, entry_id)

    monkeypatch.setattr(store, "entry_held", get_entry)
    second = _custom(sm, first)  # first is the active leaf
    assert looked == []
    assert real("s", second)["parent_id"] == first
    third = _custom(sm, first)  # a branch from first: not the leaf, looked up
    assert looked == [first]
    assert real("s", third)["parent_id"] == first
    with pytest.raises(SessionError) as refused:
        _custom(sm, "e_missing")
    assert refused.value.code == PARENT_NOT_FOUND
    assert looked[-1] == "e_missing"
