"""The one table describing the function surface.

Each row names a function, the service method that handles it, its request
and response models, a description, and how it is exposed. Both hosts (the
embedded one and the iii worker) register from this table; nothing is
declared twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from . import api
from .service import Result, SessionService


@dataclass(frozen=True)
class Function:
    id: str
    handler: Callable[[SessionService, Any], Result]
    request: type[BaseModel]
    response: type[BaseModel]
    description: str
    nullable: bool = False  # the response may be null (reads of unknown ids)
    mutates: bool = False  # deny to agents; documentation for deployments


S = SessionService

FUNCTIONS: tuple[Function, ...] = (
    # lifecycle
    Function("session::create", S.create, api.CreateRequest, api.CreateResponse,
             "Create a session (status idle). Calls session::on-created.", mutates=True),
    Function("session::ensure", S.ensure, api.EnsureRequest, api.EnsureResponse,
             "Create a session under a caller-chosen id unless it exists; an existing one is "
             "returned unchanged with created=false.", mutates=True),
    Function("session::get", S.get, api.GetRequest, api.GetResponse,
             "A session's metadata, or null when unknown.", nullable=True),
    Function("session::list", S.list_sessions, api.ListRequest, api.ListResponse,
             "Sessions filtered by status and metadata subset, ordered and paginated."),
    Function("session::set-meta", S.set_meta, api.SetMetaRequest, api.SetMetaResponse,
             "Replace title, description and/or metadata (wholesale). Calls session::on-meta-updated.",
             mutates=True),
    Function("session::set-status", S.set_status, api.SetStatusRequest, api.SetStatusResponse,
             "Move the coarse status; a reason-only change counts. Calls session::on-status-changed.",
             mutates=True),
    Function("session::set-draft", S.set_draft, api.SetDraftRequest, api.SetDraftResponse,
             "Park or clear unsent composer input. Event-silent and updated_at-neutral.", mutates=True),
    Function("session::delete", S.delete, api.DeleteRequest, api.DeleteResponse,
             "Remove a session with its entries and attachments. Calls session::on-deleted.",
             mutates=True),
    # messages
    Function("session::append", S.append, api.AppendRequest, api.AppendResponse,
             "Append one message or custom entry; idempotent on entry_id. Calls "
             "session::on-message-added.", mutates=True),
    Function("session::append-many", S.append_many, api.AppendManyRequest, api.AppendManyResponse,
             "Append a chained batch of messages (not idempotent).", mutates=True),
    Function("session::update-message", S.update_message, api.UpdateMessageRequest,
             api.UpdateMessageResponse,
             "Replace a message's content (streaming); each success bumps the revision. Calls "
             "session::on-message-updated.", mutates=True),
    Function("session::messages", S.messages, api.MessagesRequest, api.MessagesResponse,
             "The active path (or root -> from_entry_id), oldest first, paginated."),
    Function("session::messages-range", S.messages_range, api.MessagesRangeRequest,
             api.MessagesRangeResponse,
             "Whole entries of the active path: a from/to span or a list of ids."),
    Function("session::messages-tail", S.messages_tail, api.MessagesTailRequest, api.MessagesTailResponse,
             "The newest page of the active path in blocks, activity runs collapsed."),
    Function("session::get-message", S.get_message, api.GetMessageRequest, api.GetMessageResponse,
             "One entry, or null when unknown.", nullable=True),
    # branching
    Function("session::fork", S.fork, api.ForkRequest, api.ForkResponse,
             "Copy the root -> entry path into a new session. Calls session::on-created.", mutates=True),
    Function("session::set-active-leaf", S.set_active_leaf, api.SetActiveLeafRequest,
             api.SetActiveLeafResponse, "Switch the active branch. Event-silent.", mutates=True),
    # attachments
    Function("session::put-attachment", S.put_attachment, api.PutAttachmentRequest,
             api.PutAttachmentResponse, "Store an attachment (base64) and get its file block.",
             mutates=True),
    Function("session::get-attachment", S.get_attachment, api.GetAttachmentRequest,
             api.GetAttachmentResponse, "An attachment with its bytes (base64), or null.", nullable=True),
    Function("session::list-attachments", S.list_attachments, api.ListAttachmentsRequest,
             api.ListAttachmentsResponse, "A session's attachments, oldest first."),
    Function("session::delete-attachment", S.delete_attachment, api.DeleteAttachmentRequest,
             api.DeleteAttachmentResponse, "Remove an attachment no entry references.", mutates=True),
)  # fmt: skip

BY_ID: dict[str, Function] = {f.id: f for f in FUNCTIONS}
