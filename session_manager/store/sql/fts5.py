"""The FTS5 forms the sqlite adapter's index and the fs adapter's search index
share: an entry's document (its folded words, made in Python, so every index
splits text alike) and a word quoted as an FTS5 string."""

from __future__ import annotations

from typing import Any

from ..search_text import entry_role, searchable_text, words

__all__ = ["doc", "quoted"]

_INT64 = 2**63  # timestamps past SQLite's integer range are stored as text


def doc(entry: dict[str, Any]) -> tuple[str, Any, int, str] | None:
    """``(role, timestamp, length, words)`` of a searchable entry, ``None`` otherwise."""
    text = searchable_text(entry)
    if text is None:
        return None
    found = words(text)
    ts = int(entry.get("timestamp", 0))
    stored_ts: Any = ts if -_INT64 <= ts < _INT64 else str(ts)
    return entry_role(entry), stored_ts, len(found), " ".join(sorted(found))



def quoted(word: str) -> str:
    return '"' + word.replace('"', '""') + '"'
