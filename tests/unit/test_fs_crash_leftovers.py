"""What a writer SIGKILLed mid-rewrite leaves beside the logs, and what the
next owner does with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import session_manager


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def _texts(sm: Any, session_id: str) -> list[str]:
    got = sm.call("session::messages", {"session_id": session_id})
    return [m["message"]["content"][0]["text"] for m in got["messages"]]


def test_the_next_owner_removes_rewrite_temps_a_killed_writer_left(tmp_path: Path) -> None:
    # Prevents: a compaction temp (<log>.compact) left by a writer killed mid-rewrite staying in the
    # data_dir for good (as large as the session's live state; forever once the session is deleted,
    # since nothing but a later rewrite of the same log ever truncates it).
    # The state is built as the kill leaves it (the temp is written before the rename; a SIGKILL
    # between the two leaves both files): the harness that found it killed real writers at random.
    where = tmp_path / "data"
    with session_manager.open(where) as sm:
        sm.call("session::ensure", {"session_id": "s"})
        for text in ("one", "two"):
            sm.call("session::append", {"session_id": "s", "message": _user(text)})
    log = where / "s.jsonl"
    kept = log.read_bytes()
    (where / "s.jsonl.compact").write_bytes(kept[: len(kept) // 2])  # a rewrite cut short
    (where / "gone.jsonl.compact").write_bytes(kept)  # its session was deleted after the kill
    other = where / "notes.compact"  # not a log's temp: not the store's to remove
    other.write_bytes(b"x")

    with session_manager.open(where, read_only=True) as ro:  # inspection removes nothing
        assert _texts(ro, "s") == ["one", "two"]
    assert (where / "s.jsonl.compact").exists() and (where / "gone.jsonl.compact").exists()

    with session_manager.open(where) as sm:
        assert not (where / "s.jsonl.compact").exists()
        assert not (where / "gone.jsonl.compact").exists()
        assert other.read_bytes() == b"x"
        assert log.read_bytes() == kept  # the log itself is untouched by the clean-up
        assert _texts(sm, "s") == ["one", "two"]
        assert [m["session_id"] for m in sm.call("session::list", {})["sessions"]] == ["s"]
        sm.call("session::append", {"session_id": "s", "message": _user("three")})
    with session_manager.open(where) as again:
        assert _texts(again, "s") == ["one", "two", "three"]
