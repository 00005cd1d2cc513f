"""The six observable event functions and the events the domain returns.

The domain never emits: every mutation returns its response together with a
list of :class:`Event`, and the host (embedded or iii) delivers them after
the write is durable. ``payload`` is exactly what an observer receives as
``input``: the event's fields plus ``session_metadata`` when the session has
metadata. Each payload model names its event function (``function_id``) and
is the one definition of its fields: the builders below fill it with
:func:`~session_manager._wire.shape.shape`, the registered schemas are
generated from it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import Field

from .models import AgentMessage, CustomPayload, Int64, JsonObject, SessionStatus, UInt64, Wire
from .shape import build, shape

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


class Event:
    """One event to deliver through ``function_id`` once the mutation is durable.

    Read-only. Its ``payload`` may be deferred: built on the first read
    (then kept), from values the mutation already holds. Most appends are
    observed by nobody, and a host reads the payload only to deliver or record it."""

    __slots__ = ("_about", "_args", "_build", "_payload", "function_id")

    # A plain attribute, not a property: read for every event by every host and store
    # (delivery, the outbox, the known sessions); nothing assigns it after __init__.
    function_id: str

    def __init__(self, function_id: str, payload: dict[str, Any] | None,
                 build: Callable[..., dict[str, Any]] | None = None, args: tuple[Any, ...] = (),
                 about: tuple[str, JsonObject | None] | None = None) -> None:
        """``payload``, or ``None`` and the ``build`` whose ``build(*args)`` it is (called on the first read);
        ``about``: a deferred payload's ``session_id`` and ``session_metadata``, as :meth:`about` answers."""
        self.function_id = function_id
        self._payload = payload
        self._build = build
        self._args = args
        self._about = about

    def about(self) -> tuple[Any, Any]:
        """The payload's ``session_id`` and ``session_metadata`` (``None`` when absent), without
        building a deferred payload (a store noting which sessions its observers know of reads
        these for every event, observed or not)."""
        if self._about is not None:
            return self._about
        payload = self.payload
        return payload.get("session_id"), payload.get("session_metadata")

    @property
    def payload(self) -> dict[str, Any]:
        payload = self._payload
        if payload is None:
            # Two threads racing the first read may both build it: equal dicts, either one kept.
            assert self._build is not None
            payload = self._payload = self._build(*self._args)
        return payload

    def built(self) -> dict[str, Any] | None:
        """The payload if it is built already, else ``None`` (a deferred one still to build:
        it will be built from the values the mutation holds as they are then)."""
        return self._payload

    @property
    def session_id(self) -> str:
        return str(self.payload["session_id"])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return self.function_id == other.function_id and self.payload == other.payload

    __hash__ = None  # type: ignore[assignment]  # as the frozen dataclass with a dict field it replaces

    def __repr__(self) -> str:
        return f"Event(function_id={self.function_id!r}, payload={self.payload!r})"


# --------------------------------------------------------------------------
# Payload models: the schemas the event functions register and observers read
# --------------------------------------------------------------------------

_SESSION_METADATA = Field(default=None, description="The session's metadata as of the mutation.")


class EventPayload(Wire):
    """Base of the six payloads: ``function_id`` is the event function that carries it."""

    function_id: ClassVar[str]


class CreatedEvent(EventPayload):
    function_id = ON_CREATED
    session_id: str
    title: str
    description: str
    status: SessionStatus
    forked_from: str | None = None
    created_at: Int64
    session_metadata: JsonObject | None = _SESSION_METADATA


class MessageAddedEvent(EventPayload):
    function_id = ON_MESSAGE_ADDED
    _keep_null = frozenset({"parent_id"})
    session_id: str
    entry_id: str
    parent_id: str | None = None
    message: AgentMessage | None = None
    custom: CustomPayload | None = None
    origin: JsonObject | None = None
    timestamp: Int64
    session_metadata: JsonObject | None = _SESSION_METADATA


