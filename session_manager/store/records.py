"""The JSONL record format shared with the reference worker.

One record per line, discriminated by ``type``::

    {"type":"meta","meta":{...SessionMeta}}
    {"type":"entry","entry":{...SessionEntry}}
    {"type":"leaf","entry_id":"e_..."}
    {"type":"append","entry":{...},"meta":{...}}   # entry + leaf + meta in one line
    {"type":"commit","entry_id":"e_..."}           # read and ignored (reference bookkeeping)

Decoding is defensive: anything that is not a well-formed record of a known
type is rejected here so replay can skip it and carry on.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from ..errors import UnstorableValue
from ..models import ROLES, SessionMeta
from .base import Commit

_KINDS = ("meta", "entry", "leaf", "append", "commit")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def valid_entry(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return False
    if not isinstance(entry.get("id"), str) or not _is_int(entry.get("timestamp")):
        return False
    parent = entry.get("parent_id")
    if parent is not None and not isinstance(parent, str):
        return False
    revision = entry.get("revision", 0)
    if not _is_int(revision) or revision < 0:
        return False
    origin = entry.get("origin")
    if origin is not None and not isinstance(origin, dict):
        return False
    kind = entry.get("kind")
    if kind == "message":
        message = entry.get("message")
        return (
            isinstance(message, dict)
            and message.get("role") in ROLES
            and isinstance(message.get("content"), list)
        )
    if kind == "custom":
        return isinstance(entry.get("custom_type"), str)
    return False


def valid_meta(meta: Any, session_id: str | None = None) -> bool:
    if not isinstance(meta, dict):
        return False
    try:
        SessionMeta.model_validate(meta)
    except ValidationError:
        return False
    return session_id is None or meta["session_id"] == session_id


def decode_record(line: bytes, session_id: str | None = None) -> dict[str, Any] | None:
    """The record a line holds, or ``None`` when the line is not a valid record."""
    try:
        record = json.loads(line)
    except ValueError:  # includes UnicodeDecodeError
        return None
    if not isinstance(record, dict):
        return None
    kind = record.get("type")
    if kind not in _KINDS:
        return None
    if kind == "meta":
        ok = valid_meta(record.get("meta"), session_id)
    elif kind == "entry":
        ok = valid_entry(record.get("entry"))
    elif kind == "leaf":
        leaf = record.get("entry_id")
        ok = leaf is None or isinstance(leaf, str)
    elif kind == "append":
        ok = valid_entry(record.get("entry")) and valid_meta(record.get("meta"), session_id)
    else:
        ok = isinstance(record.get("entry_id"), str)
    return record if ok else None


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def encode_commit(commit: Commit) -> bytes:
    """The bytes of one mutation: whole lines, written with a single append.

    When the last entry becomes the leaf and the meta changes (append,
    append-many, fork), the earlier entries go as ``entry`` lines and the last
    one as an ``append`` line carrying leaf and meta: a crash that cuts the
    write short leaves only entries no leaf or meta points at yet, so the
    mutation reads back as not having happened. Anything else is entry
    lines, then the leaf, then the meta.
    """
    entries, leaf, meta = commit.entries, commit.leaf, commit.meta
    lines: list[str] = []
    if entries and meta is not None and leaf == entries[-1]["id"]:
        lines.extend(_line({"type": "entry", "entry": e}) for e in entries[:-1])
        lines.append(_line({"type": "append", "entry": entries[-1], "meta": meta}))
    else:
        lines.extend(_line({"type": "entry", "entry": e}) for e in entries)
        if leaf is not None:
            lines.append(_line({"type": "leaf", "entry_id": leaf}))
        if meta is not None:
            lines.append(_line({"type": "meta", "meta": meta}))
    text = "\n".join(lines) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise UnstorableValue("text contains an unpaired UTF-16 surrogate, which cannot be stored") from None
