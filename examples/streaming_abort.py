"""Streaming a reply, and stopping it half-way (the user pressed "stop").

    python examples/streaming_abort.py [DATA_DIR]

A writer thread streams tokens into an assistant message with
``update_message`` (each update replaces the content and bumps the revision);
an observer of ``session::on-message-updated`` plays the chat UI. After a few
tokens the "user" aborts: the writer stops, the text so far stays stored, and
the session's status says why (``set_status(..., reason=...)``).

Written with the 21 functions: an ``sm.abort`` helper (issue 27) had not landed
on main when this example was written.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from typing import Any

import session_manager
from session_manager.messages import assistant_message, blocks, user_message

TOKENS = ["Once ", "upon ", "a ", "time ", "there ", "was ", "a ", "very ", "long ", "story."]
STOP_AFTER = 4  # the UI presses "stop" once it has shown this many revisions


def main(data_dir: str) -> str:
    """Streams into ``data_dir`` until aborted; returns the stored text."""
    stop = threading.Event()
    shown: list[int] = []

    with session_manager.open(data_dir) as sm:
        sid = sm.create(title="A story").session_id
        sm.append(sid, message=user_message("Tell me a long story"))
        reply = sm.append(sid, message=assistant_message(model="scripted", provider="example")).entry_id

        def on_update(event: dict[str, Any]) -> None:  # the UI: render, maybe press stop
            shown.append(event["revision"])
            if len(shown) == STOP_AFTER:
                stop.set()

        sm.observe({"function_id": "session::on-message-updated",
                    "filters": {"input.entry_id": {"$eq": reply}}}, on_update)

        def stream() -> None:
            sm.set_status(sid, status="working")
            text = ""
            for token in TOKENS:
                if stop.is_set():
                    sm.set_status(sid, status="done", reason="aborted by the user")  # idle keeps no reason
                    return
                text += token
                sm.update_message(sid, entry_id=reply, content=blocks([text]))
                stop.wait(0.01)  # a model's pace; wakes at once on abort
            sm.set_status(sid, status="done")

        writer = threading.Thread(target=stream)
        writer.start()
        writer.join()
        stored = sm.get_message(sid, entry_id=reply)
        assert stored is not None
        text = "".join(getattr(b, "text", "") for b in stored.entry.message.content)
        meta = sm.get(sid)
        assert meta is not None
        print(f"stored after abort: {text!r} (revision {stored.entry.revision}); "
              f"status {meta.meta.status}: {meta.meta.status_reason}")
        return text


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="sm-abort-"))
