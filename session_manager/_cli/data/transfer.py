"""Sessions as portable documents: export to, and import from, JSON Lines.

One line per session, a normalized document independent of the adapter::

    {"format": "session-manager/session", "version": 1,
     "meta": {...SessionMeta}, "leaf": "e_…" | null,
     "entries": [...every SessionEntry, on any branch, oldest first],
     "attachments": [{...AttachmentMeta, "data": "<base64>"?}]}

``data`` is present only when exported with attachment bytes. Import admits
each line as the API admits a request (:func:`parse_document`), then writes
through the store interface (one commit per session, then its attachments),
so the same file loads into any adapter.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ..._service.admission import MAX_DEPTH, admit
from ..._service.limits import Limits
from ..._wire.api import Id
from ..._wire.models import AttachmentMeta, SessionEntry, SessionMeta
from ..._wire.validation import describe
from ...errors import SessionError, StoreError, UnstorableValue, invalid_request
from ...store.base import Commit, SessionStore
from ...store.fs import valid_entry, valid_meta

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
    line: int = 0  # where it is in the file (an error naming it)


_META: TypeAdapter[Any] = TypeAdapter(SessionMeta)
_ENTRY: TypeAdapter[Any] = TypeAdapter(SessionEntry)
_ATTACHMENT: TypeAdapter[Any] = TypeAdapter(AttachmentMeta)
_ID: TypeAdapter[Any] = TypeAdapter(Id)  # what the API takes as a session, entry or attachment id
# The admission key of an imported value: no batch or bulk field applies (see admission.admit).
_IMPORT = "session-manager data import"


def parse_document(raw: bytes, number: int, limits: Limits) -> Parsed:
    """Check one line as the API checks a request (the same admission and
    exact-value rules, the same wire models, a parent that exists, attachment
    bytes that match their record) and derive what the store derives
    (``message_count``, ``updated_at``). Otherwise ``session/invalid_request``
    naming the line, the session and the field."""
    where = f"line {number}"
    doc = _decode(raw, where)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise invalid_request(f"{where}: format: expected {FORMAT!r}")
    if doc.get("version") != VERSION:
        raise invalid_request(f"{where}: version: expected {VERSION}, got {doc.get('version')!r:.40}")
    meta = doc.get("meta")
    sid = meta.get("session_id") if isinstance(meta, dict) else None
    if isinstance(sid, str):
        where += f" (session {sid[:120]})"
    meta = _admitted(where, "meta", _META, meta, limits)
    _admitted(where, "meta.session_id", _ID, meta["session_id"], limits)
    if not valid_meta(meta):  # the replay's own check: what it would skip is never written
        raise invalid_request(f"{where}: meta: not a valid session meta")
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise invalid_request(f"{where}: entries: expected a list")
    for i, entry in enumerate(entries):
        _admitted(where, f"entries[{i}]", _ENTRY, entry, limits)
        _admitted(where, f"entries[{i}].id", _ID, entry["id"], limits)
        if not valid_entry(entry):
            raise invalid_request(f"{where}: entries[{i}]: not a valid session entry")
    entries = _parents_first(entries, where)
    leaf = doc.get("leaf")
    if leaf is not None and not any(e["id"] == leaf for e in entries):
        raise invalid_request(f"{where}: leaf: {leaf!r:.120} is not one of the entries")
    attachments = _attachments(doc.get("attachments"), meta["session_id"], where, limits)
    listed = {a["attachment_id"] for a, _ in attachments}
    for i, draft in enumerate(meta.get("draft_attachments") or []):
        if draft["attachment_id"] not in listed:
            raise invalid_request(f"{where}: meta.draft_attachments[{i}]: attachment {draft['attachment_id']!r:.120} "
                                  "is not one of the session's attachments")
    return Parsed(meta["session_id"], _derived(meta, entries), leaf, entries, attachments, number)


def _decode(raw: bytes, where: str) -> Any:
    """The line as JSON, as the wire reads a request: UTF-8, integers exact.
    NaN and infinities parse here so that admission names their field."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise invalid_request(f"{where}: not UTF-8 (byte {e.start}: {e.reason})") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise invalid_request(f"{where}: nested too deeply (a value may nest {MAX_DEPTH} levels)") from None
    except ValueError as e:
        raise invalid_request(f"{where}: not JSON ({e})") from None


def _admitted(where: str, name: str, model: TypeAdapter[Any], value: Any, limits: Limits) -> Any:
    """``value`` through the API's admission (exact JSON, depth, size) and its wire model."""
    try:
        admit(_IMPORT, value, limits, mutates=True)
        model.validate_python(value)
    except SessionError as e:
        raise invalid_request(_within(where, name, e.detail)) from None
    except ValidationError as e:
        raise invalid_request(_within(where, name, describe(e))) from None
    return value


def _within(where: str, name: str, detail: str) -> str:
    """An API error's ``field: why`` (``payload`` for the whole value) as a field of ``name``."""
    field_, sep, why = detail.partition(": ")
    if not sep:
        return f"{where}: {name}: {detail}"
    return f"{where}: {name}{'' if field_ == 'payload' else '.' + field_}: {why}"


