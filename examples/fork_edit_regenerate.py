"""Fork, edit and regenerate: the three ways to "try again" without losing anything.

    python examples/fork_edit_regenerate.py [DATA_DIR]

- **regenerate** (``sm.regenerate``): the active leaf moves back to the question, so
  the next append is another reply beside the first (``sm.alternatives`` lists them);
- **edit** (``sm.edit``): a corrected user message as a sibling of the original,
  then a reply to it; the original question and its answers stay on their branch;
- **switch back**: ``set_active_leaf`` to any entry makes its path the transcript;
- **fork**: the path up to an entry copied into a new session of its own.
"""

from __future__ import annotations

import sys
import tempfile

import session_manager
from session_manager.messages import assistant_message, user_message


def transcript(sm: session_manager.SessionManager, sid: str) -> list[str]:
    """The active path as "role: text" lines."""
    return [f"{item.message.role}: {item.message.text}" for item in sm.transcript(sid)]


def main(data_dir: str) -> dict[str, list[str]]:
    with session_manager.open(data_dir) as sm:
        sid = sm.create(title="Trip").session_id
        sm.set_system_prompt(sid, "Suggest one city.")  # a custom entry first: every message is editable
        sm.append(sid, message=user_message("Hi"))
        sm.append(sid, message=assistant_message("Hello! Where to?"))
        ask = sm.append(sid, message=user_message("A city for a weekend?")).entry_id
        first = sm.append(sid, message=assistant_message("Rome.")).entry_id

        # Regenerate: a second reply to the same question.
        sm.regenerate(sid, first)
        sm.append(sid, message=assistant_message("Lisbon."))
        regenerated = transcript(sm, sid)
        versions = [(v.text, v.active) for v in sm.alternatives(sid, first)]

        # Edit: the question rewritten (a sibling of the original), then answered.
        sm.edit(sid, ask, "A city by the sea for a weekend?")
        sm.append(sid, message=assistant_message("Porto."))
        edited = transcript(sm, sid)

        # Switch back to the very first answer: nothing was lost.
        sm.set_active_leaf(sid, entry_id=first)
        original = transcript(sm, sid)

        # Fork: the conversation up to the question, as a new session.
        fork = sm.fork(sid, entry_id=ask, title="Trip, again").session_id
        forked = transcript(sm, fork)

    print("versions:", versions)
    result = {"regenerated": regenerated, "edited": edited, "original": original, "forked": forked}
    for name, lines in result.items():
        print(f"{name}:", " | ".join(lines))
    return result


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="sm-branches-"))
