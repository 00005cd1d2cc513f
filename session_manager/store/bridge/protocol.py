"""The internal ``session::store::*`` protocol: function ids, wire models
and event envelopes, shared by the client (:class:`~session_manager.store.bridge.BridgeStore`)
and the server an fs main runs (:mod:`session_manager.store.bridge.server`).

A bridged instance keeps every domain rule (ids, idempotency, revisions,
branching, locks) and stores through a main instance running the fs adapter,
by calling these functions on the main's engine. They bypass the domain on
purpose: they are deployment plumbing, registered ``internal`` and
``trace_hidden``, to be denied to agents like every other mutating surface.

Besides the raw reads and writes there is one compound write,
``commit-append``, which the main applies under its own session lock: one
append is written whole (entry, leaf and meta) and an entry id is never
stored twice. Nothing serializes two bridges' read-check-write beyond that
(each resolves parents and revisions under its own lock). And the event
plumbing of the bridge topology: ``publish-events`` (a bridge hands the
main its mutation's events) and the event function
``session::store::on-events`` (the main calls it once per event so every
attached bridge can relay it to its own observers).
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field

from ..._bus import CALLER_KEY
from ..._wire import events as ev
from ..._wire.events import Event
from ..._wire.models import AttachmentMeta, JsonObject, SessionEntry, SessionMeta, Wire
from .protocol_cas import OP_DESCRIPTION

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


# Ours adds `op` (a Rust main ignores it), as protocol_cas.DeleteSessionRequest does.
class DeleteAttachmentRequest(AttachmentIdRequest):
    op: Optional[str] = Field(default=None, description=OP_DESCRIPTION)


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
    stream: Optional[str] = Field(default=None, description=(
        "The fanning-out main's numbering (one per main process; _worker/fanout_order): absent from an older main."))
    seq: Optional[int] = Field(default=None, description="This envelope's place in that stream, from 1.")


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
    body = {k: v for k, v in payload.items() if k not in ("session_metadata", CALLER_KEY)}
    if metadata is not None:
        body["session_metadata"] = metadata
    try:
        ev.EVENT_MODELS[fid].model_validate(body)
    except ValueError:
        return None
    return Event(fid, body)
