"""The viewer over the sqlite adapter: ``data serve sqlite:///…`` opens the database read-only
(it writes nothing: no reader row, no search catch-up, no migration), and another process's
mutations reach the SSE stream through the read-only store's state watch (``store/sqlite/watch.py``):
every change once, in order per session, ending at the state that process left.

Regression: a viewer over sqlite that showed nothing live, lost or doubled another process's
changes on their way to the page, or wrote the database it only shows."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import session_manager
from session_manager._cli.data.opening import open_for
from tests.unit.test_viewer_http import _listen
from tests.unit.viewer_support import running

WRITER = """
import json, sys, session_manager
from session_manager._wire.events import EVENT_FUNCTIONS

def msg(role, t):
    return {"role": role, "content": [{"type": "text", "text": t}], "timestamp": 0}

seen = []
with session_manager.open(sys.argv[1]) as sm:
    for fid in EVENT_FUNCTIONS:
        sm.observe({"function_id": fid}, lambda ev, fid=fid: seen.append([fid, ev]))
    if sys.argv[2] == "burst":
        a = sm.call("session::create", {"title": "a"})["session_id"]
        b = sm.call("session::create", {"title": "b", "metadata": {"k": 1}})["session_id"]
        for i in range(5):  # a burst interleaved over both sessions, no pause
            sm.call("session::append", {"session_id": a, "message": msg("user", f"a{i}")})
            sm.call("session::append", {"session_id": b, "message": msg("user", f"b{i}")})
        sm.call("session::set-status", {"session_id": a, "status": "working"})
        sm.call("session::set-meta", {"session_id": b, "title": "b2"})
    else:
        sm.call("session::delete", {"session_id": sys.argv[2]})
print(json.dumps(seen))
"""


def _write(uri: str, what: str) -> list[tuple[str, Any]]:
    """Run the writer in another process; the events its own in-process observers got."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(WRITER), uri, what], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return [(f, ev) for f, ev in json.loads(done.stdout)]


def _drain(got: Any, quiet_s: float = 1.5) -> list[tuple[str, Any]]:
    """Every event that arrives until none has for ``quiet_s`` (more than many polls)."""
    import queue

    out: list[tuple[str, Any]] = [got.get(timeout=30)]
    while True:
        try:
            out.append(got.get(timeout=quiet_s))
        except queue.Empty:
            return out


def test_another_processs_burst_reaches_the_stream_whole_and_in_order(tmp_path: Path) -> None:
    """A read-only store follows states, not the outbox (it may not register as a reader, and
    writers put no row in the outbox for a follower that is not registered): a burst arrives as
    the changes it saw, each once, ending at the writer's final state; the appended messages
    exactly as the writer's own observers got them, in order."""
    uri = f"sqlite:///{tmp_path / 'sessions.db'}"
    with session_manager.open(uri):
        pass  # the database exists (a read must not create one)
    with open_for(uri, writable=False) as viewer_sm, running(viewer_sm) as base:
        assert viewer_sm.service.store.read_only
        got, stop = _listen(base, "/api/events")
        expected = _write(uri, "burst")
        assert len(expected) == 2 + 10 + 2  # created x2, added x10, status, meta
        arrived = _drain(got)
        assert len(arrived) == len({json.dumps(x, sort_keys=True) for x in arrived})  # nothing twice
        a, b = expected[0][1]["session_id"], expected[1][1]["session_id"]
        for sid in (a, b):
            mine = [x for x in arrived if x[1]["session_id"] == sid]
            assert mine[0][0] == "session::on-created"
            assert [x for x in mine if x[0] == "session::on-message-added"] == \
                [x for x in expected if x[1]["session_id"] == sid and x[0] == "session::on-message-added"]
        # The final state, said by the last event that carries it (the creation, if the watch saw it late).
        status = [x[1]["status"] for x in arrived
                  if x[1]["session_id"] == a and x[0] in ("session::on-created", "session::on-status-changed")]
        assert status[-1] == "working"
        titles = [x[1]["title"] for x in arrived
                  if x[1]["session_id"] == b and x[0] in ("session::on-created", "session::on-meta-updated")]
        assert titles[-1] == "b2"
        # A delete: its one event (stamped when the watch noticed it).
        deleted = _write(uri, b)
        assert [f for f, _ in deleted] == ["session::on-deleted"]
        (fid, event), = _drain(got)
        assert fid == "session::on-deleted"
        assert {k: v for k, v in event.items() if k != "timestamp"} == \
            {k: v for k, v in deleted[0][1].items() if k != "timestamp"}
        stop.set()


def test_the_viewer_over_sqlite_makes_no_write_call(tmp_path: Path, monkeypatch: Any) -> None:
    """Regression: a page or API route that mutates: every route, the search box and the event
    stream run with the store's write methods and every mutating function refused. (The store is
    read-only besides, and the file is left byte for byte as it was:
    test_read_only_databases.py::test_the_viewer_over_sqlite_writes_nothing_beside_a_live_writer.)"""
    import httpx

    from session_manager._hosts.surface import BY_ID
    from tests.unit.viewer_support import branched_session

    uri = f"sqlite:///{tmp_path / 'sessions.db'}"
    with session_manager.open(uri) as sm:
        ids = branched_session(sm)
    with open_for(uri, writable=False) as sm:
        store = sm.service.store
        assert store.read_only
        writes: list[str] = []
        for name in ("commit", "delete_session", "put_attachment", "delete_attachment"):
            monkeypatch.setattr(store, name, lambda *a, name=name, **k: writes.append(name))
        real_call = sm.call

        def call(function_id: str, payload: Any = None) -> Any:
            assert not BY_ID[function_id].mutates, function_id
            return real_call(function_id, payload)

        monkeypatch.setattr(sm, "call", call)
        with running(sm) as base, httpx.Client(base_url=base) as c:
            _events, stop = _listen(base, "/api/events")
            for path in ("/", "/?q=paris", "/?status=idle&meta=user=u_1", f"/sessions/{ids['sid']}",
                         f"/sessions/{ids['fork']}", "/api/sessions", f"/api/sessions/{ids['sid']}",
                         "/sessions/s_nope"):
                assert c.get(path).status_code in (200, 404), path
            assert "Weather in Paris" in c.get("/").text
            stop.set()
        assert writes == []
