"""An error naming a key (or id) that holds a lone UTF-16 surrogate: its text still encodes as
UTF-8 everywhere it goes (the embedded host's exception, a log line, orjson, the iii worker's
answer over the SDK's JSON), the surrogate written as its ``\\uXXXX`` escape; the code and the
field it names unchanged, nothing written. Before, the text carried the surrogate itself, and
every UTF-8 encoder at the edge raised (UnicodeEncodeError printing it, orjson refusing it)."""

from __future__ import annotations

import io
import logging
import math
from pathlib import Path
from typing import Any

import orjson
import pytest
from iii import InvocationError

import session_manager
from session_manager._worker.config_value import parse_config
from session_manager._worker.iii_host import IIIHost
from session_manager.errors import SessionError
from session_manager.ids import SequentialIds
from session_manager.testing import FakeEngine

BAD_KEY = "\ud800k"
ESCAPED = "\\ud800k"

CASES = [
    pytest.param("session::append", {"session_id": "S", "custom": {"custom_type": "t", "data": {BAD_KEY: 1}}},
                 f"custom.data.{ESCAPED}", id="data-key"),
    pytest.param("session::append", {"session_id": "S", "custom": {"custom_type": "t", "data": {BAD_KEY: math.nan}}},
                 f"custom.data.{ESCAPED}", id="nan-under-the-key"),
    pytest.param("session::set-meta", {"session_id": "S", "metadata": {"owner": {BAD_KEY: "x"}}},
                 f"metadata.owner.{ESCAPED}", id="metadata-key"),
    pytest.param("session::append", {"session_id": "S", BAD_KEY: 1, "custom": {"custom_type": "t", "data": 1}},
                 ESCAPED, id="top-level-key"),
]


def assert_encodable_everywhere(text: str, field: str) -> None:
    assert text.startswith("session/invalid_request: ")
    assert field in text
    text.encode("utf-8")  # a terminal, a log file, a wire frame
    assert orjson.loads(orjson.dumps({"error": text}))["error"] == text
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    record = logging.LogRecord("t", logging.ERROR, __file__, 1, "failed: %s", (text,), None)
    handler.emit(record)
    stream.getvalue().encode("utf-8")


@pytest.mark.parametrize(("function_id", "payload", "field"), CASES)
@pytest.mark.parametrize("kind", ["memory", "fs"])
def test_an_error_naming_a_surrogate_key_encodes_in_the_embedded_host(tmp_path: Path, kind: str, function_id: str,
                                                                      payload: dict[str, Any], field: str) -> None:
    # Prevents: the embedded host's SessionError carrying a lone surrogate, so printing or
    # logging it (or the viewer's JSON of it) raised UnicodeEncodeError / orjson's TypeError.
    sm = (session_manager.open(store=session_manager.MemoryStore()) if kind == "memory"
          else session_manager.open(tmp_path / "d"))
    try:
        sm.call("session::ensure", {"session_id": "S"})
        with pytest.raises(SessionError) as refused:
            sm.call(function_id, payload)
        assert refused.value.code == "session/invalid_request"
        assert_encodable_everywhere(str(refused.value), field)
        assert refused.value.detail.encode("utf-8")
        assert sm.call("session::messages", {"session_id": "S", "include_custom": True})["messages"] == []
        assert "metadata" not in sm.call("session::get", {"session_id": "S"})["meta"]
    finally:
        sm.close()


@pytest.mark.parametrize(("function_id", "payload", "field"), CASES)
def test_an_error_naming_a_surrogate_key_encodes_in_the_iii_worker_s_answer(tmp_path: Path, function_id: str,
                                                                            payload: dict[str, Any],
                                                                            field: str) -> None:
    # Prevents: the worker's answer carrying a lone surrogate in its error message (the SDK's
    # frame then depends on its own escaping; logs and any UTF-8 encoder on the way raise).
    from iii import _wire_json

    fake = FakeEngine()
    host = IIIHost(fake, parse_config({"adapter": {"name": "fs", "config": {"data_dir": str(tmp_path / "d")}}}),
                   ids=SequentialIds())
    host.register()
    try:
        fake.invoke("session::ensure", {"session_id": "S"})
        with pytest.raises(InvocationError) as refused:
            fake.invoke(function_id, payload)
        message = refused.value.message
        assert_encodable_everywhere(message, field)
        assert _wire_json.dumps({"error": {"message": message}}).encode("utf-8")
    finally:
        host.close()