class MessageUpdatedEvent(EventPayload):
    function_id = ON_MESSAGE_UPDATED
    session_id: str
    entry_id: str
    message: AgentMessage
    revision: UInt64
    origin: JsonObject | None = None
    timestamp: Int64
    session_metadata: JsonObject | None = _SESSION_METADATA


class StatusChangedEvent(EventPayload):
    function_id = ON_STATUS_CHANGED
    session_id: str
    status: SessionStatus
    previous_status: SessionStatus
    status_reason: str | None = None
    timestamp: Int64
    session_metadata: JsonObject | None = _SESSION_METADATA


class MetaUpdatedEvent(EventPayload):
    function_id = ON_META_UPDATED
    session_id: str
    title: str
    description: str
    metadata: JsonObject | None = None
    timestamp: Int64
    session_metadata: JsonObject | None = _SESSION_METADATA


class DeletedEvent(EventPayload):
    function_id = ON_DELETED
    session_id: str
    timestamp: Int64
    session_metadata: JsonObject | None = _SESSION_METADATA


EVENT_MODELS: dict[str, type[EventPayload]] = {
    m.function_id: m
    for m in (CreatedEvent, MessageAddedEvent, MessageUpdatedEvent, StatusChangedEvent, MetaUpdatedEvent, DeletedEvent)
}


# --------------------------------------------------------------------------
# Builders: the events the domain returns
# --------------------------------------------------------------------------


def _event_of(model: type[EventPayload], meta: dict[str, Any], /, **fields: Any) -> Event:
    """An event whose other fields are the meta's own (the model says which)."""
    return Event(model.function_id, shape(model, meta, **fields))


def created(meta: dict[str, Any]) -> Event:
    return _event_of(CreatedEvent, meta, session_metadata=meta.get("metadata"))


def message_added(session_id: str, entry: dict[str, Any], metadata: JsonObject | None) -> Event:
    return Event(ON_MESSAGE_ADDED, None, _message_added, (session_id, entry, metadata), (session_id, metadata))


def _message_added(session_id: str, entry: dict[str, Any], metadata: JsonObject | None) -> dict[str, Any]:
    custom = None
    if entry["kind"] == "custom":
        custom = build[CustomPayload](custom_type=entry["custom_type"], data=entry.get("data"))
    payload = build[MessageAddedEvent](
        session_id=session_id, entry_id=entry["id"], parent_id=entry.get("parent_id"), message=entry.get("message"),
        custom=custom, origin=entry.get("origin"), timestamp=entry["timestamp"], session_metadata=metadata)
    return payload


def message_updated(
    session_id: str, entry: dict[str, Any], origin: JsonObject | None, timestamp: int, metadata: JsonObject | None
) -> Event:
    return Event(ON_MESSAGE_UPDATED, None, _message_updated, (session_id, entry, origin, timestamp, metadata),
                 (session_id, metadata))


def _message_updated(
    session_id: str, entry: dict[str, Any], origin: JsonObject | None, timestamp: int, metadata: JsonObject | None
) -> dict[str, Any]:
    return build[MessageUpdatedEvent](
        session_id=session_id, entry_id=entry["id"], message=entry["message"], revision=entry.get("revision", 0),
        origin=origin, timestamp=timestamp, session_metadata=metadata)


def status_changed(meta: dict[str, Any], previous_status: str, timestamp: int) -> Event:
    return _event_of(StatusChangedEvent, meta, previous_status=previous_status, timestamp=timestamp,
                     session_metadata=meta.get("metadata"))


def meta_updated(meta: dict[str, Any], timestamp: int) -> Event:
    return _event_of(MetaUpdatedEvent, meta, timestamp=timestamp, session_metadata=meta.get("metadata"))


def deleted(session_id: str, timestamp: int, metadata: JsonObject | None) -> Event:
    return Event(ON_DELETED, build[DeletedEvent](session_id=session_id, timestamp=timestamp, session_metadata=metadata))
