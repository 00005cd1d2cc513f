"""Forged cursors over both adapters: an id no store can hold is refused alike."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._wire import events as ev
from tests import pg_support
from tests.pg_support import text

pytestmark = pytest.mark.postgres


def forged(payload: dict[str, Any]) -> str:
    # json.dumps escapes the surrogate as \\udXXX, which json.loads turns back into one.
    return base64.b64encode(json.dumps(payload).encode("ascii")).decode("ascii")


@pytest.fixture(params=["fs", "postgres"])
def sm(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[session_manager.SessionManager]:
    if request.param == "fs":
        manager = session_manager.open(tmp_path / "data")
        yield manager
        manager.close()
        return
    with pg_support.schema() as name:
        manager = session_manager.open(store=pg_support.open_store(name))
        yield manager
        manager.close()


@pytest.mark.parametrize("call", [
    ("session::list", {"cursor": forged({"o": "updated_desc", "k": 1, "id": "s\ud800"})}),
    ("session::list", {"order": "created_asc", "cursor": forged({"o": "created_asc", "k": 1, "id": "\udfff"})}),
    ("session::messages", {"cursor": forged({"id": "e\ud800"})}),
])
def test_a_cursor_naming_an_id_with_an_unpaired_surrogate_is_invalid_cursor(
        sm: session_manager.SessionManager, call: tuple[str, dict[str, Any]]) -> None:
    # Prevents: the postgres adapter passing the id to the driver, which cannot encode it
    # (a UnicodeEncodeError traceback instead of a SessionError), and the fs adapter
    # answering a page after a position no stored id can name.
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    sm.call("session::append", {"session_id": sid, "entry_id": "e1", "message": text("one")})
    seen: list[Any] = []
    for fid in ev.EVENT_FUNCTIONS:
        sm.observe({"function_id": fid}, seen.append)
    function_id, payload = call
    if function_id == "session::messages":
        payload = {"session_id": sid, **payload}
    with pytest.raises(session_manager.SessionError) as raised:
        sm.call(function_id, payload)
    assert raised.value.code == "session/invalid_cursor" and "cursor" in str(raised.value)
    assert seen == []
    # Nothing changed, and the store still answers.
    assert [m["session_id"] for m in sm.call("session::list", {})["sessions"]] == [sid]
    assert [m["entry_id"] for m in sm.call("session::messages", {"session_id": sid})["messages"]] == ["e1"]
