"""Request and response models of every ``session::*`` function.

These are the wire types: the hosts validate payloads against the request
models and register their JSON Schemas; the service builds every response
from its response model (:func:`~session_manager._wire.shape.shape`). Ids supplied by callers must be
non-empty, limits non-negative; anything else is ``session/invalid_request``.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from .models import (
    AgentMessage,
    AttachmentMeta,
    ContentBlock,
    CustomPayload,
    FileBlock,
    Int64,
    JsonObject,
    ListOrder,
    Role,
    SessionEntry,
    SessionMeta,
    SessionStatus,
    UInt64,
    Usage,
    Wire,
)

Id = Annotated[str, Field(min_length=1)]
Limit = Annotated[
    int,
    Field(ge=0, le=2**63 - 1, description="Page size; omitted = the configured default, clamped to the max."),
]
Cursor = Annotated[str, Field(description="Opaque cursor from a previous page.")]

# --------------------------------------------------------------------------
# Lifecycle
# --------------------------------------------------------------------------


class CreateRequest(Wire):
    title: str | None = None
    description: str | None = None
    metadata: JsonObject | None = None


class CreateResponse(Wire):
    session_id: str
    meta: SessionMeta


class EnsureRequest(Wire):
    session_id: Id
    title: str | None = None
    description: str | None = None
    metadata: JsonObject | None = None


class EnsureResponse(Wire):
    session_id: str
    meta: SessionMeta
    created: bool


class GetRequest(Wire):
    session_id: Id


class GetResponse(Wire):
    meta: SessionMeta


class ListRequest(Wire):
    limit: Limit | None = None
    cursor: Cursor | None = None
    status: SessionStatus | None = None
    metadata: JsonObject | None = Field(default=None, description="Subset-equality on SessionMeta.metadata.")
    order: ListOrder | None = Field(default=None, description="Default `updated_desc`.")


class ListResponse(Wire):
    sessions: list[SessionMeta]
    next_cursor: str | None = None


class SetMetaRequest(Wire):
    session_id: Id
    title: str | None = None
    description: str | None = None
    metadata: JsonObject | None = Field(default=None, description="Replaces the stored metadata wholesale.")


class SetMetaResponse(Wire):
    meta: SessionMeta


class SetStatusRequest(Wire):
    session_id: Id
    status: SessionStatus
    reason: str | None = Field(default=None, description="Kept with working/done/error; cleared by idle.")


class SetStatusResponse(Wire):
    status: SessionStatus
    previous_status: SessionStatus


class SetDraftRequest(Wire):
    session_id: Id
    draft: str | None = Field(default=None, description="Unsent composer text; blank or absent clears.")
    attachment_ids: list[Id] | None = Field(
        default=None, description="Parked attachment ids: omitted = unchanged, [] = clear."
    )


class SetDraftResponse(Wire):
    _keep_null = frozenset({"draft"})
    draft: str | None = None
    attachments: list[AttachmentMeta] = Field(default_factory=list)


class DeleteRequest(Wire):
    session_id: Id


class DeleteResponse(Wire):
    deleted: bool


PURGE_DEFAULT_LIMIT = 100
PURGE_MAX_LIMIT = 1000


# A purge names its tenant: an empty filter would match every session.
TenantFilter = Annotated[JsonObject, Field(min_length=1)]
PurgeLimit = Annotated[int, Field(ge=1, le=PURGE_MAX_LIMIT)]


class PurgeRequest(Wire):
    metadata: TenantFilter = Field(
        description="Required, non-empty: subset-equality on SessionMeta.metadata (as session::list).")
    status: SessionStatus | None = None
    updated_before: Int64 | None = Field(default=None, description="Only sessions last updated before this (ms).")
    dry_run: bool | None = Field(default=None, description="List what would be deleted; delete nothing.")
    limit: PurgeLimit | None = Field(
        default=None, description=f"Most sessions per call (default {PURGE_DEFAULT_LIMIT}, max {PURGE_MAX_LIMIT}).")


class PurgeResponse(Wire):
    session_ids: list[str]
    more: bool


class DeleteTreeRequest(Wire):
    session_id: Id


class DeleteTreeResponse(Wire):
    deleted: list[str]


# --------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------


class AppendRequest(Wire):
    session_id: Id
    message: AgentMessage | None = Field(default=None, description="Exactly one of message / custom.")
    custom: CustomPayload | None = None
    parent_id: Id | None = Field(default=None, description="Default: the active leaf.")
    entry_id: Id | None = Field(default=None, description="Caller-chosen id; a replay is a no-op.")
    origin: JsonObject | None = None


class AppendResponse(Wire):
    _keep_null = frozenset({"parent_id"})
    entry_id: str
    parent_id: str | None = None
    timestamp: int


class AppendManyRequest(Wire):
    session_id: Id
    messages: list[AgentMessage]
    parent_id: Id | None = None
    origin: JsonObject | None = None


class AppendManyResponse(Wire):
    entry_ids: list[str]
    last_entry_id: str


class UpdateMessageRequest(Wire):
    session_id: Id
    entry_id: Id
    content: list[ContentBlock]
    details: Any = Field(default=None, description="Only for function_result and custom roles.")
    expected_revision: UInt64 | None = None
    origin: JsonObject | None = None
    usage: Usage | None = Field(default=None, description="Only for assistant messages.")


class UpdateMessageResponse(Wire):
    updated: bool
    revision: UInt64


class MessageItem(Wire):
    entry_id: str
    message: AgentMessage | None = None
    custom: CustomPayload | None = None
    origin: JsonObject | None = None

    @property
    def text(self) -> str:
        """The message's text blocks joined by newlines; ``""`` for a custom entry."""
        return self.message.text if self.message is not None else ""


