"""Sessions as portable documents: export to, and import from, JSON Lines.

One line per session, a normalized document independent of the adapter::

    {"format": "session-manager/session", "version": 1,
     "meta": {...SessionMeta}, "leaf": "e_…" | null,
     "entries": [...every SessionEntry, on any branch, oldest first],
     "attachments": [{...AttachmentMeta, "data": "<base64>"?}]}

``data`` is present only when exported with attachment bytes. Import writes
through the store interface (one commit per session, then its attachments),
so the same file loads into any adapter.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from ...errors import invalid_request
from ...store._records import valid_entry, valid_meta
from ...store.base import Commit, SessionStore

FORMAT = "session-manager/session"
VERSION = 1


def export_document(store: SessionStore, session_id: str, *, with_bytes: bool) -> dict[str, Any] | None:
    """The document of one session, or ``None`` when it does not exist."""
    meta = store.get_meta(session_id)
    if meta is None:
        return None
    entries = sorted(store.entries(session_id), key=lambda e: (e["timestamp"], e["id"]))
    attachments = []
    for attachment in sorted(store.list_attachments(session_id),
                             key=lambda a: (a.get("created_at", 0), a["attachment_id"])):
        item = dict(attachment)
        if with_bytes:
            data = store.read_attachment(session_id, attachment["attachment_id"])
            if data is not None:
                item["data"] = base64.b64encode(data).decode("ascii")
        attachments.append(item)
    return {"format": FORMAT, "version": VERSION, "meta": meta, "leaf": store.get_leaf(session_id),
            "entries": entries, "attachments": attachments}


def dumps(document: dict[str, Any]) -> str:
    """One JSON Lines line (no trailing newline)."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


@dataclass
class Parsed:
    """A checked document, ready to write."""

    session_id: str
    meta: dict[str, Any]
    leaf: str | None
    entries: list[dict[str, Any]]
    attachments: list[tuple[dict[str, Any], bytes | None]] = field(default_factory=list)


def parse_document(line: str, number: int) -> Parsed:
    """Check one line; ``session/invalid_request`` naming the line and the field otherwise."""
    where = f"line {number}"
    try:
        doc = json.loads(line)
    except ValueError as e:
        raise invalid_request(f"{where}: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise invalid_request(f"{where}: format: expected {FORMAT!r}")
    if doc.get("version") != VERSION:
        raise invalid_request(f"{where}: version: expected {VERSION}, got {doc.get('version')!r}")
    meta = doc.get("meta")
    if not isinstance(meta, dict) or not valid_meta(meta):
        raise invalid_request(f"{where}: meta: not a valid session meta")
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise invalid_request(f"{where}: entries: expected a list")
    ids = set()
    for i, entry in enumerate(entries):
        if not valid_entry(entry):
            raise invalid_request(f"{where}: entries[{i}]: not a valid session entry")
        ids.add(entry["id"])
    leaf = doc.get("leaf")
    if leaf is not None and leaf not in ids:
        raise invalid_request(f"{where}: leaf: {leaf!r} is not one of the entries")
    attachments: list[tuple[dict[str, Any], bytes | None]] = []
    for i, attachment in enumerate(doc.get("attachments") or []):
        if not isinstance(attachment, dict) or not isinstance(attachment.get("attachment_id"), str):
            raise invalid_request(f"{where}: attachments[{i}]: expected an object with attachment_id")
        item = dict(attachment)
        encoded = item.pop("data", None)
        try:
            data = None if encoded is None else base64.b64decode(encoded, validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise invalid_request(f"{where}: attachments[{i}].data: not base64") from None
        item["session_id"] = meta["session_id"]
        attachments.append((item, data))
    return Parsed(meta["session_id"], meta, leaf, entries, attachments)


@dataclass
class Loaded:
    sessions: int = 0
    entries: int = 0
    attachments: int = 0
    attachments_without_bytes: int = 0


def load(store: SessionStore, parsed: Parsed, into: Loaded) -> None:
    """Write one checked document: entries, leaf and meta as one commit, then
    the attachments that carry their bytes."""
    store.commit(parsed.session_id, Commit(entries=tuple(parsed.entries), leaf=parsed.leaf, meta=parsed.meta))
    into.sessions += 1
    into.entries += len(parsed.entries)
    for meta, data in parsed.attachments:
        if data is None:
            into.attachments_without_bytes += 1
            continue
        store.put_attachment(meta, [data])
        into.attachments += 1
