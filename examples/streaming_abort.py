"""Streaming a reply, and stopping it half-way (the user pressed "stop").

    python examples/streaming_abort.py [DATA_DIR]

A writer thread streams a reply into an assistant message with
``update_message`` (each update replaces the content and bumps the revision);
the reply starts a function call on the way. An observer of
``session::on-message-updated`` plays the chat UI and presses "stop" after a
few revisions: the writer stops, the text so far is already stored, and
``sm.abort`` closes the call the reply had started with an error result, so
the next model call gets a valid transcript. The session's status says why.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from typing import Any

import session_manager
from session_manager.messages import assistant_message, function_call, user_message

TOKENS = ["Let ", "me ", "check ", "the ", "forecast ", "for ", "the ", "whole ", "week."]
CALL_AT = 2     # after this many tokens the model starts a function call
STOP_AFTER = 4  # the UI presses "stop" once it has shown this many revisions


def main(data_dir: str) -> list[str]:
    """Streams into ``data_dir`` until aborted; returns the transcript as "role: text" lines."""
    stop = threading.Event()
    shown: list[int] = []

    with session_manager.open(data_dir) as sm:
        sid = sm.create(title="Forecast").session_id
        sm.append(sid, message=user_message("Weather in Paris this week?"))
        reply = sm.append(sid, message=assistant_message(model="scripted", provider="example")).entry_id

        def on_update(event: dict[str, Any]) -> None:  # the UI: render, maybe press stop
            shown.append(event["revision"])
            if len(shown) == STOP_AFTER:
                stop.set()

        sm.observe({"function_id": "session::on-message-updated",
                    "filters": {"input.entry_id": {"$eq": reply}}}, on_update)

        def stream() -> None:
            sm.set_status(sid, status="working")
            text, call = "", function_call("get_forecast", {"city": "Paris"})
            for n, token in enumerate(TOKENS):
                if stop.is_set():
                    return
                text += token
                content: list[Any] = [text, call] if n >= CALL_AT else [text]  # a string is a text block
                sm.update_message(sid, entry_id=reply, content=content)
                stop.wait(0.01)  # a model's pace; wakes at once on abort
            sm.set_status(sid, status="done")

        writer = threading.Thread(target=stream)
        writer.start()
        writer.join()
        closed = sm.abort(sid, reply, reason="stopped by the user")  # error results for open calls
        sm.set_status(sid, status="done", reason="aborted by the user")
        lines = [f"{item.message.role}: {item.message.text}" for item in sm.transcript(sid)]
        print("closed calls:", closed)
        for line in lines:
            print(line)
        return lines


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="sm-abort-"))
