"""Issue 25 item 2: a data_dir removed (``rm -rf``) or replaced under a running fs store. The
store notices its directory (its lock file) is no longer the one it locked, refuses every write
with ``session/storage`` naming it, and never acknowledges what it cannot find again."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.errors import STORAGE, SessionError


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 0}


def _fired(sm: session_manager.SessionManager) -> list[str]:
    fired: list[str] = []
    for fid in session_manager.EVENT_FUNCTIONS:
        sm.observe({"function_id": fid}, lambda _e, fid=fid: fired.append(fid))
    return fired


def _refused(sm: session_manager.SessionManager, where: Path, function_id: str, payload: dict[str, Any]) -> None:
    with pytest.raises(SessionError) as caught:
        sm.call(function_id, payload)
    assert caught.value.code == STORAGE, caught.value
    assert str(where) in caught.value.detail, caught.value.detail


def _every_write_refused(sm: session_manager.SessionManager, where: Path, sid: str) -> None:
    _refused(sm, where, "session::append", {"session_id": sid, "message": user("lost?")})
    _refused(sm, where, "session::create", {"title": "new"})
    _refused(sm, where, "session::set-meta", {"session_id": sid, "title": "renamed"})
    _refused(sm, where, "session::put-attachment", {"session_id": sid, "name": "a.txt", "mime": "text/plain",
                                                    "data": base64.b64encode(b"bytes").decode()})
    _refused(sm, where, "session::delete", {"session_id": sid})


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_data_dir_removed_under_a_running_store_refuses_every_write(tmp_path: Path, durability: str) -> None:
    # Prevents: after `rm -rf data_dir` an append to an open session was acknowledged (through the
    # kept descriptor of a file nobody can find) and gone after reopen.
    where = tmp_path / "d"
    sm = session_manager.open(where, durability=durability)  # type: ignore[arg-type]
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    sm.call("session::append", {"session_id": sid, "message": user("kept")})
    fired = _fired(sm)
    shutil.rmtree(where)
    _every_write_refused(sm, where, sid)
    assert fired == []
    sm.close()
    assert not where.exists()  # nothing was written back into a removed data_dir, not even at close


def test_data_dir_recreated_under_a_running_store_is_not_written_by_it(tmp_path: Path) -> None:
    # Prevents: after the data_dir was removed and created again, a second writable open succeeded
    # while the first store still acknowledged appends (two writers; the first one's writes lost).
    where = tmp_path / "d"
    first = session_manager.open(where)
    sid = first.call("session::create", {"title": "t"})["session_id"]
    first.call("session::append", {"session_id": sid, "message": user("before")})
    shutil.rmtree(where)
    where.mkdir()
    second = session_manager.open(where)  # may succeed: the first store must write nothing more
    other = second.call("session::create", {"title": "second's"})["session_id"]
    fired = _fired(first)
    _every_write_refused(first, where, sid)
    assert fired == []
    first.close()
    assert [m["session_id"] for m in second.call("session::list", {})["sessions"]] == [other]
    second.close()
    with session_manager.open(where) as again:  # after a restart: only the second owner's session
        assert [m["session_id"] for m in again.call("session::list", {})["sessions"]] == [other]
        assert again.call("session::get", {"session_id": sid}) is None


def test_lock_file_replaced_under_a_running_store_refuses_every_write(tmp_path: Path) -> None:
    # Prevents: only the directory being checked: a lock file removed (and so free for another
    # owner to lock a new one of the same name) must stop the store's writes too.
    where = tmp_path / "d"
    sm = session_manager.open(where)
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    (where / ".session-manager.lock").unlink()
    _every_write_refused(sm, where, sid)
    # Reads still answer what was acknowledged before.
    assert sm.call("session::get", {"session_id": sid})["meta"]["title"] == "t"
    sm.close()
