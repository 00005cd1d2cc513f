"""The data_dir's owner lock across ``fork()``: a child inherits the parent's
lock descriptor (the same open file description, so the same ``flock``) and
the store object with its kept log descriptors. The tests fork real children
(multiprocessing's ``fork`` context, as a pool of helpers would)."""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import SessionError
from tests.unit.test_fs_ownership import _files, _user

STORAGE = "session/storage"

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() only")


def _attempt(sm: Any, function: str, payload: dict[str, Any]) -> tuple[str, str]:
    try:
        sm.call(function, payload)
    except SessionError as e:
        return e.code, str(e)
    except BaseException as e:  # reported to the parent, which fails the test on it
        return "raised", f"{type(e).__name__}: {e}"
    return "ok", ""


def _inheriting_child(sm: Any, where: str, report: Connection, go: Connection) -> None:
    """Uses the store it inherited (every call, then close), then waits, alive,
    for the parent to try the directory again."""
    results = [
        _attempt(sm, "session::append", {"session_id": "a", "message": _user("from the child")}),
        _attempt(sm, "session::get", {"session_id": "a"}),
        _attempt(sm, "session::list", {}),
        _attempt(sm, "session::delete", {"session_id": "a"}),
    ]
    try:
        sm.close()
        results.append(("closed", ""))
    except BaseException as e:
        results.append(("raised", f"{type(e).__name__}: {e}"))
    try:
        session_manager.open(where).close()
        results.append(("ok", ""))
    except SessionError as e:
        results.append((e.code, str(e)))
    with session_manager.open(where, read_only=True) as ro:  # inspection is what a child may do
        got = ro.call("session::get", {"session_id": "a"})
        results.append(("read", "gone" if got is None else str(got["meta"]["message_count"])))
    report.send(results)
    go.recv()  # stay alive (holding whatever was inherited) until the parent has reopened


def test_a_forked_child_neither_writes_through_the_inherited_store_nor_keeps_the_lock(tmp_path: Path) -> None:
    # Prevents: a forked child appending, deleting and writing index sidecars through the store it
    # inherited (a second writer on the data_dir, unseen by the owner's cache), and the child's copy
    # of the lock descriptor keeping the data_dir locked after the owner closed (the owner's own
    # reopen refused as "already open by process <its own pid>", forever if the owner then died).
    where = tmp_path / "data"
    sm = session_manager.open(where)
    sm.call("session::ensure", {"session_id": "a"})
    sm.call("session::append", {"session_id": "a", "message": _user("one")})
    before = _files(where)
    ctx = multiprocessing.get_context("fork")
    report_r, report_w = ctx.Pipe(duplex=False)
    go_r, go_w = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_inheriting_child, args=(sm, str(where), report_w, go_r))
    child.start()
    try:
        assert report_r.poll(60), "the child did not report"
        results = report_r.recv()
        owner = f"by process {os.getpid()}"
        for code, text in results[:4]:  # every call through the inherited store is refused
            assert code == STORAGE and owner in text, results
        assert results[4] == ("closed", ""), results  # its close returns and writes nothing
        assert results[5][0] == STORAGE and f"already open for writing {owner}" in results[5][1], results
        assert results[6] == ("read", "1"), results
        assert _files(where) == before  # the child wrote nothing, not even an index
        # The owner goes on, unaffected, and its close frees the data_dir while the child lives.
        sm.call("session::append", {"session_id": "a", "message": _user("two")})
        sm.close()
        with session_manager.open(where) as again:
            got = again.call("session::messages", {"session_id": "a"})
            assert [m["message"]["content"][0]["text"] for m in got["messages"]] == ["one", "two"]
            assert again.call("session::get", {"session_id": "a"})["meta"]["message_count"] == 2
    finally:
        go_w.send(None)
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join(10)
    assert child.exitcode == 0
