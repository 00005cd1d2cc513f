"""The embedded host's admission of a pure read's request (``session::get``, ``messages``,
``messages-tail``, ``get-message``) of plain leaves alone, inline (issue 24, the warm tail's second
pass): the same private copy and the same refusals as ``admit_copy`` and the serve path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.errors import SessionError
from tests.pg_support import text


def _outcome(call: Any, function: str, body: Any) -> Any:
    try:
        return ("ok", call(function, body))
    except SessionError as e:
        return ("error", e.code, e.detail)
    except (TypeError, ValueError) as e:  # (a payload that is no object: whatever serve raises)
        return ("raised", type(e).__name__, str(e))


@pytest.mark.parametrize("uri", ["sqlite", "memory"])
def test_a_pure_reads_request_is_admitted_as_the_serve_path_admits_it(tmp_path: Path, uri: str) -> None:
    # Prevents: the inline admission of a read's flat request answering, or refusing, otherwise
    # than admit_copy behind serve: a lone surrogate (no text JSON carries it), a non-str key, a
    # float page size, a nested value, an unknown key, a bool for a str, a None payload.
    target = f"sqlite:///{tmp_path / 'a.db'}" if uri == "sqlite" else None
    with (session_manager.open(target) if target else session_manager.open(store=_memory())) as sm:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
        eid = sm.call("session::append", {"session_id": sid, "message": text("m")})["entry_id"]
        bodies: list[Any] = [
            {"session_id": sid}, {"session_id": sid, "limit": 1}, {"session_id": sid, "limit": 1.0},
            {"session_id": sid, "limit": 2.5}, {"session_id": "\ud800"}, {"session_id": sid, 1: "x"},
            {"session_id": sid, "extra": {"a": 1}}, {"session_id": sid, "extra": "x"}, {"session_id": True},
            {"session_id": sid, "entry_id": eid}, {"session_id": sid, "entry_id": "\udfff"},
            {"session_id": sid, "include_custom": None}, {"session_id": sid, "limit": [1]}, None, [sid],
        ]
        for function in ("session::get", "session::messages", "session::messages-tail", "session::get-message"):
            for body in bodies:
                inline = _outcome(sm.call, function, body)
                general = _outcome(sm._call, function, body)  # (serve: admit_copy, then the request model)
                assert inline == general, (function, body)
        assert _outcome(sm.call, "session::get", {"session_id": "\ud800"})[:2] == ("error", "session/invalid_request")
        kept = {"session_id": sid, "limit": 1}
        page = sm.call("session::messages-tail", kept)
        assert kept == {"session_id": sid, "limit": 1} and page["messages"][0]["entry_id"] == eid


def _memory() -> Any:
    from session_manager.store.memory import MemoryStore
    return MemoryStore()
