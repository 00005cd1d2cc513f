"""What ``session::search`` reads of an entry, and how text becomes words.

One definition for every adapter: the fs and memory indexes, the sqlite
FTS5 table and the postgres ``tsvector`` all index :func:`searchable_text`
folded by :func:`fold`, so a query finds the same entries on each.

Words are runs of Unicode word characters (``\\w``) of the text in NFC, each
compared case- and accent-insensitively: NFKD, combining marks dropped, then
``casefold``. (NFC first: a combining mark is no word character, so a text
typed decomposed, ``E`` and U+0301, would split where its composed form
does not; a mark with no composed form still splits its run.)
Searched: ``text`` blocks of every message, ``function_call`` names and the
text of function results; not ``thinking``, not custom entries, not
attachments.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Query", "fold", "parse_query", "searchable_text", "snippet", "words"]

_WORD = re.compile(r"\w+")
SNIPPET_CHARS = 1000
_BEFORE = 80  # characters of context kept before the first match


def fold(text: str) -> str:
    """Case- and accent-folded text (``Élan`` -> ``elan``)."""
    if text.isascii():
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(c for c in decomposed if not unicodedata.combining(c))
    return unicodedata.normalize("NFC", stripped.casefold())


@functools.lru_cache(maxsize=1 << 16)
def _folded(token: str) -> tuple[str, ...]:
    # (a fold can yield a non-word character, e.g. NFKD's fraction slash: split again)
    return tuple(_WORD.findall(fold(token)))


def words(text: str) -> list[str]:
    """The folded words of ``text``, in order: the runs of word characters of its NFC
    form, each folded (memoized per distinct word: a corpus repeats its words)."""
    if text.isascii():
        return _WORD.findall(text.lower())
    out: list[str] = []
    for token in _WORD.findall(unicodedata.normalize("NFC", text)):
        out.extend(_folded(token))
    return out


def _block_texts(blocks: Any, *, results: bool) -> Iterator[str]:
    if not isinstance(blocks, list):
        return
    for b in blocks:
        if not isinstance(b, dict):
            continue
        kind = b.get("type")
        if kind == "text" and isinstance(b.get("text"), str):
            yield b["text"]
        elif kind == "function_call" and isinstance(b.get("function_id"), str):
            yield b["function_id"]
        elif kind == "function_result" and results:
            yield from _block_texts(b.get("content"), results=False)


def searchable_text(entry: dict[str, Any]) -> str | None:
    """The searchable text of ``entry`` (its parts joined by newlines), or
    ``None`` for an entry search never returns (a custom entry)."""
    if entry.get("kind") != "message":
        return None
    message = entry.get("message")
    if not isinstance(message, dict):
        return None
    return "\n".join(_block_texts(message.get("content"), results=True))


def entry_role(entry: dict[str, Any]) -> str:
    message = entry.get("message")
    role = message.get("role") if isinstance(message, dict) else None
    return role if isinstance(role, str) else ""


@dataclass(frozen=True)
class Query:
    """A parsed query: whole words, then the last word matched as a prefix."""

    exact: tuple[str, ...]
    prefix: str

    @property
    def terms(self) -> tuple[str, ...]:
        return (*self.exact, self.prefix)

    def matches_word(self, i: int, word: str) -> bool:
        """Whether ``word`` (folded) matches term ``i``."""
        if i == len(self.exact):
            return word.startswith(self.prefix)
        return word == self.exact[i]


def parse_query(text: str) -> Query | None:
    """The query's words; ``None`` when it has none."""
    found = words(text)
    if not found:
        return None
    return Query(exact=tuple(found[:-1]), prefix=found[-1])


def snippet(text: str, query: Query) -> str:
    """At most :data:`SNIPPET_CHARS` of ``text`` (in NFC, split as :func:`words` splits it)
    around the first word any term matches."""
    start = 0
    exact, prefix = frozenset(query.exact), query.prefix
    # (ASCII text: each word's fold is its lower case, at the same place in the lowered text;
    # otherwise a run's fold may be several words, as words() has it: "½" is 1 and 2)
    ascii_text = text.isascii()
    if not ascii_text:
        text = unicodedata.normalize("NFC", text)
    for m in _WORD.finditer(text.lower() if ascii_text else text):
        folded = (m.group(),) if ascii_text else _folded(m.group())
        if any(w in exact or w.startswith(prefix) for w in folded):
            start = m.start()
            break
    begin = max(0, start - _BEFORE)
    if begin > 0:  # start on a word boundary, not mid-word
        space = text.find(" ", begin, start)
        begin = space + 1 if space != -1 else begin
    return text[begin : begin + SNIPPET_CHARS]
