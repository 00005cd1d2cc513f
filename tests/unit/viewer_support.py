"""Helpers of the viewer tests: a real uvicorn server on a free loopback port, sample sessions,
and headless Chromium (Debian's, driven by Playwright; never a downloaded browser)."""

from __future__ import annotations

import base64
import os
import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import session_manager

CHROMIUM = os.environ.get("SESSION_MANAGER_CHROMIUM", "/usr/bin/chromium")
REQUIRED = os.environ.get("SESSION_MANAGER_REQUIRE_BROWSER") == "1"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync"]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 0}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks), "model": "demo-model", "provider": "demo",
            "stop_reason": "end", "timestamp": 0}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def _png(width: int = 180, height: int = 60) -> str:
    """A small gradient PNG (base64), made here: an image block shown inline."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = b"".join(b"\0" + bytes(c for x in range(width) for c in (40 + x % 200, 110 + y, 220 - x // 2))
                    for y in range(height))
    raw = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    return base64.b64encode(raw).decode()


PNG = _png()


def branched_session(sm: session_manager.SessionManager) -> dict[str, str]:
    """A session whose second turn was answered twice (the first answer is the alternative), with
    thinking, a function call and its result, an image, and a fork of it."""
    sid = sm.call("session::create", {"title": "Weather in Paris", "description": "a branched demo",
                                       "metadata": {"user": "u_1"}})["session_id"]
    q = sm.call("session::append", {"session_id": sid, "message": user("Will it rain in Paris tomorrow?")})["entry_id"]
    alt = sm.call("session::append", {"session_id": sid, "message": assistant(
        text("Probably not; the first answer."))})["entry_id"]
    main = sm.call("session::append", {"session_id": sid, "parent_id": q, "message": assistant(
        {"type": "thinking", "text": "I should call the weather function."},
        text("Let me check the forecast."),
        {"type": "function_call", "id": "call_1", "function_id": "weather::forecast",
         "arguments": {"city": "Paris", "days": 1}})})["entry_id"]
    res = sm.call("session::append", {"session_id": sid, "message": {
        "role": "function_result", "function_call_id": "call_1", "function_id": "weather::forecast",
        "content": [text("rain: 80%, 14°C")], "timestamp": 0}, "origin": {"worker": "weather"}})["entry_id"]
    final = sm.call("session::append", {"session_id": sid, "message": assistant(
        text("Yes: an 80% chance of rain. Take an umbrella."),
        {"type": "image", "mime": "image/png", "data": PNG})})["entry_id"]
    fork = sm.call("session::fork", {"session_id": sid, "entry_id": q, "title": "Paris, take two"})["session_id"]
    return {"sid": sid, "question": q, "alternative": alt, "main": main, "result": res, "final": final,
            "fork": fork}


@contextmanager
def running(sm: session_manager.SessionManager, *, token: str | None = None) -> Iterator[str]:
    """The viewer over ``sm`` on 127.0.0.1 (a free port); yields its base URL."""
    from session_manager.viewer.app import server as viewer_server

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = viewer_server(sm, token=token)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the viewer did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()


def need_browser() -> None:
    """Skip (or, with SESSION_MANAGER_REQUIRE_BROWSER=1 as in CI, fail) without Chromium and Playwright."""
    reason = None
    if not Path(CHROMIUM).exists():
        reason = f"no Chromium at {CHROMIUM} (apt-get install chromium; or set SESSION_MANAGER_CHROMIUM)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "Playwright for Python is not installed (pip install -e '.[test]')"
    if reason is None:
        return
    if REQUIRED:
        pytest.fail(f"SESSION_MANAGER_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


def artifacts_dir(tmp_path: Path) -> Path:
    """Where screenshots go: $SESSION_MANAGER_ARTIFACTS (CI keeps it), else the test's tmp dir."""
    where = Path(os.environ.get("SESSION_MANAGER_ARTIFACTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where