class MessagesRequest(Wire):
    session_id: Id
    limit: Limit | None = None
    cursor: Cursor | None = None
    roles: list[Role] | None = None
    from_entry_id: Id | None = Field(default=None, description="Read the root -> this entry path instead.")
    after_entry_id: Id | None = Field(default=None, description="Resume strictly after this entry.")
    include_custom: bool | None = None
    include_image_data: bool | None = None


class MessagesResponse(Wire):
    messages: list[MessageItem]
    next_cursor: str | None = None


class TailItem(MessageItem):
    elided: bool | None = None


class MessagesRangeRequest(Wire):
    session_id: Id
    from_entry_id: Id | None = None
    to_entry_id: Id | None = None
    entry_ids: list[Id] | None = None
    limit: Limit | None = None
    cursor: Cursor | None = None
    include_image_data: bool | None = None


class MessagesRangeResponse(Wire):
    messages: list[TailItem]
    next_cursor: str | None = None


class MessagesTailRequest(Wire):
    session_id: Id
    limit: Limit | None = Field(default=None, description="Page size in blocks.")
    before_entry_id: Id | None = None
    until_entry_id: Id | None = None
    include_custom: bool | None = Field(default=None, description="Default true here.")
    include_image_data: bool | None = None


class MessagesTailResponse(Wire):
    messages: list[TailItem]
    has_more: bool
    oldest_entry_id: str | None = None


class GetMessageRequest(Wire):
    session_id: Id
    entry_id: Id
    include_image_data: bool | None = None


class GetMessageResponse(Wire):
    entry: SessionEntry


# --------------------------------------------------------------------------
# Branching
# --------------------------------------------------------------------------


class ForkRequest(Wire):
    session_id: Id
    entry_id: Id
    title: str | None = None


class ForkResponse(Wire):
    session_id: str
    meta: SessionMeta


class SetActiveLeafRequest(Wire):
    session_id: Id
    entry_id: Id


class SetActiveLeafResponse(Wire):
    active_leaf: str


# --------------------------------------------------------------------------
# Attachments
# --------------------------------------------------------------------------


class PutAttachmentRequest(Wire):
    session_id: Id
    name: str
    mime: str
    data: str = Field(description="Standard padded base64.")


class PutAttachmentResponse(Wire):
    attachment: AttachmentMeta
    block: FileBlock


class GetAttachmentRequest(Wire):
    session_id: Id
    attachment_id: Id
    include_data: bool | None = None


class GetAttachmentResponse(Wire):
    _keep_null = frozenset({"data"})  # null: read with include_data false
    attachment: AttachmentMeta
    data: str | None = None


class ListAttachmentsRequest(Wire):
    session_id: Id


class ListAttachmentsResponse(Wire):
    attachments: list[AttachmentMeta]


class DeleteAttachmentRequest(Wire):
    session_id: Id
    attachment_id: Id


class DeleteAttachmentResponse(Wire):
    deleted: bool
