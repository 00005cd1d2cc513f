"""Review 21: a transcript read racing the session's delete by another instance answers the
session's absence (``session/not_found``) or the page it read, never ``session/storage``: a
concurrent delete is no fault of the store. The delete is made to land between the read's
leaf and its path's window (the store's ``path``, which reads lazily), on the warm read path
(nobody observes) and on the general one (an observer registered)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from tests.unit.store_openers import bare_opener


def user(t: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": t}], "timestamp": 1}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    with bare_opener(request.param, tmp_path) as opened:
        yield opened


@pytest.mark.parametrize("observed", [False, True], ids=["warm", "general"])
@pytest.mark.parametrize("function_id", ["session::messages-tail", "session::messages"])
def test_a_read_racing_a_delete_answers_not_found_or_the_page(opener: Any, function_id: str, observed: bool,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: sqlite answering session/storage ("session X changed while its transcript was
    # read") when another instance deleted the session between the read's leaf and its path's
    # window: the path's window came back empty and was taken for a store fault.
    reader_store, writer_store = opener(), opener()
    reader, writer = session_manager.open(store=reader_store), session_manager.open(store=writer_store)
    try:
        if observed:
            reader.observe({"function_id": session_manager.ON_CREATED}, lambda e: None)
        sid = writer.call("session::create", {"title": "t"})["session_id"]
        for i in range(6):
            writer.call("session::append", {"session_id": sid, "message": user(f"m{i}")})
        path = type(reader_store).path
        deleted: list[bool] = []

        def racing(self: Any, *args: Any, **kwargs: Any) -> Any:
            found = path(self, *args, **kwargs)
            if self is reader_store and not deleted:
                deleted.append(writer.call("session::delete", {"session_id": sid})["deleted"])
            return found

        monkeypatch.setattr(type(reader_store), "path", racing)
        request = {"session_id": sid, **({"limit": 3} if function_id == "session::messages-tail" else {})}
        try:
            answer = reader.call(function_id, request)
        except session_manager.SessionError as e:
            assert e.code == "session/not_found", str(e)
        else:  # the page as it was before the delete, whole
            texts = [m["message"]["content"][0]["text"] for m in answer["messages"]]
            assert texts == (["m3", "m4", "m5"] if function_id == "session::messages-tail" else
                             [f"m{i}" for i in range(6)])
        assert deleted == [True]
        monkeypatch.undo()
        with pytest.raises(session_manager.SessionError) as gone:
            reader.call(function_id, request)
        assert gone.value.code == "session/not_found"
    finally:
        reader.close()
        writer.close()
