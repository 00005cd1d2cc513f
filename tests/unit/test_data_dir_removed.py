"""Issue 25 item 2: a data_dir removed (``rm -rf``) or replaced under a running fs store. The
store notices its directory (its lock file) is no longer the one it locked, refuses every write
with ``session/storage`` naming it, and never acknowledges what it cannot find again."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import session_manager
from session_manager.errors import STORAGE, SessionError
from session_manager.store.fs import _lock


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


def test_data_dir_renamed_away_is_refused_once_its_path_is_looked_up_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the per-commit check (the held lock file's link count, no path lookup) never
    # noticing a data_dir renamed away and created again, which keeps every link count: the lock
    # file's path is looked up again at most FULL_CHECK_SECONDS after the last look, and from then
    # on every write is refused. What was acknowledged before is in the moved directory, not lost.
    now = [1000.0]
    monkeypatch.setattr(_lock, "time", SimpleNamespace(monotonic=lambda: now[0]))
    where, moved = tmp_path / "d", tmp_path / "moved"
    sm = session_manager.open(where)
    sid = sm.call("session::create", {"title": "t"})["session_id"]  # its write looks the path up
    before = [m["entry_id"] for m in sm.call("session::messages", {"session_id": sid})["messages"]]
    where.rename(moved)
    where.mkdir()
    inside = sm.call("session::append", {"session_id": sid, "message": user("within the period")})["entry_id"]
    now[0] += _lock.FULL_CHECK_SECONDS
    fired = _fired(sm)
    _every_write_refused(sm, where, sid)  # (named as it was opened)
    assert fired == []
    sm.close()
    assert list(where.iterdir()) == []  # nothing written into the new directory at that path
    with session_manager.open(moved) as again:
        # (Its prefix: the refused append's line went in before the check that refused it, as it
        # always has; a removed data_dir loses it with the file, a moved one still holds it.)
        ids = [m["entry_id"] for m in again.call("session::messages", {"session_id": sid})["messages"]]
        assert ids[:len(before) + 1] == [*before, inside]


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


def _every_mutation(sm: session_manager.SessionManager, sid: str) -> list[tuple[str, dict[str, Any]]]:
    """One call of each mutating function on ``sid`` (which has two entries and an attachment)."""
    entries = [m["entry_id"] for m in sm.call("session::messages", {"session_id": sid})["messages"]]
    attachment = sm.call("session::list-attachments", {"session_id": sid})["attachments"][0]["attachment_id"]
    return [
        ("session::append", {"session_id": sid, "message": user("lost?")}),
        ("session::append-many", {"session_id": sid, "messages": [user("m1"), user("m2")]}),
        ("session::create", {"title": "new"}),
        ("session::ensure", {"session_id": "s-ensured", "title": "e"}),
        ("session::set-meta", {"session_id": sid, "title": "renamed"}),
        ("session::set-status", {"session_id": sid, "status": "working"}),
        ("session::set-draft", {"session_id": sid, "draft": "d"}),
        ("session::update-message", {"session_id": sid, "entry_id": entries[1],
                                     "content": [{"type": "text", "text": "edited"}]}),
        ("session::fork", {"session_id": sid, "entry_id": entries[0]}),
        ("session::set-active-leaf", {"session_id": sid, "entry_id": entries[0]}),
        ("session::put-attachment", {"session_id": sid, "name": "b.txt", "mime": "text/plain",
                                     "data": base64.b64encode(b"more").decode()}),
        ("session::delete-attachment", {"session_id": sid, "attachment_id": attachment}),
        ("session::delete-tree", {"session_id": sid}),
        ("session::purge", {"metadata": {"k": "v"}}),
        ("session::delete", {"session_id": sid}),
    ]


def _stored(where: Path, cache_bytes: int | None = None) -> tuple[session_manager.SessionManager, str]:
    sm = session_manager.open(where) if cache_bytes is None else session_manager.open(where, cache_bytes=cache_bytes)
    sid = sm.call("session::create", {"title": "t", "metadata": {"k": "v"}})["session_id"]
    sm.call("session::append-many", {"session_id": sid, "messages": [user("one"), user("two")]})
    sm.call("session::put-attachment", {"session_id": sid, "name": "a.txt", "mime": "text/plain",
                                        "data": base64.b64encode(b"bytes").decode()})
    return sm, sid


@pytest.mark.parametrize("recreated", [False, True])
def test_data_dir_removed_refuses_writes_to_sessions_the_store_holds_no_state_of(tmp_path: Path,
                                                                                recreated: bool) -> None:
    # Prevents: with its session not in memory (cache_bytes=0), a write to a removed data_dir
    # answered session/not_found (set-meta, fork, put-attachment ...) or deleted: false, and a
    # tree delete or purge listed the (new, empty) directory and answered "nothing deleted", or
    # failed with "read data_dir" naming no directory: every write is refused naming data_dir.
    where = tmp_path / "d"
    sm, sid = _stored(where, cache_bytes=0)
    calls = _every_mutation(sm, sid)
    fired = _fired(sm)
    shutil.rmtree(where)
    if recreated:
        where.mkdir()
    for function_id, payload in calls:
        _refused(sm, where, function_id, payload)
    assert fired == []
    sm.close()


def test_data_dir_recreated_gets_no_file_from_the_store_that_lost_it(tmp_path: Path) -> None:
    # Prevents: a refused write still creating its (empty) log by path in the directory created
    # again (another owner's files), and a first query there writing a search index (.search).
    where = tmp_path / "d"
    sm, sid = _stored(where)
    calls = _every_mutation(sm, sid)
    shutil.rmtree(where)
    where.mkdir()
    for function_id, payload in calls:
        _refused(sm, where, function_id, payload)
    _refused(sm, where, "session::search", {"query": "one"})
    sm.close()
    assert sorted(p.name for p in where.rglob("*")) == []


@pytest.mark.parametrize("replaced", [False, True])
def test_sqlite_database_file_removed_under_a_running_store_refuses_every_write(tmp_path: Path,
                                                                                replaced: bool) -> None:
    # Prevents: the sqlite adapter's database file removed (or removed and created again by a
    # second open) under a running store: its kept connections committed into the unlinked file
    # and acknowledged appends nobody could read again.
    db = tmp_path / "s.db"
    sm = session_manager.open(f"sqlite:///{db}")
    sid = sm.call("session::create", {"title": "t", "metadata": {"k": "v"}})["session_id"]
    sm.call("session::append-many", {"session_id": sid, "messages": [user("one"), user("two")]})
    sm.call("session::put-attachment", {"session_id": sid, "name": "a.txt", "mime": "text/plain",
                                        "data": base64.b64encode(b"bytes").decode()})
    calls = _every_mutation(sm, sid)
    fired = _fired(sm)
    for path in tmp_path.iterdir():
        path.unlink()
    second = session_manager.open(f"sqlite:///{db}") if replaced else None
    for function_id, payload in calls:
        _refused(sm, db, function_id, payload)
    assert fired == []
    sm.close()
    if second is not None:
        assert second.call("session::list", {})["sessions"] == []
        second.close()
    else:
        assert list(tmp_path.iterdir()) == []
