"""What a commit carries before a store resolves it: :data:`UNSET`, the "no expectation"
default of its compare-and-set fields, and the meta an append derives from the session's.

Apart from :mod:`.cas` (which checks a commit against a session), so the interface
(:mod:`..base`, whose :class:`~..base.Commit` needs both) imports no CAS rule.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

from ..path import Entry

__all__ = ["UNSET", "Unset", "derive_append_meta"]


class Unset(enum.Enum):
    """The type of :data:`UNSET`: "no expectation" (``None`` means "absent")."""

    UNSET = "unset"


UNSET: Literal[Unset.UNSET] = Unset.UNSET


def derive_append_meta(meta: dict[str, Any], entries: tuple[Entry, ...]) -> dict[str, Any]:
    """The meta after appending ``entries``: ``updated_at`` is the last
    entry's timestamp, ``message_count`` grows by the messages among them."""
    added = 0
    for e in entries:  # a loop, not sum(genexpr): this runs twice on every append
        if e.get("kind") == "message":
            added += 1
    # edit[SessionMeta] with two non-null changes, without its pass over every field.
    out = dict(meta)
    out["updated_at"] = entries[-1]["timestamp"]
    out["message_count"] = meta["message_count"] + added
    return out
