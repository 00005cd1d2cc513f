"""``session::delete-tree`` killed mid-way (SIGKILL of a real process) leaves no
child whose parent is gone, and re-running it finishes the job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import session_manager

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")

# The child process deletes the tree and, after `stop_after` sessions are deleted, says so and
# stops there (asleep) so the parent kills it between two deletions of one call.
CHILD = textwrap.dedent("""
    import sys, time
    import session_manager
    from session_manager.store.fs import FsStore

    data_dir, root, stop_after = sys.argv[1], sys.argv[2], int(sys.argv[3])
    real = FsStore.delete_session
    done = []

    def delete_then_maybe_stall(self, session_id):
        real(self, session_id)
        done.append(session_id)
        print("deleted", session_id, flush=True)
        if len(done) == stop_after:
            print("stalled", flush=True)
            time.sleep(600)

    FsStore.delete_session = delete_then_maybe_stall
    sm = session_manager.open(data_dir)
    sm.call("session::delete-tree", {"session_id": root})
    print("finished", flush=True)
""")


def _orphans(sm: session_manager.SessionManager) -> list[str]:
    metas = sm.call("session::list", {"limit": 500})["sessions"]
    ids = {m["session_id"] for m in metas}
    return [m["session_id"] for m in metas
            if (p := (m.get("metadata") or {}).get("parent_session_id")) is not None and p not in ids
            and p.startswith("s_") and m["title"] != "unrelated"]


@pytest.mark.parametrize("stop_after", [1, 3, 5])
def test_a_killed_delete_tree_leaves_no_orphan_and_a_rerun_finishes(tmp_path: Path, stop_after: int) -> None:
    # Prevents: a tree delete that removes a parent before its children (a crash then leaves
    # sub-agent sessions pointing at nothing, unreachable by a re-run), or a re-run that stops
    # early, deletes the unrelated session, or fires no events for what it finishes.
    data_dir = tmp_path / "d"
    with session_manager.open(data_dir) as sm:
        def make(parent: str | None, title: str) -> str:
            metadata: dict[str, Any] = {"parent_session_id": parent} if parent else {"owner": "A"}
            sid: str = sm.call("session::create", {"title": title, "metadata": metadata})["session_id"]
            sm.call("session::append", {"session_id": sid, "message": {
                "role": "user", "content": [{"type": "text", "text": title}], "timestamp": 1}})
            return sid
        root = make(None, "root")
        a, b = make(root, "a"), make(root, "b")
        tree = {root, a, b, make(a, "a1"), make(a, "a2"), make(b, "b1")}
        unrelated = make("s_elsewhere", "unrelated")
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(data_dir), root, str(stop_after)],
                             stdout=subprocess.PIPE, text=True, cwd=str(Path(__file__).parents[2]))
    try:
        assert child.stdout is not None
        deleted_before = []
        for line in child.stdout:
            if line.startswith("deleted "):
                deleted_before.append(line.split()[1])
            if line.strip() in ("stalled", "finished"):
                assert line.strip() == "stalled"
                break
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(30)
    assert child.returncode == -signal.SIGKILL and len(deleted_before) == stop_after

    with session_manager.open(data_dir) as sm:
        assert _orphans(sm) == []  # every survivor's parent is still there
        left = {m["session_id"] for m in sm.call("session::list", {"limit": 500})["sessions"]}
        assert left == (tree - set(deleted_before)) | {unrelated}
        events: list[str] = []
        sm.observe({"function_id": "session::on-deleted"}, lambda p: events.append(p["session_id"]))
        out = sm.call("session::delete-tree", {"session_id": root})
        assert set(out["deleted"]) == tree - set(deleted_before) and out["deleted"][-1] == root
        assert events == out["deleted"]
        assert {m["session_id"] for m in sm.call("session::list", {})["sessions"]} == {unrelated}
