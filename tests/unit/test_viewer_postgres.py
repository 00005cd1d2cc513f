"""The viewer over the postgres adapter: another instance's mutations reach the SSE stream through
LISTEN, every event once and in order per session (no coalescing: the outbox carries each one),
the viewer's store opened read-only as ``data serve`` opens it.
Needs a PostgreSQL server: skips, with the reason, without one (fails in CI)."""

from __future__ import annotations

import queue
import time
from typing import Any

import pytest

import session_manager
from session_manager._wire.events import EVENT_FUNCTIONS
from tests import pg_support
from tests.unit.test_viewer_http import _listen
from tests.unit.viewer_support import assistant, running, text, user

pytestmark = pytest.mark.postgres


def test_another_instances_burst_reaches_the_stream_whole_and_in_order() -> None:
    """Regression: events of another instance lost, doubled or reordered on their way to the page."""
    with pg_support.schema() as name, session_manager.open(store=pg_support.open_store(name)) as writer, \
            session_manager.open(store=pg_support.open_store(name, read_only=True), read_only=True) as viewer_sm, \
            running(viewer_sm) as base:
        own: queue.Queue[tuple[str, Any]] = queue.Queue()
        for fid in EVENT_FUNCTIONS:
            writer.observe({"function_id": fid}, lambda ev, fid=fid: own.put((fid, ev)))
        got, stop = _listen(base, "/api/events")
        sids = [writer.call("session::create", {"title": t})["session_id"] for t in ("a", "b")]
        replies = [writer.call("session::append", {"session_id": s, "message": assistant()})["entry_id"]
                   for s in sids]
        for i in range(10):  # interleaved streaming into both replies, no pause
            for sid, rid in zip(sids, replies, strict=True):
                writer.call("session::update-message", {"session_id": sid, "entry_id": rid,
                                                        "content": [text(f"part {i}")]})
        writer.call("session::append", {"session_id": sids[0], "message": user("thanks")})
        writer.call("session::delete", {"session_id": sids[1]})
        expected = []
        while not own.empty():
            expected.append(own.get_nowait())
        arrived = [got.get(timeout=20) for _ in expected]
        time.sleep(1.0)
        assert got.empty()  # nothing twice
        for sid in sids:  # per session: the very events, in the very order
            assert [x for x in arrived if x[1]["session_id"] == sid] == \
                    [x for x in expected if x[1]["session_id"] == sid]
        stop.set()
