"""put-attachment at and past ``max_attachment_bytes``, whatever ``max_request_bytes`` is: an upload at
the cap is stored, one past it is ``session/attachment_too_large``; the request cap still bounds the rest."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._service.limits import MAX_ATTACHMENT_BYTES
from session_manager.errors import SessionError


def _observed(sm: Any) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    for fid in session_manager.EVENT_FUNCTIONS:
        sm.observe({"function_id": fid}, lambda event, fid=fid: events.append((fid, event)))
    return events


def _error(call: Callable[[], Any]) -> SessionError:
    with pytest.raises(SessionError) as caught:
        call()
    return caught.value


def _files(root: Path) -> list[str]:
    folder = root / "attachments"
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def _put(sm: Any, sid: str, raw: bytes, name: str = "f.bin") -> Any:
    return sm.call("session::put-attachment", {"session_id": sid, "name": name, "mime": "",
                                               "data": base64.b64encode(raw).decode("ascii")})


def test_an_upload_at_the_default_cap_is_stored_and_one_past_it_is_too_large(tmp_path: Path) -> None:
    # Prevents: the default max_request_bytes (64 MiB) refusing every upload between 48 MiB and the
    # documented 50 MiB max_attachment_bytes as "payload ... exceed max_request_bytes" (its base64 is
    # 4/3 of the bytes), and an upload just past the cap answered invalid_request, not attachment_too_large.
    d = tmp_path / "d"
    raw = b"\x07" * MAX_ATTACHMENT_BYTES
    with session_manager.open(d) as sm:
        sid = sm.call("session::create", {})["session_id"]
        events = _observed(sm)
        error = _error(lambda: _put(sm, sid, raw + b"\x07", "big.bin"))
        assert error.code == "session/attachment_too_large", error
        assert f"{MAX_ATTACHMENT_BYTES + 1} bytes" in str(error) and f"{MAX_ATTACHMENT_BYTES} bytes" in str(error)
        assert _files(d) == [] and events == []
        meta = _put(sm, sid, raw)["attachment"]
        assert meta["size"] == MAX_ATTACHMENT_BYTES and meta["sha256"] == hashlib.sha256(raw).hexdigest()
        assert events == []  # put-attachment announces nothing; an entry referencing it would
    with session_manager.open(d, read_only=True) as sm:  # after a restart
        listed = sm.call("session::list-attachments", {"session_id": sid})["attachments"]
        assert [(m["attachment_id"], m["size"]) for m in listed] == [(meta["attachment_id"], MAX_ATTACHMENT_BYTES)]
        got = sm.call("session::get-attachment", {"session_id": sid, "attachment_id": meta["attachment_id"]})
        assert base64.b64decode(got["data"]) == raw


def test_a_configured_cap_above_the_request_cap_is_honoured(tmp_path: Path) -> None:
    # Prevents: raising max_attachment_bytes alone silently capping uploads at ~3/4 of max_request_bytes
    # with a request-size error; and the upload's allowance excusing anything but the upload data.
    d = tmp_path / "d"
    with session_manager.open(d, max_attachment_bytes=3000, max_request_bytes=1024) as sm:
        sid = sm.call("session::create", {})["session_id"]
        events = _observed(sm)
        error = _error(lambda: _put(sm, sid, b"x" * 3001))
        assert error.code == "session/attachment_too_large" and "3001 bytes" in str(error), error
        error = _error(lambda: _put(sm, sid, b"x" * 30, name="n" * 2000))  # the rest is over the request cap
        assert error.code == "session/invalid_request" and "max_request_bytes (1024)" in str(error), error
        error = _error(lambda: _put(sm, sid, b"x" * 30_000))  # far past both: refused before any work
        assert error.code == "session/invalid_request" and "max_request_bytes (1024)" in str(error), error
        assert _files(d) == [] and events == []
        meta = _put(sm, sid, b"y" * 3000)["attachment"]
        assert meta["size"] == 3000
        error = _error(lambda: sm.call("session::append", {"session_id": sid, "message": {
            "role": "user", "content": [{"type": "text", "text": "z" * 2000}], "timestamp": 1}}))
        assert error.code == "session/invalid_request" and "max_request_bytes (1024)" in str(error), error
    with session_manager.open(d, read_only=True) as sm:
        listed = sm.call("session::list-attachments", {"session_id": sid})["attachments"]
        assert [(m["attachment_id"], m["size"]) for m in listed] == [(meta["attachment_id"], 3000)]
        assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 0