def _parents_first(entries: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """The entries with every parent before its children, as appends wrote them;
    refused as the API refuses them: a parent that is not in the session, an id
    used twice (and parents that loop, which no append can make)."""
    by_id: dict[str, dict[str, Any]] = {}
    index: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry["id"] in by_id:
            raise invalid_request(f"{where}: entries[{i}].id: {entry['id']!r:.120} appears twice")
        by_id[entry["id"]], index[entry["id"]] = entry, i
    for i, entry in enumerate(entries):
        parent = entry.get("parent_id")
        if parent is not None and parent not in by_id:
            raise invalid_request(f"{where}: entries[{i}].parent_id: entry {parent!r:.120} is not in the session")
    ordered: list[dict[str, Any]] = []
    placed: set[str] = set()
    for entry in entries:
        chain: list[dict[str, Any]] = []
        current: dict[str, Any] | None = entry
        while current is not None and current["id"] not in placed:
            if len(chain) == len(entries):  # walked more entries than there are: a loop
                raise invalid_request(f"{where}: entries[{index[entry['id']]}].parent_id: the parents of entry "
                                      f"{entry['id']!r:.120} loop")
            chain.append(current)
            parent = current.get("parent_id")
            current = None if parent is None else by_id[parent]
        for link in reversed(chain):
            placed.add(link["id"])
            ordered.append(link)
    return ordered


def _attachments(items: Any, session_id: str, where: str,
                 limits: Limits) -> list[tuple[dict[str, Any], bytes | None]]:
    """Each attachment's record through admission and its wire model, and its
    bytes (when the file carries them) as recorded: size, sha256, and the cap."""
    if items is None:
        return []
    if not isinstance(items, list):
        raise invalid_request(f"{where}: attachments: expected a list")
    out: list[tuple[dict[str, Any], bytes | None]] = []
    seen: set[str] = set()
    for i, attachment in enumerate(items):
        name = f"attachments[{i}]"
        if not isinstance(attachment, dict):
            raise invalid_request(f"{where}: {name}: expected an object")
        item = dict(attachment)
        encoded = item.pop("data", None)
        item["session_id"] = session_id
        _admitted(where, name, _ATTACHMENT, item, limits)
        _admitted(where, f"{name}.attachment_id", _ID, item["attachment_id"], limits)
        if item["attachment_id"] in seen:
            raise invalid_request(f"{where}: {name}.attachment_id: {item['attachment_id']!r:.120} appears twice")
        seen.add(item["attachment_id"])
        out.append((item, None if encoded is None else _attachment_bytes(encoded, item, f"{where}: {name}", limits)))
    return out


def _attachment_bytes(encoded: Any, item: dict[str, Any], where: str, limits: Limits) -> bytes:
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise invalid_request(f"{where}.data: not base64") from None
    if len(data) > limits.max_attachment_bytes:
        raise invalid_request(f"{where}.data: {len(data)} bytes exceed max_attachment_bytes "
                              f"({limits.max_attachment_bytes})")
    if item["size"] != len(data):
        raise invalid_request(f"{where}.size: {item['size']}, but the data holds {len(data)} bytes")
    if item["sha256"] != hashlib.sha256(data).hexdigest():
        raise invalid_request(f"{where}.sha256: does not match the data")
    return data


def _derived(meta: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """``meta`` with what the store derives from the entries, never the file's:
    ``message_count`` counts the messages on every branch (as appends count
    them), ``updated_at`` is the newest entry's timestamp (as an append sets
    it), never before ``created_at``."""
    messages = sum(1 for e in entries if e.get("kind") == "message")
    newest = max((e["timestamp"] for e in entries), default=meta["created_at"])
    return {**meta, "message_count": messages, "updated_at": max(meta["created_at"], newest)}


@dataclass
class Loaded:
    sessions: int = 0
    entries: int = 0
    attachments: int = 0
    attachments_without_bytes: int = 0


def stored(store: SessionStore, doc: Parsed) -> bool:
    """Whether the store holds the document's session already; an id the store cannot
    hold (too long to name its file) is refused naming the line, as the API refuses it."""
    try:
        return store.get_meta(doc.session_id) is not None
    except UnstorableValue as e:
        raise invalid_request(f"line {doc.line} (session {doc.session_id[:120]}): {e}") from None


def load_all(store: SessionStore, parsed: Iterable[Parsed], into: Loaded, shown: str) -> None:
    """Write every checked document, or none: the first one the store refuses (an
    attachment id it cannot name a file after, storage failing) deletes what this
    import wrote before it (its own session's commit too), and the refusal names its
    line and session. A value the store cannot hold is ``session/invalid_request``,
    as the API answers it."""
    written: list[Parsed] = []
    try:
        for doc in parsed:
            written.append(doc)  # before its first write: a half-written one is undone too
            load(store, doc, into)
    except StoreError as e:
        for done in written:
            with contextlib.suppress(StoreError):
                store.delete_session(done.session_id)
        doc = written[-1]
        detail = f"line {doc.line} (session {doc.session_id[:120]}): {e}; nothing was imported into {shown}"
        if isinstance(e, UnstorableValue):
            raise invalid_request(detail) from None
        raise StoreError(detail) from None


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
