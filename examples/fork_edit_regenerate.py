"""Fork, edit and regenerate: the three ways to "try again" without losing anything.

    python examples/fork_edit_regenerate.py [DATA_DIR]

- **regenerate**: another assistant reply under the same user message (a sibling
  branch); the active path now ends in the new reply;
- **edit**: a corrected user message as a sibling of the original (same parent),
  then a reply to it; the original question and its answers stay on their branch;
- **switch back**: ``set_active_leaf`` to any entry makes its path the transcript;
- **fork**: the path up to an entry copied into a new session of its own.

Written with the 21 functions: ``sm.edit`` / ``sm.regenerate`` helpers (issue 27)
had not landed on main when this example was written; they do the same appends.
"""

from __future__ import annotations

import sys
import tempfile

import session_manager
from session_manager.messages import assistant_message, user_message


def transcript(sm: session_manager.SessionManager, sid: str) -> list[str]:
    """The active path as "role: text" lines."""
    return [f"{m.message.role}: {''.join(getattr(b, 'text', '') for b in m.message.content)}"
            for m in sm.messages(sid).messages]


def main(data_dir: str) -> dict[str, list[str]]:
    with session_manager.open(data_dir) as sm:
        sid = sm.create(title="Trip").session_id
        sm.append(sid, message=user_message("Hi"))
        greeting = sm.append(sid, message=assistant_message("Hello! Where to?")).entry_id
        ask = sm.append(sid, message=user_message("A city for a weekend?")).entry_id
        first = sm.append(sid, message=assistant_message("Rome.")).entry_id

        # Regenerate: a second reply to the same question.
        sm.append(sid, message=assistant_message("Lisbon."), parent_id=ask)
        regenerated = transcript(sm, sid)

        # Edit: the question rewritten (a sibling of the original), then answered.
        sm.append(sid, message=user_message("A city by the sea for a weekend?"), parent_id=greeting)
        sm.append(sid, message=assistant_message("Porto."))
        edited = transcript(sm, sid)

        # Switch back to the very first answer: nothing was lost.
        sm.set_active_leaf(sid, entry_id=first)
        original = transcript(sm, sid)

        # Fork: the conversation up to the question, as a new session.
        fork = sm.fork(sid, entry_id=ask, title="Trip, again").session_id
        forked = transcript(sm, fork)

    result = {"regenerated": regenerated, "edited": edited, "original": original, "forked": forked}
    for name, lines in result.items():
        print(f"{name}:", " | ".join(lines))
    return result


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="sm-branches-"))
