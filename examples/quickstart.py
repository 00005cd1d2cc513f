"""Quickstart: a session, a question, a streamed answer, a second answer on a branch, a fork.

    python examples/quickstart.py [DATA_DIR]      # default: a fresh temp dir

Runs from any working directory, embedded (no engine). Then look at it with
``session-manager data show DATA_DIR SESSION_ID --tree``.
"""

from __future__ import annotations

import sys
import tempfile

import session_manager
from session_manager.messages import assistant_message, user_message


def main(data_dir: str) -> str:
    """Writes one branched, streamed conversation into ``data_dir``; returns its session id."""
    with session_manager.open(data_dir) as sm:
        sid = sm.create(title="Weather", metadata={"user": "u_1"}).session_id
        question = sm.append(sid, message=user_message("Will it rain in Paris?")).entry_id

        reply = sm.append(sid, message=assistant_message(model="my-model", provider="me")).entry_id
        text = ""
        for chunk in ("Light ", "rain ", "tonight."):  # each update replaces the content
            text += chunk
            sm.update_message(sid, entry_id=reply, content=text)  # a string is a text block

        # A second answer to the same question: a new branch, the first one kept.
        sm.append(sid, message=assistant_message("Bring an umbrella."), parent_id=question)
        for item in sm.transcript(sid):  # every page of the active path
            print(item.message.role, item.message.text)

        copy = sm.fork(sid, entry_id=question, title="Try again").session_id
        print("forked into", copy, "with", len(sm.messages(copy).messages), "message")
    return sid


if __name__ == "__main__":
    where = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="sm-quickstart-")
    print("session", main(where), "in", where)
