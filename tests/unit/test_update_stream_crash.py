"""A streamed reply (update-message after update-message: the fast-encoded two-line
update commit, background rewrites of the small log that write no index) killed with
SIGKILL at a random instant: the reopen reads a revision at least the last
acknowledged one, at most the one in flight, with its own text and the meta of
that same commit (replay applies an update's lines together or not at all)."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import session_manager
from session_manager.store import FsStore
from tests.unit.index_views import oracle, view

pytestmark = pytest.mark.slow  # the slow lane (`pytest -m slow`): kills streaming writer processes in a loop

CHILD = textwrap.dedent("""
    import sys
    import session_manager
    sm = session_manager.open(sys.argv[1], durability=sys.argv[2])
    sid = "s_1"
    sm.call("session::ensure", {"session_id": sid, "title": "t"})
    got = sm.call("session::get-message", {"session_id": sid, "entry_id": "e_1"})
    if got is None:
        sm.call("session::append", {"session_id": sid, "entry_id": "e_1", "message": {
            "role": "assistant", "content": [{"type": "text", "text": "r0"}], "stop_reason": "end",
            "model": "m", "provider": "p", "timestamp": 1}})
        rev = 0
    else:
        rev = got["entry"]["revision"]
    print("start", rev, flush=True)
    while True:
        rev += 1
        r = sm.call("session::update-message", {"session_id": sid, "entry_id": "e_1",
                    "content": [{"type": "text", "text": f"r{rev} " + "x" * (rev % 997)}]})
        assert r == {"updated": True, "revision": rev}, r
        print(rev, flush=True)
""")


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_a_killed_stream_reads_back_a_whole_acknowledged_revision(tmp_path: Path, durability: str) -> None:
    # Prevents: the fast-encoded update commit replaying half (entry without its meta, or the meta
    # of another revision) after a kill mid-write, a kill around a background rewrite of the small
    # log (its index removed, none written) losing an acknowledged revision, or a stale index
    # being trusted on the reopen.
    where = tmp_path / "d"
    rng = random.Random(7)
    acked = 0
    for _ in range(4):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(where), durability],
                                 stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
        assert child.stdout is not None
        start = child.stdout.readline().split()
        assert start[0] == "start" and int(start[1]) >= acked
        want = rng.randint(150, 900)
        deadline = time.monotonic() + 20
        seen = 0
        while seen < want and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            seen += 1
            acked = int(line)
        child.send_signal(signal.SIGKILL)
        child.wait()
        for line in child.stdout:  # acknowledged before the kill, still in the pipe
            acked = int(line)
        store = FsStore(where)
        assert view(store, "s_1") == oracle(where / "s_1.jsonl", "s_1")
        store.close()
        with session_manager.open(where, read_only=True) as sm:
            entry = sm.call("session::get-message", {"session_id": "s_1", "entry_id": "e_1"})["entry"]
            meta = sm.call("session::get", {"session_id": "s_1"})["meta"]
        rev = entry["revision"]
        assert acked <= rev <= acked + 1  # nothing acknowledged lost; at most the one in flight
        assert entry["message"]["content"] == [{"type": "text", "text": f"r{rev} " + "x" * (rev % 997)}]
        assert meta["message_count"] == 1
        acked = rev
