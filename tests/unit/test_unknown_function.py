"""Issue 25 item 8: ``call()`` with an unknown function id answers ``session/invalid_request``
naming it (with a "did you mean" for a near miss), never a bare ``LookupError``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import aio
from session_manager._wire.events import ON_CREATED
from session_manager.clock import ManualClock
from session_manager.errors import INVALID_REQUEST, SessionError
from session_manager.ids import SequentialIds

CASES: list[tuple[Any, list[str]]] = [
    ("session::apend", ["'session::apend'", "did you mean", "'session::append'"]),
    ("session::creat", ["'session::creat'", "did you mean", "'session::create'"]),
    ("nothing-like-it", ["'nothing-like-it'", "known:", "session::append"]),
    (None, ["None", "known:"]),
    (["session::create"], ["['session::create']"]),  # unhashable: still the same answer
    (ON_CREATED, [ON_CREATED, "event function"]),
]


def _expect_invalid(error: SessionError, needles: list[str]) -> None:
    assert error.code == INVALID_REQUEST
    for needle in needles:
        assert needle in error.detail, (needle, error.detail)


@pytest.mark.parametrize(("function_id", "needles"), CASES)
def test_unknown_function_id_is_invalid_request_not_lookup_error(tmp_path: Path, function_id: Any,
                                                                 needles: list[str]) -> None:
    # Prevents: an unknown function id (or None) raising LookupError (or TypeError) from call().
    events: list[Any] = []
    with session_manager.open(tmp_path / "d", ids=SequentialIds(), clock=ManualClock(1)) as sm:
        sm.observe({"function_id": ON_CREATED}, events.append)
        with pytest.raises(SessionError) as caught:
            sm.call(function_id, {"title": "t"})
        _expect_invalid(caught.value, needles)
        assert sm.call("session::list", {})["sessions"] == []  # nothing applied
    assert events == []  # and nothing fired


@pytest.mark.parametrize(("function_id", "needles"), CASES[:2])
def test_unknown_function_id_is_invalid_request_in_aio(tmp_path: Path, function_id: Any,
                                                       needles: list[str]) -> None:
    # Prevents: the asyncio host answering an unknown id differently from the sync one.
    async def main() -> SessionError:
        async with aio.open(tmp_path / "d") as asm:
            with pytest.raises(SessionError) as caught:
                await asm.call(function_id, {"title": "t"})
            assert (await asm.call("session::list", {}))["sessions"] == []
            return caught.value

    _expect_invalid(asyncio.run(main()), needles)
