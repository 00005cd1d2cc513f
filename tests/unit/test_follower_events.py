"""A read-only fs open delivers, to its observers, the events of what another process writes.

Regression: before, a read-only open (``data serve``'s view of a live writer's data_dir) saw new
state on each read but fired no event, so nothing watching it could update live."""

from __future__ import annotations

import queue
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import session_manager
from session_manager._wire.events import EVENT_FUNCTIONS

TEXT = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 0}
REPLY = {"role": "assistant", "content": [], "model": "m", "provider": "p", "stop_reason": "end", "timestamp": 0}


def _observe_all(sm: session_manager.SessionManager) -> queue.Queue[tuple[str, dict[str, Any]]]:
    got: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
    for fid in EVENT_FUNCTIONS:
        sm.observe({"function_id": fid}, lambda e, fid=fid: got.put((fid, e)))
    return got


def _drain(got: queue.Queue[tuple[str, dict[str, Any]]], until: str, timeout: float = 10) -> list[tuple[str, Any]]:
    out = []
    while True:
        item = got.get(timeout=timeout)
        out.append(item)
        if item[0] == until:
            return out


def test_read_only_open_delivers_a_writers_mutations_in_order(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with session_manager.open(data) as writer:
        old = writer.call("session::create", {"title": "before"})["session_id"]
        with session_manager.open(data, read_only=True) as reader:
            got = _observe_all(reader)
            own = _observe_all(writer)  # what an in-process observer of the writer gets
            sid = writer.call("session::create", {"title": "t", "metadata": {"u": 1}})["session_id"]
            first = _drain(got, "session::on-created")
            assert first == [own.get_nowait()]
            assert first[0][1]["title"] == "t"
            eid = writer.call("session::append", {"session_id": sid, "message": TEXT})["entry_id"]
            added = _drain(got, "session::on-message-added")
            assert added == [own.get_nowait()]
            assert [(f, e["entry_id"], e["message"]) for f, e in added] == [
                ("session::on-message-added", eid, TEXT)]
            rid = writer.call("session::append", {"session_id": sid, "message": REPLY})["entry_id"]
            assert _drain(got, "session::on-message-added") == [own.get_nowait()]
            writer.call("session::update-message", {"session_id": sid, "entry_id": rid,
                                                    "content": [{"type": "text", "text": "done"}]})
            updated = _drain(got, "session::on-message-updated")
            assert updated == [own.get_nowait()]  # (the request named no origin: None on both)
            assert [(e["entry_id"], e["revision"], e["message"]["content"]) for _, e in updated] == [
                (rid, 1, [{"type": "text", "text": "done"}])]
            writer.call("session::set-status", {"session_id": sid, "status": "done"})
            status = _drain(got, "session::on-status-changed")
            assert status == [own.get_nowait()]
            assert [(e["status"], e["previous_status"]) for _, e in status] == [("done", "idle")]
            writer.call("session::set-meta", {"session_id": sid, "title": "renamed"})
            meta = _drain(got, "session::on-meta-updated")
            assert meta == [own.get_nowait()]
            assert [e["title"] for _, e in meta] == ["renamed"]
            writer.call("session::delete", {"session_id": sid})
            gone = _drain(got, "session::on-deleted")
            assert [(e["session_id"], e["session_metadata"]) for _, e in gone] == [(sid, {"u": 1})]
            time.sleep(0.5)
            assert got.empty()  # nothing twice, nothing about the untouched session
    assert old


def test_another_process_streaming_is_seen_to_its_last_text(tmp_path: Path) -> None:
    """A real second process (the viewer's situation): its 20 updates reach the observer as
    on-message-updated events whose last carries the final text, revisions only growing."""
    data = tmp_path / "d"
    with session_manager.open(data) as writer:
        sid = writer.call("session::create", {"title": "s"})["session_id"]
        rid = writer.call("session::append", {"session_id": sid, "message": REPLY})["entry_id"]
    with session_manager.open(data, read_only=True) as reader:
        got = _observe_all(reader)  # (the baseline is taken as the first observer is added)
        script = textwrap.dedent(f"""
            import time, session_manager
            with session_manager.open({str(data)!r}) as sm:
                for i in range(1, 21):
                    sm.call("session::update-message", {{"session_id": {sid!r}, "entry_id": {rid!r},
                            "content": [{{"type": "text", "text": "word " * i}}]}})
                    time.sleep(0.02)
        """)
        subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
        revisions, last = [], None
        while last is None or last["revision"] < 20:
            fid, event = got.get(timeout=10)
            assert fid == "session::on-message-updated"
            revisions.append(event["revision"])
            last = event
        assert revisions == sorted(set(revisions))
        assert last["message"]["content"] == [{"type": "text", "text": "word " * 20}]


def test_a_session_deleted_and_made_again_between_two_polls_is_both_events() -> None:
    """Regression: a re-created session (same id, new created_at) read as a mere change of the old one."""
    from session_manager.store.fs._watch import _Seen, session_events

    old = {"session_id": "s", "title": "t", "description": "", "status": "idle", "created_at": 1,
           "updated_at": 1, "message_count": 0, "metadata": {"k": 1}}
    new = {**old, "created_at": 5, "updated_at": 5, "metadata": None}
    events = session_events("s", _Seen((1, 2, 3, 4), old, {"e_1": 0}), new, [], 9)
    assert [(e.function_id, e.payload) for e in events] == [
        ("session::on-deleted", {"session_id": "s", "timestamp": 9, "session_metadata": {"k": 1}}),
        ("session::on-created", {"session_id": "s", "title": "t", "description": "", "status": "idle",
                                 "created_at": 5})]
    assert session_events("s", None, None, [], 9) == []  # never seen, gone: nothing


def test_a_read_only_open_nobody_observes_runs_no_watch_thread(tmp_path: Path) -> None:
    """Regression: every read-only open (`data ls`, `data show`) paying for a polling thread."""
    import threading

    with session_manager.open(tmp_path / "d") as writer:
        writer.call("session::create", {"title": "t"})
    before = {t.ident for t in threading.enumerate()}
    with session_manager.open(tmp_path / "d", read_only=True) as reader:
        assert reader.call("session::list", {})["sessions"]
        assert [t.name for t in threading.enumerate() if t.ident not in before] == []
        got = _observe_all(reader)
        assert [t.name for t in threading.enumerate() if t.ident not in before] == ["session-manager-watch"]
    assert [t.name for t in threading.enumerate() if t.ident not in before] == []  # stopped at close
    assert got.empty()
