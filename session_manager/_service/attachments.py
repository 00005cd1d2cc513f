"""Attachments: put (streamed base64 decode, size cap), get, list, delete."""

from __future__ import annotations

import base64

from .._wire import api
from .._wire.models import AttachmentMeta, FileBlock
from .._wire.shape import build, shape
from ..errors import ATTACHMENT_IN_USE, ATTACHMENT_TOO_LARGE, SessionError, invalid_request
from .base64_codec import decode_chunks, decoded_size
from .contention import retry_conflicts
from .core import Result, ServiceCore, changed
from .storage_errors import storage_errors
from .transcript import entry_attachment_ids

__all__ = ["DEFAULT_MIME", "delete_attachment", "get_attachment", "list_attachments", "put_attachment"]

DEFAULT_MIME = "application/octet-stream"


def put_attachment(core: ServiceCore, req: api.PutAttachmentRequest) -> Result:
    name = req.name.strip()
    if not name:
        raise invalid_request("name: attachment name must not be empty")
    size = decoded_size(req.data)
    max_bytes = core.limits.get().max_attachment_bytes
    if size > max_bytes:
        raise SessionError(
            ATTACHMENT_TOO_LARGE, f"attachment {name} is {size} bytes; the limit is {max_bytes} bytes"
        )
    mime = req.mime.strip() or DEFAULT_MIME
    with core.mutating(req.session_id):
        core.meta_or_raise(req.session_id)
        meta = build[AttachmentMeta](attachment_id=core.ids.attachment_id(), session_id=req.session_id,
                     name=name, mime=mime, size=size, sha256="", created_at=core.clock.now_ms())
        # Decode, hash and write in one pass: the decoded bytes are never
        # held whole, and the metadata (written last) carries the hash.
        core.store.put_attachment(meta, decode_chunks(req.data, meta))
    block = shape(FileBlock, meta, type="file")
    return build[api.PutAttachmentResponse](attachment=meta, block=block), []


def get_attachment(core: ServiceCore, req: api.GetAttachmentRequest) -> Result:
    with storage_errors():
        meta = core.store.get_attachment_meta(req.session_id, req.attachment_id)
        if meta is None:
            return None, []
        if req.include_data is False:
            return build[api.GetAttachmentResponse](attachment=meta, data=None), []
        data = core.store.read_attachment(req.session_id, req.attachment_id)
    if data is None:
        return None, []
    return build[api.GetAttachmentResponse](attachment=meta, data=base64.b64encode(data).decode("ascii")), []


def list_attachments(core: ServiceCore, req: api.ListAttachmentsRequest) -> Result:
    with storage_errors():
        core.meta_or_raise(req.session_id)
        found = core.store.list_attachments(req.session_id)
    found.sort(key=lambda m: (m.get("created_at", 0), m.get("attachment_id", "")))
    return build[api.ListAttachmentsResponse](attachments=found), []


@retry_conflicts
def delete_attachment(core: ServiceCore, req: api.DeleteAttachmentRequest) -> Result:
    session_id, attachment_id = req.session_id, req.attachment_id
    with core.mutating(session_id):
        meta = core.meta_or_raise(session_id)
        for entry in core.store.entries_held(session_id):
            if attachment_id in entry_attachment_ids(entry):
                raise SessionError(
                    ATTACHMENT_IN_USE, f"attachment {attachment_id} is referenced by entry {entry['id']}"
                )
        deleted = core.store.delete_attachment(session_id, attachment_id)
        parked = meta.get("draft_attachments")
        if parked:
            kept = [m for m in parked if m.get("attachment_id") != attachment_id]
            if len(kept) != len(parked):
                core.commit(session_id, meta=changed(meta, draft_attachments=kept or None), expect_meta=meta)
    return build[api.DeleteAttachmentResponse](deleted=deleted), []

