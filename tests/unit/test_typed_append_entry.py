"""The typed append (``SessionManager._append_owned``, the LangGraph saver's path) builds its
custom entry as a dict literal, not through ``build[CustomEntry]``: held here to the builder, so
the stored entry is what ``session::append`` stores for the same custom entry, key for key and
in the same order (the bytes of the log line follow the dict's order)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._wire.models import CustomEntry
from session_manager._wire.shape import build


@pytest.mark.parametrize("parent_named", [False, True])
@pytest.mark.parametrize("data", [None, {"k": [1, "é", None]}])
def test_the_typed_append_stores_the_entry_the_builder_makes(tmp_path: Path, parent_named: bool, data: Any) -> None:
    # Prevents: the literal drifting from the model (a key added, dropped or reordered, a None
    # kept or left out otherwise than build[CustomEntry] does): another stored line than
    # session::append's for the same entry, and readers of the model's fields missing one.
    with session_manager.open(tmp_path / "d") as sm:
        sm.call("session::ensure", {"session_id": "s"})
        first = sm.call("session::append", {"session_id": "s", "custom": {"custom_type": "t", "data": 1}})
        parent = first["entry_id"] if parent_named else None
        entry_id = sm._append_owned("s", "t", data, parent)
        stored = sm.service.store.get_entry("s", entry_id)
        log = (tmp_path / "d").rglob("*.jsonl")
        lines = [line for path in log for line in path.read_text().splitlines() if entry_id in line]
    expected = build[CustomEntry](kind="custom", id=entry_id, parent_id=first["entry_id"],
                                  timestamp=stored["timestamp"], revision=0, origin=None, custom_type="t", data=data)
    assert stored == expected and list(stored) == list(expected)
    assert len(lines) == 1 and lines[0].index('"kind"') < lines[0].index('"id"') < lines[0].index('"parent_id"') \
        < lines[0].index('"timestamp"') < lines[0].index('"revision"') < lines[0].index('"custom_type"') \
        < lines[0].rindex('"data"')
