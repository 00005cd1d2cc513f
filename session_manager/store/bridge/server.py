"""The server side of ``session::store::*``: raw storage an fs main serves.

A bridged instance keeps every domain rule and stores through a main by
calling these functions (:mod:`session_manager.store.bridge.protocol` holds their
ids and wire models). They bypass the domain on purpose: deployment
plumbing, registered ``internal``, to be denied to agents. Each function is
one :class:`StoreFunction` row; the iii host registers them and gates each
call on the live adapter (only an fs runtime serves them).
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ..._wire.models import SessionEntry, SessionMeta
from ..._wire.shape import build
from ...errors import PARENT_NOT_FOUND, SessionError, invalid_request, not_found
from .._core.cas import derive_append_meta
from ..base import Commit, SessionStore
from . import protocol_cas as atomic
from . import protocol_search as searching
from . import server_atomic as served
from .protocol import (
    COMMIT_APPEND,
    DELETE_ACTIVE_LEAF,
    DELETE_ATTACHMENT,
    DELETE_ATTACHMENTS,
    DELETE_ENTRIES,
    DELETE_META,
    GET_ACTIVE_LEAF,
    GET_ATTACHMENT,
    GET_ENTRY,
    GET_META,
    LIST_ATTACHMENTS,
    LIST_ENTRIES,
    LIST_METAS,
    PUT_ATTACHMENT,
    PUT_ENTRY,
    PUT_META,
    SET_ACTIVE_LEAF,
    ActiveLeafResponse,
    AttachmentIdRequest,
    CommitAppendRequest,
    CommitAppendResponse,
    DeleteAttachmentRequest,
    DeletedResponse,
    EntryIdRequest,
    ListAttachmentsResponse,
    ListEntriesResponse,
    ListMetasRequest,
    ListMetasResponse,
    OkResponse,
    PutAttachmentRequest,
    PutEntryRequest,
    PutMetaRequest,
    SessionIdRequest,
    StoredAttachment,
)

LockFor = Callable[[str], "threading.Lock | threading.RLock"]


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
        existing = store.entry_held(sid, entry["id"])
        if existing is not None:
            return build[CommitAppendResponse](entry=existing, meta=meta, committed=False)
        if not req.parent_explicit:
            entry["parent_id"] = store.get_leaf(sid)
        elif entry.get("parent_id") is not None and store.entry_held(sid, entry["parent_id"]) is None:
            raise SessionError(PARENT_NOT_FOUND,
                               f"parent entry {entry['parent_id']} does not exist in session {sid}")
        meta = derive_append_meta(meta, (entry,))
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


def _delete_attachment(store: SessionStore, lock: LockFor, req: DeleteAttachmentRequest, raw: Raw) -> Any:
    key = None if req.op is None else ("attachment", req.session_id, req.attachment_id, req.op)
    with lock(req.session_id):
        deleted = served.RECENT_DELETES.once(key, lambda: store.delete_attachment(req.session_id, req.attachment_id))
    return build[DeletedResponse](deleted=deleted)


def _delete_attachments(store: SessionStore, lock: LockFor, req: SessionIdRequest, raw: Raw) -> Any:
    for meta in store.list_attachments(req.session_id):
        store.delete_attachment(req.session_id, meta["attachment_id"])
    return _ok()


def _search(store: SessionStore, lock: LockFor, req: searching.SearchRequest, raw: Raw) -> Any:
    return searching.serve(store, req)


_D = "Internal store protocol (fs instances only): "

STORE_FUNCTIONS: tuple[StoreFunction, ...] = (
    # Ours (server_atomic), registered first: a main that serves any
    # reference call already serves these, so a bridge never mistakes a
    # main still registering for a Rust one.
    StoreFunction(atomic.COMMIT, served.commit, atomic.CommitRequest, atomic.CommitResponse,
                  _D + "apply one commit (entries, leaf, meta) atomically under the session lock, with "
                  "compare-and-set; a stale commit writes nothing and answers committed: false."),
    StoreFunction(atomic.DELETE_SESSION, served.delete_session, atomic.DeleteSessionRequest,
                  atomic.DeleteSessionResponse, _D + "delete a whole session (meta, entries, leaf, "
                  "attachments) in one call."),
    StoreFunction(atomic.READ_PATH, served.read_path, atomic.ReadPathRequest, atomic.ReadPathResponse,
                  _D + "a window of a session's root -> leaf path, walked on the main."),
    StoreFunction(searching.SEARCH, _search, searching.SearchRequest, searching.SearchResponse,
                  _D + "the matches of a parsed session::search query inside the given sessions, from "
                  "the main's index."),
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
    StoreFunction(DELETE_ATTACHMENT, _delete_attachment, DeleteAttachmentRequest, DeletedResponse,
                  _D + "remove one attachment."),
    StoreFunction(DELETE_ATTACHMENTS, _delete_attachments, SessionIdRequest, OkResponse,
                  _D + "remove every attachment of a session."),
)  # fmt: skip

PUBLISH_DESCRIPTION = (_D + "ingest a bridged instance's event envelopes: the main calls its own event "
                       "functions and session::store::on-events for each.")
ON_EVENTS_DESCRIPTION = ("Internal event (fs instances only): called once per session event with "
                         "{function_id, payload, session_metadata?}; bridged instances observe it to relay "
                         "events to their own observers.")
