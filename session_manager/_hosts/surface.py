"""The one table describing the function surface.

Each row names a function, the service method that handles it (none for an
event function), its request
and response models, a description, and how it is exposed. Both hosts (the
embedded one and the iii worker) register from this table; nothing is
declared twice.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from .. import mentions
from .._service.service import Result, SessionService
from .._wire import api, search_api
from .._wire import events as ev
from ..errors import SessionError, invalid_request
from ..mentions import sessions as mention_sessions


@dataclass(frozen=True)
class Function:
    id: str
    # The service method serving it; None for an event function (the host
    # answers those itself: an event function's output is its input).
    handler: Callable[[SessionService, Any], Result] | None
    request: type[BaseModel]
    response: type[BaseModel]
    description: str
    nullable: bool = False  # the response may be null (reads of unknown ids)
    mutates: bool = False  # deny to agents; documentation for deployments
    # Hidden from discovery (engine::functions::list); implied by ``mutates``.
    internal: bool = False
    # Trace UIs hide its spans by default (every session function).
    trace_hidden: bool = True
    # Only this worker calls it (the event functions); the payload is
    # handed to the handler as-is instead of being parsed as ``request``.
    private: bool = False
    # Extra registration metadata merged over the flags (e.g. a mention
    # provider descriptor).
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # The Rust reference serves it too (False: ours alone, e.g. session::search; a switch back
    # to the reference loses it, and the golden-schema compatibility check leaves it out).
    reference: bool = True

    @property
    def is_internal(self) -> bool:
        return self.internal or self.mutates

    def registration_metadata(self) -> dict[str, Any]:
        """The ``metadata`` object sent with the registration.

        Event functions stay discoverable (consumers must find them to
        observe them) and say ``private`` instead: callers other than this
        worker would inject events."""
        out: dict[str, Any] = {}
        if self.is_internal:
            out["internal"] = True
        if self.trace_hidden:
            out["trace_hidden"] = True
        if self.private:
            out["private"] = True
        out.update(self.metadata)
        return out


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
    Function("session::purge", S.purge, api.PurgeRequest, api.PurgeResponse,
             "Delete whole sessions matching a required metadata subset (and optional status / "
             "updated_before), at most limit per call; more says whether more match; dry_run only lists. "
             "Calls session::on-deleted for each.", mutates=True, reference=False),
    Function("session::delete-tree", S.delete_tree, api.DeleteTreeRequest, api.DeleteTreeResponse,
             "Delete a session and every session whose metadata.parent_session_id leads to it, children "
             "first; idempotent. Calls session::on-deleted for each.", mutates=True, reference=False),
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
    # search
    Function("session::search", S.search, search_api.SearchRequest, search_api.SearchResponse,
             "Full-text search over the messages of every branch of the sessions a metadata subset "
             "filter allows; ranked (BM25), paged, each hit with a snippet. Event-silent.", reference=False),
    # chat mentions: @session(id="...")
    Function(mention_sessions.SEARCH_FN, mention_sessions.search, mentions.MentionSearchRequest,
             mentions.MentionSearchResponse,
             "Internal: sessions for the @session mention menu, by title words or id; top-level chats "
             "first, e2e sessions and the asking session left out.", internal=True),
    Function(mention_sessions.GET_FN, mention_sessions.get, mentions.MentionGetRequest, mentions.MentionView,
             "Internal: one session as a mention (pill, preview card, agent summary; never the draft), or "
             "null when unknown. Declares the session mention provider.", nullable=True, internal=True,
             metadata={mentions.METADATA_KEY: mention_sessions.PROVIDER.to_json()}),
)  # fmt: skip

BY_ID: dict[str, Function] = {f.id: f for f in FUNCTIONS}


def unknown_function(function_id: object) -> SessionError:
    """The error for a function id no row has (any value, ``None`` included):
    ``session/invalid_request`` naming it, with the nearest ids when it is a near miss."""
    detail = f"no function {function_id!r}"
    if function_id in ev.EVENT_FUNCTIONS:
        return invalid_request(f"{detail}: {function_id} is an event function; observe it, do not call it")
    near = _near(function_id) if isinstance(function_id, str) else []
    if near:
        return invalid_request(f"{detail}; did you mean {' or '.join(repr(n) for n in near)}?")
    return invalid_request(f"{detail} (known: {', '.join(sorted(BY_ID))})")


def _near(function_id: str) -> list[str]:
    """The ids close to ``function_id``; without the common ``session::`` prefix when the whole id
    matches none (``messages`` means ``session::messages``; the prefix alone would make any word close)."""
    near = difflib.get_close_matches(function_id, BY_ID, n=3, cutoff=0.6)
    if near:
        return near
    short = {fid.removeprefix("session::"): fid for fid in BY_ID}
    return [short[s] for s in difflib.get_close_matches(function_id.removeprefix("session::"), short, n=1, cutoff=0.6)]


def function(function_id: object) -> Function:
    """The row serving ``function_id``; raises :func:`unknown_function`'s error otherwise."""
    found = BY_ID.get(function_id) if isinstance(function_id, str) else None
    if found is None:
        raise unknown_function(function_id)
    return found


_EVENT_DESCRIPTIONS: dict[str, str] = {
    ev.ON_CREATED: "A session was created (create / ensure / fork).",
    ev.ON_MESSAGE_ADDED: "An entry was appended.",
    ev.ON_MESSAGE_UPDATED: "A message's content changed (streaming); keep the highest revision.",
    ev.ON_STATUS_CHANGED: "A session's status or status reason changed.",
    ev.ON_META_UPDATED: "A session's title, description or metadata changed.",
    ev.ON_DELETED: "A session and its entries were removed.",
}

# The six event functions: private (only this worker calls them), no args;
# observe them with filters on input.* to receive the events.
EVENT_SURFACE: tuple[Function, ...] = tuple(
    Function(fid, None, ev.EVENT_MODELS[fid], ev.EVENT_MODELS[fid],
             f"Event: {_EVENT_DESCRIPTIONS[fid]} Observe it; only session-manager calls it.",
             private=True)
    for fid in ev.EVENT_FUNCTIONS
)  # fmt: skip
