"""Which nulls are written: the reference always writes a function result's
``details`` and a call's ``arguments``; every other absent optional is left out."""

from __future__ import annotations

from pathlib import Path

import session_manager
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds


def test_details_and_arguments_are_written_even_when_null(tmp_path: Path) -> None:
    # Prevents: readers that expect the reference's always-present keys finding them missing.
    sm = session_manager.open(tmp_path / "d", ids=SequentialIds(), clock=ManualClock(1_000_000))
    sid = sm.call("session::create", {})["session_id"]
    call = {"role": "assistant", "content": [{"type": "function_call", "id": "c1", "function_id": "f"}],
            "stop_reason": "function_call", "model": "m", "provider": "p", "timestamp": 0}
    result = {"role": "function_result", "function_call_id": "c1", "function_id": "f", "content": [],
              "timestamp": 0}
    sm.call("session::append-many", {"session_id": sid, "messages": [call, result]})
    sm.close()
    sm = session_manager.open(tmp_path / "d")
    got = [m["message"] for m in sm.call("session::messages", {"session_id": sid})["messages"]]
    assert got == [
        {"role": "assistant", "content": [{"type": "function_call", "id": "c1", "function_id": "f",
                                           "arguments": None}],
         "stop_reason": "function_call", "model": "m", "provider": "p", "timestamp": 0},
        {"role": "function_result", "function_call_id": "c1", "function_id": "f", "content": [],
         "details": None, "is_error": False, "timestamp": 0},
    ]
