"""The internal ``session::store::*`` protocol: raw storage served by an fs main.

A bridged instance keeps every domain rule (ids, idempotency, revisions,
branching, locks) and stores through a main instance running the fs adapter,
by calling these functions on the main's engine. They bypass the domain on
purpose: they are deployment plumbing, registered ``internal`` and
``trace_hidden``, to be denied to agents like every other mutating surface.

Besides the raw reads and writes there is one compound write,
``commit-append``, which the main applies under its own session lock so an
append is atomic and idempotent even when several bridges write one
session; and the event plumbing of the bridge topology:
``publish-events`` (a bridge hands the main its mutation's events) and the
event function ``session::store::on-events`` (the main calls it once per
event so every attached bridge can relay it to its own observers).

Every function here is described by one :class:`StoreFunction` row; the iii
host registers them and gates each call on the live adapter (only an fs
runtime serves them).
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import BaseModel, Field

from .._wire import events as ev
from .._wire.events import Event
from .._wire.models import AttachmentMeta, JsonObject, SessionEntry, SessionMeta, Wire
from .._wire.shape import build, edit
from ..errors import PARENT_NOT_FOUND, SessionError, invalid_request, not_found
from .base import Commit, SessionStore

PREFIX = "session::store::"
GET_META = "session::store::get-meta"
PUT_META = "session::store::put-meta"
DELETE_META = "session::store::delete-meta"
LIST_METAS = "session::store::list-metas"
GET_ENTRY = "session::store::get-entry"
PUT_ENTRY = "session::store::put-entry"
LIST_ENTRIES = "session::store::list-entries"
DELETE_ENTRIES = "session::store::delete-entries"
GET_ACTIVE_LEAF = "session::store::get-active-leaf"
SET_ACTIVE_LEAF = "session::store::set-active-leaf"
DELETE_ACTIVE_LEAF = "session::store::delete-active-leaf"
COMMIT_APPEND = "session::store::commit-append"
PUT_ATTACHMENT = "session::store::put-attachment"
GET_ATTACHMENT = "session::store::get-attachment"
LIST_ATTACHMENTS = "session::store::list-attachments"
DELETE_ATTACHMENT = "session::store::delete-attachment"
DELETE_ATTACHMENTS = "session::store::delete-attachments"
PUBLISH_EVENTS = "session::store::publish-events"
ON_EVENTS = "session::store::on-events"

REGISTRATION_METADATA: dict[str, Any] = {"internal": True, "trace_hidden": True}
FS_ONLY = "store protocol is served only by fs instances"

# The stored-era trigger type ids a reference bridge may still put in an
# envelope's `trigger_type`, mapped to the event functions of the seed.
LEGACY_TRIGGER_TYPES: dict[str, str] = {
    "session::created": ev.ON_CREATED,
    "session::message-added": ev.ON_MESSAGE_ADDED,
    "session::message-updated": ev.ON_MESSAGE_UPDATED,
    "session::status-changed": ev.ON_STATUS_CHANGED,
    "session::meta-updated": ev.ON_META_UPDATED,
    "session::deleted": ev.ON_DELETED,
}


# --------------------------------------------------------------------------
# Wire models (shapes of golden-schemas/session.store.*.json)
# --------------------------------------------------------------------------


class SessionIdRequest(Wire):
    session_id: str


class EntryIdRequest(Wire):
    session_id: str
    entry_id: str


class AttachmentIdRequest(Wire):
    session_id: str
    attachment_id: str


class ListMetasRequest(Wire):
    """Takes no arguments; unknown keys are ignored."""


class PutMetaRequest(Wire):
    meta: SessionMeta


class PutEntryRequest(Wire):
    session_id: str
    entry: SessionEntry


class CommitAppendRequest(Wire):
    session_id: str
    entry: SessionEntry
    parent_explicit: bool = Field(
        description="true: keep the entry's parent_id as sent; false: the main chains it to the "
        "session's active leaf under its own lock.")


class PutAttachmentRequest(Wire):
    meta: AttachmentMeta
    data: str = Field(description="Standard (padded) base64 of the bytes.")


class EventEnvelope(Wire):
    """One event crossing instances. ``payload`` is the event without
    ``session_metadata``, which rides beside it so metadata filters hold at
    every edge. ``trigger_type`` is the stored-era name of the same field."""

    function_id: Optional[str] = Field(default=None, description="The event function (session::on-*).")
    trigger_type: Optional[str] = Field(default=None, description="Older spelling of function_id.")
    payload: Any = Field(default=None, description="The event, without session_metadata.")
    session_metadata: Optional[JsonObject] = Field(default=None, description="SessionMeta.metadata "
                                                   "as of the mutation.")


class PublishEventsRequest(Wire):
    events: list[EventEnvelope] = Field(description="Event envelopes of one bridged mutation.")


class OnEventsEnvelope(Wire):
    """What ``session::store::on-events`` is called with (and returns)."""

    function_id: str
    payload: JsonObject
    session_metadata: Optional[JsonObject] = None


class OkResponse(Wire):
    ok: bool


class DeletedResponse(Wire):
    deleted: bool


class ActiveLeafResponse(Wire):
    _keep_null = frozenset({"entry_id"})
    entry_id: Optional[str] = Field(default=None, description="null when the session has no active leaf.")


class ListMetasResponse(Wire):
    metas: list[SessionMeta]


class ListEntriesResponse(Wire):
    entries: list[SessionEntry]


class ListAttachmentsResponse(Wire):
    attachments: list[AttachmentMeta]


class StoredAttachment(Wire):
    meta: AttachmentMeta
    data: str = Field(description="Standard (padded) base64 of the bytes.")


class CommitAppendResponse(Wire):
    entry: SessionEntry
    meta: SessionMeta
    committed: bool = Field(description="false: an entry with this id existed; it is returned unchanged.")


class PublishEventsResponse(Wire):
    published: int = Field(ge=0, description="Well-formed envelopes accepted and fanned out.")


# --------------------------------------------------------------------------
# Handlers over a live store
# --------------------------------------------------------------------------


LockFor = Callable[[str], threading.Lock]


def _ok() -> dict[str, Any]:
    return build[OkResponse](ok=True)
Raw = dict[str, Any]


@dataclass(frozen=True)
class StoreFunction:
    """One protocol function: ``handler(store, lock_for, request, payload)`` -> JSON answer.

    ``payload`` is the validated request as sent: what is written is stored
    untouched (a re-dump of the model would drop the explicit nulls the fs
    adapter keeps, and the bridge must read back exactly what it wrote)."""

    id: str
    handler: Callable[[SessionStore, LockFor, Any, dict[str, Any]], Any]
    request: type[BaseModel]
    response: Any
    description: str
    nullable: bool = False


def _get_meta(store: SessionStore, lock: LockFor, req: SessionIdRequest, raw: Raw) -> Any:
    return store.get_meta(req.session_id)


def _put_meta(store: SessionStore, lock: LockFor, req: PutMetaRequest, raw: Raw) -> Any:
    meta = raw["meta"]
    sid = meta["session_id"]
    with lock(sid):
        store.commit(sid, Commit(meta=meta))
    return _ok()


def _delete_log(store: SessionStore, lock: LockFor, req: SessionIdRequest, raw: Raw) -> Any:
    # The fs adapter keeps meta, entries and leaf in one session file, which
    # it removes only as a whole (attachments included): each of the three
    # deletes drops the session, the first one to arrive doing the work.
    with lock(req.session_id):
        store.delete_session(req.session_id)
    return _ok()


def _list_metas(store: SessionStore, lock: LockFor, req: ListMetasRequest, raw: Raw) -> Any:
    return build[ListMetasResponse](metas=store.list_metas())


def _get_entry(store: SessionStore, lock: LockFor, req: EntryIdRequest, raw: Raw) -> Any:
    return store.get_entry(req.session_id, req.entry_id)


def _put_entry(store: SessionStore, lock: LockFor, req: PutEntryRequest, raw: Raw) -> Any:
    with lock(req.session_id):
        store.commit(req.session_id, Commit(entries=(raw["entry"],)))
    return _ok()


def _list_entries(store: SessionStore, lock: LockFor, req: SessionIdRequest, raw: Raw) -> Any:
    return build[ListEntriesResponse](entries=store.entries(req.session_id))


def _get_leaf(store: SessionStore, lock: LockFor, req: SessionIdRequest, raw: Raw) -> Any:
    return build[ActiveLeafResponse](entry_id=store.get_leaf(req.session_id))


def _set_leaf(store: SessionStore, lock: LockFor, req: EntryIdRequest, raw: Raw) -> Any:
    with lock(req.session_id):
        store.commit(req.session_id, Commit(leaf=req.entry_id))
    return _ok()


def _commit_append(store: SessionStore, lock: LockFor, req: CommitAppendRequest, raw: Raw) -> Any:
    sid = req.session_id
    entry = dict(raw["entry"])
    with lock(sid):
        meta = store.get_meta(sid)
        if meta is None:
            raise not_found(sid)
        existing = store.get_entry(sid, entry["id"])
        if existing is not None:
            return build[CommitAppendResponse](entry=existing, meta=meta, committed=False)
        if not req.parent_explicit:
            entry["parent_id"] = store.get_leaf(sid)
        elif entry.get("parent_id") is not None and store.get_entry(sid, entry["parent_id"]) is None:
            raise SessionError(PARENT_NOT_FOUND,
                               f"parent entry {entry['parent_id']} does not exist in session {sid}")
        meta = edit[SessionMeta](meta, updated_at=entry["timestamp"],
                     message_count=meta["message_count"] + int(entry["kind"] == "message"))
        store.commit(sid, Commit(entries=(entry,), leaf=entry["id"], meta=meta))
    return build[CommitAppendResponse](entry=entry, meta=meta, committed=True)


def _put_attachment(store: SessionStore, lock: LockFor, req: PutAttachmentRequest, raw: Raw) -> Any:
    try:
        data = base64.b64decode(req.data, validate=True)
    except (binascii.Error, ValueError) as e:
        raise invalid_request(f"data: not valid base64: {e}") from None
    store.put_attachment(dict(raw["meta"]), [data])
    return _ok()


def _get_attachment(store: SessionStore, lock: LockFor, req: AttachmentIdRequest, raw: Raw) -> Any:
    meta = store.get_attachment_meta(req.session_id, req.attachment_id)
    data = store.read_attachment(req.session_id, req.attachment_id) if meta is not None else None
    if meta is None or data is None:
        return None
    return build[StoredAttachment](meta=meta, data=base64.b64encode(data).decode("ascii"))


def _list_attachments(store: SessionStore, lock: LockFor, req: SessionIdRequest, raw: Raw) -> Any:
    return build[ListAttachmentsResponse](attachments=store.list_attachments(req.session_id))


def _delete_attachment(store: SessionStore, lock: LockFor, req: AttachmentIdRequest, raw: Raw) -> Any:
    return build[DeletedResponse](deleted=store.delete_attachment(req.session_id, req.attachment_id))


def _delete_attachments(store: SessionStore, lock: LockFor, req: SessionIdRequest, raw: Raw) -> Any:
    for meta in store.list_attachments(req.session_id):
        store.delete_attachment(req.session_id, meta["attachment_id"])
    return _ok()


_D = "Internal store protocol (fs instances only): "

STORE_FUNCTIONS: tuple[StoreFunction, ...] = (
    StoreFunction(GET_META, _get_meta, SessionIdRequest, SessionMeta, _D + "one SessionMeta, or null.",
                  nullable=True),
    StoreFunction(PUT_META, _put_meta, PutMetaRequest, OkResponse, _D + "write one SessionMeta."),
    StoreFunction(DELETE_META, _delete_log, SessionIdRequest, OkResponse,
                  _D + "delete a session's meta (on fs: its whole log)."),
    StoreFunction(LIST_METAS, _list_metas, ListMetasRequest, ListMetasResponse, _D + "every SessionMeta."),
    StoreFunction(GET_ENTRY, _get_entry, EntryIdRequest, SessionEntry, _D + "one SessionEntry, or null.",
                  nullable=True),
    StoreFunction(PUT_ENTRY, _put_entry, PutEntryRequest, OkResponse, _D + "write one SessionEntry."),
    StoreFunction(LIST_ENTRIES, _list_entries, SessionIdRequest, ListEntriesResponse,
                  _D + "every entry of a session, on any branch."),
    StoreFunction(DELETE_ENTRIES, _delete_log, SessionIdRequest, OkResponse,
                  _D + "delete a session's entries (on fs: its whole log)."),
    StoreFunction(GET_ACTIVE_LEAF, _get_leaf, SessionIdRequest, ActiveLeafResponse,
                  _D + "a session's active leaf pointer."),
    StoreFunction(SET_ACTIVE_LEAF, _set_leaf, EntryIdRequest, OkResponse, _D + "move the active leaf pointer."),
    StoreFunction(DELETE_ACTIVE_LEAF, _delete_log, SessionIdRequest, OkResponse,
                  _D + "clear the active leaf pointer (on fs: drops the whole log)."),
    StoreFunction(COMMIT_APPEND, _commit_append, CommitAppendRequest, CommitAppendResponse,
                  _D + "append one entry atomically under the session lock: idempotent on the entry id, "
                  "parent from the active leaf unless explicit, message_count and updated_at kept, leaf "
                  "moved."),
    StoreFunction(PUT_ATTACHMENT, _put_attachment, PutAttachmentRequest, OkResponse,
                  _D + "store an attachment's bytes (base64) and metadata."),
    StoreFunction(GET_ATTACHMENT, _get_attachment, AttachmentIdRequest, StoredAttachment,
                  _D + "an attachment with its bytes (base64), or null.", nullable=True),
    StoreFunction(LIST_ATTACHMENTS, _list_attachments, SessionIdRequest, ListAttachmentsResponse,
                  _D + "a session's attachment metadata."),
    StoreFunction(DELETE_ATTACHMENT, _delete_attachment, AttachmentIdRequest, DeletedResponse,
                  _D + "remove one attachment."),
    StoreFunction(DELETE_ATTACHMENTS, _delete_attachments, SessionIdRequest, OkResponse,
                  _D + "remove every attachment of a session."),
)  # fmt: skip

PUBLISH_DESCRIPTION = (_D + "ingest a bridged instance's event envelopes: the main calls its own event "
                       "functions and session::store::on-events for each.")
ON_EVENTS_DESCRIPTION = ("Internal event (fs instances only): called once per session event with "
                         "{function_id, payload, session_metadata?}; bridged instances observe it to relay "
                         "events to their own observers.")


# --------------------------------------------------------------------------
# Envelopes
# --------------------------------------------------------------------------


_TRIGGER_TYPE_OF = {fid: legacy for legacy, fid in LEGACY_TRIGGER_TYPES.items()}


def envelope(event: Event, *, legacy: bool = False) -> dict[str, Any]:
    """The wire envelope of an event: ``payload`` without ``session_metadata``.
    ``legacy`` adds the stored-era ``trigger_type`` (what publish-events sends,
    so a main reading either spelling understands it)."""
    payload = {k: v for k, v in event.payload.items() if k != "session_metadata"}
    out: dict[str, Any] = {"function_id": event.function_id, "payload": payload}
    if legacy:
        out["trigger_type"] = _TRIGGER_TYPE_OF[event.function_id]
    metadata = event.payload.get("session_metadata")
    if metadata is not None:
        out["session_metadata"] = metadata
    return out


def event_of(raw: Any) -> Event | None:
    """The event an envelope carries, or ``None`` when it is not well formed
    (unknown function, payload not of that event's shape)."""
    if not isinstance(raw, dict):
        return None
    fid = raw.get("function_id") or raw.get("trigger_type")
    fid = LEGACY_TRIGGER_TYPES.get(fid, fid) if isinstance(fid, str) else None
    payload = raw.get("payload")
    metadata = raw.get("session_metadata")
    if fid not in ev.EVENT_MODELS or not isinstance(payload, dict) or not (
            metadata is None or isinstance(metadata, dict)):
        return None
    body = {k: v for k, v in payload.items() if k not in ("session_metadata", "_caller_worker_id")}
    if metadata is not None:
        body["session_metadata"] = metadata
    try:
        ev.EVENT_MODELS[fid].model_validate(body)
    except ValueError:
        return None
    return Event(fid, body)
