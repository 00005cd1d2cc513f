"""The viewer over an engine: a main instance's sessions read through its store protocol and its
events relayed live (what ``data serve ws://…`` opens), on the in-process FakeEngine.

Regression: a viewer of a worker on an engine that showed nothing live, or could write."""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import session_manager
from session_manager._wire.events import EVENT_FUNCTIONS
from session_manager._worker.engine_view import EngineView
from session_manager.errors import SessionError
from session_manager.testing import FakeEngine, serve
from session_manager.viewer.app import create_app
from tests.unit.test_viewer_http import _listen
from tests.unit.viewer_support import assistant, running, text, user

MAIN_URL = "ws://main-engine:49134"


def test_engine_view_serves_the_mains_sessions_and_relays_its_events(tmp_path: Path) -> None:
    engine = FakeEngine()
    host = serve(engine, tmp_path / "main")
    app = engine.connection("app")
    seen: queue.Queue[tuple[str, Any]] = queue.Queue()  # what an application's observer on the engine gets
    for fid in EVENT_FUNCTIONS:
        target = f"app::seen::{fid}"
        app.register_function(target, lambda ev, fid=fid: seen.put((fid, {k: v for k, v in ev.items()
                                                                          if k != "_caller_worker_id"})))
        app.observe({"function_id": fid, "deliver": "input"}, target).ready(1)

    def call(fid: str, payload: dict[str, Any]) -> Any:
        return app.trigger({"function_id": fid, "payload": payload})

    before = call("session::create", {"title": "before"})["session_id"]
    host.flush()
    assert seen.get(timeout=10)[0] == "session::on-created"
    try:
        with session_manager.open(store=EngineView(engine.connection(), MAIN_URL, 700), read_only=True) as sm, \
                running(sm) as base:
            c = TestClient(create_app(sm), base_url="http://127.0.0.1:8765")
            assert c.get("/api/sessions").json() == call("session::list", {})
            got, stop = _listen(base, "/api/events")
            sid = call("session::create", {"title": "live"})["session_id"]
            rid = call("session::append", {"session_id": sid, "message": assistant()})["entry_id"]
            for i in range(5):
                call("session::update-message", {"session_id": sid, "entry_id": rid, "content": [text(f"t{i}")]})
            call("session::append", {"session_id": sid, "message": user("ok")})
            call("session::delete", {"session_id": before})
            host.flush()
            # created, added, 5 updated, added, deleted: as the application's observers got them
            expected = [seen.get(timeout=10) for _ in range(9)]
            assert [got.get(timeout=10) for _ in expected] == expected  # each once, in order
            time.sleep(0.5)
            assert seen.empty() and got.empty()
            body = c.get(f"/api/sessions/{sid}").json()
            assert body["meta"] == call("session::get", {"session_id": sid})["meta"]
            transcript = call("session::messages", {"session_id": sid})["messages"]
            assert [e["id"] for e in body["entries"]] == [m["entry_id"] for m in transcript]
            assert body["active_leaf"] == transcript[-1]["entry_id"] and transcript[0]["entry_id"] == rid
            assert "t4" in c.get(f"/sessions/{sid}").text
            with pytest.raises(SessionError, match="read-only"):
                sm.call("session::create", {"title": "no"})
            stop.set()
    finally:
        host.close()


def test_an_engine_url_is_read_only_and_an_unreachable_one_is_a_clear_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    from session_manager._cli.data.opening import DataDirError, open_for

    with pytest.raises(DataDirError, match="read-only"):
        open_for("ws://127.0.0.1:9", writable=True)
    done = subprocess.run([sys.executable, "-m", "session_manager", "data", "ls", "ws://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "session/storage" in done.stderr and "unreachable" in done.stderr and "Traceback" not in done.stderr
