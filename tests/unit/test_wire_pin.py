"""Every response and event of the scripted session, pinned as JSON text.

Compared as text, so key order, nulls kept or left out and number types
(``3`` vs ``3.0``) are pinned along with the values: building responses and
events from their models must not change a byte of what callers and
observers receive. Regenerate only for a deliberate contract change:
``python -m tests.unit.test_wire_pin``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from session_manager._hosts.surface import BY_ID
from session_manager._wire.events import EVENT_MODELS
from tests.unit.scripted import Call, run

GOLDEN = Path(__file__).parent / "golden" / "scripted_calls.jsonl"


def lines(calls: list[Call]) -> list[str]:
    return [json.dumps({"function_id": fid, "response": out, "events": events}, ensure_ascii=False)
            for fid, _payload, out, events, _event_functions in calls]


def test_every_response_and_event_of_the_script_is_pinned(tmp_path: Path) -> None:
    # Prevents: a model-built response or event that reorders keys, drops a null or retypes a number.
    got = lines(run(tmp_path / "data"))
    expected = GOLDEN.read_text(encoding="utf-8").splitlines()
    assert len(got) == len(expected)
    for mine, pinned in zip(got, expected, strict=True):
        assert mine == pinned


def test_every_response_and_event_is_what_its_model_describes(tmp_path: Path) -> None:
    # Prevents: a response or event drifting from the model its schema is registered from.
    for fid, _payload, out, events, event_functions in run(tmp_path / "data"):
        function = BY_ID[fid]
        if out is not None or not function.nullable:
            function.response.model_validate(out)
        for event_function, event in zip(event_functions, events, strict=True):
            EVENT_MODELS[event_function].model_validate(event)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        GOLDEN.write_text("\n".join(lines(run(Path(tmp) / "data"))) + "\n", encoding="utf-8")
    sys.stdout.write(f"wrote {GOLDEN}\n")
