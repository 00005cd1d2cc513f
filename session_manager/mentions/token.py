"""The mention token ``@<name>(id="<id>")``: read it out of text, write it.

Grammar (shared with every other implementation through the fixture
``mention-tokens.json``):

- ``<name>``: lowercase ASCII letters, digits and ``-``; starts with a
  letter; at most :data:`MAX_NAME_LEN` characters; not a reserved name.
- ``<id>``: a JSON string literal that decodes to 1..:data:`MAX_ID_LEN`
  characters.
- The ``@`` never directly follows a letter, digit or ``_`` (so an e-mail
  address is not a mention).
- Read but never written: the closing quote left out
  (``@<name>(id="<id>)``), when the id has no quote, backslash or control
  character. Models drop that quote often enough that refusing it would
  leave raw tokens in their replies.
- :func:`parse_prose_mentions` also skips markdown code, where a token is
  literal text.
"""

from __future__ import annotations

import bisect
import functools
import json
import unicodedata
from dataclasses import dataclass
from typing import Any

MAX_NAME_LEN = 40
MAX_ID_LEN = 512
RESERVED_NAMES: frozenset[str] = frozenset({"fn", "file", "skill"})
"""Names the console's built-in mention forms already use."""

_OPEN = '(id="'
_CLOSE = '")'
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
_SIMPLE_ESCAPES = frozenset('"\\/bfnrt')
_HEX = frozenset("0123456789abcdefABCDEF")


@dataclass(frozen=True)
class MentionRef:
    """One mention found in text: its name, decoded id and the exact token."""

    name: str
    id: str
    token: str


def is_valid_name(name: str) -> bool:
    """Whether ``name`` may be a token (and provider) name."""
    return (
        0 < len(name) <= MAX_NAME_LEN
        and "a" <= name[0] <= "z"
        and all(c in _NAME_CHARS for c in name)
        and name not in RESERVED_NAMES
    )


def format_mention(name: str, id: str) -> str:
    """The token for one item; the id is written as a JSON string literal."""
    return f"@{name}(id={json.dumps(id, ensure_ascii=False)})"


def parse_mentions(text: str) -> list[MentionRef]:
    """Every mention in ``text``, in order (code spans are not special)."""
    found: list[MentionRef] = []
    start = 0
    while True:
        at = text.find("@", start)
        if at < 0:
            return found
        start = at + 1
        if at > 0 and _is_word_char(text[at - 1]):
            continue
        parsed = _token_at(text, at)
        if parsed is not None:
            found.append(parsed[0])
            start = parsed[1]


def parse_prose_mentions(text: str) -> list[MentionRef]:
    """Like :func:`parse_mentions`, but text between a run of backticks and
    the next run of the same length (inline code, fenced blocks) is skipped:
    a chat surface shows a token there as code, not as a mention."""
    found: list[MentionRef] = []
    for segment in _prose_segments(text):
        found.extend(parse_mentions(segment))
    return found


# -- internals -------------------------------------------------------------------


# Rust's char::is_alphanumeric (the reference parsers): the Unicode Alphabetic
# property or a number category. str.isalnum() misses the Other_Alphabetic
# marks (e.g. Devanagari and Thai vowel signs) and circled letters.
# Compiled on first use: the regex module is a noticeable part of import time.
@functools.cache
def _pattern(source: str) -> Any:
    import regex

    return regex.compile(source)


_ALPHANUMERIC = r"[\p{Alphabetic}\p{N}]"


def words(text: str) -> list[str]:
    """The runs of alphanumerics (as Rust counts them) in ``text``."""
    found: list[str] = _pattern(_ALPHANUMERIC + "+").findall(text)
    return found


def _is_word_char(c: str) -> bool:
    return c == "_" or _pattern(_ALPHANUMERIC).match(c) is not None


def _is_control(c: str) -> bool:
    return unicodedata.category(c) == "Cc"


def _prose_segments(text: str) -> list[str]:
    """The text outside code: a run of backticks opens code that the next run
    of the same length closes; a run with no such partner is ordinary text.

    The maximal runs are listed once, with each length's runs in order, so
    finding a partner is a bisect, not a walk of the rest of the text (a text
    of many unpartnered runs of distinct lengths made that O(n^1.5))."""
    runs = [(m.start(), m.end()) for m in _pattern("`+").finditer(text)]
    by_length: dict[int, list[int]] = {}
    for j, (start, end) in enumerate(runs):
        by_length.setdefault(end - start, []).append(j)
    segments: list[str] = []
    prose_from = 0
    j = 0
    while j < len(runs):
        start, end = runs[j]
        same = by_length[end - start]
        k = bisect.bisect_right(same, j)
        if k == len(same):
            j += 1  # no partner: ordinary text
            continue
        segments.append(text[prose_from:start])
        j = same[k] + 1
        prose_from = runs[same[k]][1]
    segments.append(text[prose_from:])
    return segments


def _token_at(text: str, at: int) -> tuple[MentionRef, int] | None:
    """The token whose ``@`` is at ``at`` and the index just past it."""
    name_end = at + 1
    while name_end < len(text) and text[name_end] in _NAME_CHARS:
        name_end += 1
    name = text[at + 1 : name_end]
    if not is_valid_name(name) or not text.startswith(_OPEN, name_end):
        return None
    body = name_end + len(_OPEN)
    parsed = _strict_id(text, body) or _unclosed_id(text, body)
    if parsed is None:
        return None
    value, end = parsed
    if not 0 < len(value) <= MAX_ID_LEN:
        return None
    return MentionRef(name=name, id=value, token=text[at:end]), end


def _strict_id(text: str, body: int) -> tuple[str, int] | None:
    """A well-formed JSON string body followed by ``")``."""
    quote = _string_body_end(text, body)
    if quote is None or not text.startswith(_CLOSE, quote):
        return None
    try:
        value = json.loads(f'"{text[body:quote]}"')
    except ValueError:
        return None
    # A lone surrogate escape decodes in Python but is not text anywhere else.
    if not isinstance(value, str) or any("\ud800" <= c <= "\udfff" for c in value):
        return None
    return value, quote + len(_CLOSE)


def _unclosed_id(text: str, body: int) -> tuple[str, int] | None:
    """The tolerated ``<id>)``: nothing that would need escaping."""
    # An id is at most MAX_ID_LEN characters: no need to look further for its `)`
    # (a search to the end from every token start made many of them quadratic).
    close = text.find(")", body, body + MAX_ID_LEN + 1)
    if close < 0:
        return None
    value = text[body:close]
    if not value or any(c in ('"', "\\") or _is_control(c) for c in value):
        return None
    return value, close + 1


def _string_body_end(text: str, i: int) -> int | None:
    """Index of the quote closing a JSON string body starting at ``i``, or
    ``None`` when the body is malformed or runs off the end."""
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            return i
        if c == "\\":
            if i + 1 >= n:
                return None
            e = text[i + 1]
            if e in _SIMPLE_ESCAPES:
                i += 2
            elif e == "u" and i + 6 <= n and all(h in _HEX for h in text[i + 2 : i + 6]):
                i += 6
            else:
                return None
        elif c < " ":
            return None
        else:
            i += 1
    return None
