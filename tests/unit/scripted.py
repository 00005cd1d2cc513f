"""One scripted session touching every mutation, with deterministic ids and
clock: the on-disk bytes pin and the response/event model checks run it."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import session_manager
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds
from session_manager.store.fs._lock import LOCK_NAME

PNG = base64.b64encode(b"\x89PNG fake bytes").decode()


def text(t: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": t}]


Call = tuple[str, Any, Any, list[Any], list[str]]


def run(data_dir: Path) -> list[Call]:
    """Runs the script; per call ``(function_id, payload, response, event payloads,
    the event function of each)``."""
    clock = ManualClock(1_000)
    calls: list[Call] = []
    with session_manager.open(data_dir, ids=SequentialIds(), clock=clock) as sm:
        events: list[tuple[str, Any]] = []
        for fid in session_manager.EVENT_FUNCTIONS:
            sm.observe({"function_id": fid}, lambda event, fid=fid: events.append((fid, event)))

        def call(fid: str, payload: dict[str, Any]) -> Any:
            clock.advance(5)
            events.clear()
            out = sm.call(fid, payload)
            calls.append((fid, payload, out, [e for _, e in events], [f for f, _ in events]))
            return out

        sid = call("session::create", {"title": "Weather", "metadata": {"owner": "u_1", "n": 3, "f": 1.5}})[
            "session_id"]
        call("session::ensure", {"session_id": "chat/ü 1", "description": "caller-chosen id"})
        att = call("session::put-attachment", {"session_id": sid, "name": "p.png", "mime": "image/png",
                                               "data": PNG})["attachment"]["attachment_id"]
        first = call("session::append", {"session_id": sid, "origin": {"via": "ui"}, "message": {
            "role": "user", "timestamp": 7, "content": [
                {"type": "text", "text": "Rain?"},
                {"type": "image", "mime": "image/png", "data": PNG, "attachment_id": att}]}})["entry_id"]
        reply = call("session::append", {"session_id": sid, "message": {
            "role": "assistant", "timestamp": 8, "stop_reason": "function_call", "model": "m", "provider": "p",
            "usage": {"input": 3, "output": 4, "cost_usd": 0.25},
            "content": [{"type": "thinking", "text": "hmm"},
                        {"type": "function_call", "id": "c1", "function_id": "weather::get"}]}})["entry_id"]
        call("session::append", {"session_id": sid, "message": {
            "role": "function_result", "timestamp": 9, "function_call_id": "c1", "function_id": "weather::get",
            "content": text("wet")}})
        call("session::append", {"session_id": sid, "custom": {"custom_type": "marker"}})
        call("session::append", {"session_id": sid, "entry_id": "e_own", "custom": {"custom_type": "compaction",
                                                                                     "data": {"n": 1}}})
        call("session::update-message", {"session_id": sid, "entry_id": reply, "content": text("Yes, rain."),
                                         "usage": {"input": 3, "output": 9}})
        call("session::set-status", {"session_id": sid, "status": "working", "reason": "thinking"})
        call("session::set-meta", {"session_id": sid, "description": "forecast chat", "metadata": {"owner": "u_2"}})
        call("session::set-active-leaf", {"session_id": sid, "entry_id": first})
        call("session::append-many", {"session_id": sid, "messages": [
            {"role": "user", "timestamp": 10, "content": text("And tomorrow?")},
            {"role": "custom", "timestamp": 11, "custom_type": "note", "content": text("n"), "details": None}]})
        call("session::set-draft", {"session_id": sid, "draft": "half a", "attachment_ids": [att]})
        call("session::set-status", {"session_id": sid, "status": "idle"})
        call("session::fork", {"session_id": sid, "entry_id": reply, "title": "branch"})
        call("session::get", {"session_id": sid})
        call("session::list", {"limit": 1})
        call("session::messages", {"session_id": sid, "include_custom": True})
        call("session::messages-tail", {"session_id": sid})
        call("session::messages-range", {"session_id": sid, "entry_ids": [first]})
        call("session::get-message", {"session_id": sid, "entry_id": first, "include_image_data": False})
        call("session::get-attachment", {"session_id": sid, "attachment_id": att, "include_data": False})
        call("session::list-attachments", {"session_id": sid})
        spare = call("session::put-attachment", {"session_id": "s_002", "name": "x", "mime": "",
                                                 "data": ""})["attachment"]["attachment_id"]
        call("session::delete-attachment", {"session_id": "s_002", "attachment_id": spare})
        call("session::ensure", {"session_id": "gone", "title": "short-lived"})
        call("session::delete", {"session_id": "gone"})
    return calls


def _readable(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()


def data_dir_bytes(data_dir: Path) -> dict[str, str]:
    """Every file under ``data_dir``, by relative path: its UTF-8 text, or base64 of other bytes.
    The owner's lock file is left out: it holds the pid of whoever owns the directory, no session data;
    so are the ``.index`` sidecars: a cache that names inode numbers, not data
    (tests/property/test_index_sidecar.py pins what they may and may not do)."""
    return {str(p.relative_to(data_dir)): _readable(p.read_bytes())
            for p in sorted(data_dir.rglob("*"))
            if p.is_file() and p.name != LOCK_NAME and ".index" not in p.relative_to(data_dir).parts}
