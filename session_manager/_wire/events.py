"""The six observable event functions and the events the domain returns.

The domain never emits: every mutation returns its response together with a
list of :class:`Event`, and the host (embedded or iii) delivers them after
the write is durable. ``payload`` is exactly what an observer receives as
``input``: the event's fields plus ``session_metadata`` when the session has
metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from .models import AgentMessage, CustomPayload, Int64, JsonObject, SessionStatus, UInt64, Wire

ON_CREATED = "session::on-created"
ON_MESSAGE_ADDED = "session::on-message-added"
ON_MESSAGE_UPDATED = "session::on-message-updated"
ON_STATUS_CHANGED = "session::on-status-changed"
ON_META_UPDATED = "session::on-meta-updated"
ON_DELETED = "session::on-deleted"

EVENT_FUNCTIONS: tuple[str, ...] = (
    ON_CREATED,
    ON_MESSAGE_ADDED,
    ON_MESSAGE_UPDATED,
    ON_STATUS_CHANGED,
    ON_META_UPDATED,
    ON_DELETED,
)


@dataclass(frozen=True)
class Event:
    """One event to deliver through ``function_id`` once the mutation is durable."""

    function_id: str
    payload: dict[str, Any]

    @property
    def session_id(self) -> str:
        return str(self.payload["session_id"])


def event(function_id: str, fields: dict[str, Any], session_metadata: JsonObject | None) -> Event:
    """Build an event; ``None`` fields are left out, metadata only when present."""
    payload = {k: v for k, v in fields.items() if v is not None or k == "parent_id"}
    if session_metadata is not None:
        payload["session_metadata"] = session_metadata
    return Event(function_id, payload)


def created(meta: dict[str, Any]) -> Event:
    return event(
        ON_CREATED,
        {
            "session_id": meta["session_id"],
            "title": meta["title"],
            "description": meta["description"],
            "status": meta["status"],
            "forked_from": meta.get("forked_from"),
            "created_at": meta["created_at"],
        },
        meta.get("metadata"),
    )


def message_added(session_id: str, entry: dict[str, Any], metadata: JsonObject | None) -> Event:
    custom = None
    if entry["kind"] == "custom":
        custom = {"custom_type": entry["custom_type"], "data": entry.get("data")}
    return event(
        ON_MESSAGE_ADDED,
        {
            "session_id": session_id,
            "entry_id": entry["id"],
            "parent_id": entry.get("parent_id"),
            "message": entry.get("message"),
            "custom": custom,
            "origin": entry.get("origin"),
            "timestamp": entry["timestamp"],
        },
        metadata,
    )


def message_updated(
    session_id: str, entry: dict[str, Any], origin: JsonObject | None, timestamp: int, metadata: JsonObject | None
) -> Event:
    return event(
        ON_MESSAGE_UPDATED,
        {
            "session_id": session_id,
            "entry_id": entry["id"],
            "message": entry["message"],
            "revision": entry.get("revision", 0),
            "origin": origin,
            "timestamp": timestamp,
        },
        metadata,
    )


def status_changed(meta: dict[str, Any], previous_status: str, timestamp: int) -> Event:
    return event(
        ON_STATUS_CHANGED,
        {
            "session_id": meta["session_id"],
            "status": meta["status"],
            "previous_status": previous_status,
            "status_reason": meta.get("status_reason"),
            "timestamp": timestamp,
        },
        meta.get("metadata"),
    )


def meta_updated(meta: dict[str, Any], timestamp: int) -> Event:
    return event(
        ON_META_UPDATED,
        {
            "session_id": meta["session_id"],
            "title": meta["title"],
            "description": meta["description"],
            "metadata": meta.get("metadata"),
            "timestamp": timestamp,
        },
        meta.get("metadata"),
    )


def deleted(session_id: str, timestamp: int, metadata: JsonObject | None) -> Event:
    return event(ON_DELETED, {"session_id": session_id, "timestamp": timestamp}, metadata)


# --------------------------------------------------------------------------
# Payload models: the schemas the event functions register and observers read
# --------------------------------------------------------------------------

_SESSION_METADATA = Field(default=None, description="The session's metadata as of the mutation.")


class CreatedEvent(Wire):
    session_id: str
    title: str
    description: str
    status: SessionStatus
    forked_from: str | None = None
    created_at: Int64
    session_metadata: JsonObject | None = _SESSION_METADATA


class MessageAddedEvent(Wire):
    session_id: str
    entry_id: str
    parent_id: str | None = None
    message: AgentMessage | None = None
    custom: CustomPayload | None = None
    origin: JsonObject | None = None
    timestamp: Int64
    session_metadata: JsonObject | None = _SESSION_METADATA


class MessageUpdatedEvent(Wire):
    session_id: str
    entry_id: str
    message: AgentMessage
    revision: UInt64
    origin: JsonObject | None = None
    timestamp: Int64
    session_metadata: JsonObject | None = _SESSION_METADATA


class StatusChangedEvent(Wire):
    session_id: str
    status: SessionStatus
    previous_status: SessionStatus
    status_reason: str | None = None
    timestamp: Int64
    session_metadata: JsonObject | None = _SESSION_METADATA


class MetaUpdatedEvent(Wire):
    session_id: str
    title: str
    description: str
    metadata: JsonObject | None = None
    timestamp: Int64
    session_metadata: JsonObject | None = _SESSION_METADATA


class DeletedEvent(Wire):
    session_id: str
    timestamp: Int64
    session_metadata: JsonObject | None = _SESSION_METADATA


EVENT_MODELS: dict[str, type[Wire]] = {
    ON_CREATED: CreatedEvent,
    ON_MESSAGE_ADDED: MessageAddedEvent,
    ON_MESSAGE_UPDATED: MessageUpdatedEvent,
    ON_STATUS_CHANGED: StatusChangedEvent,
    ON_META_UPDATED: MetaUpdatedEvent,
    ON_DELETED: DeletedEvent,
}
