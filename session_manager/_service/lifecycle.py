"""Session lifecycle: create, ensure, get, set-meta, set-status, set-draft, delete."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._wire import api
from .._wire import events as ev
from .._wire.shape import build
from ..errors import invalid_request
from ..store.base import Meta
from .contention import retry_conflicts
from .core import Result, ServiceCore, changed, new_meta
from .storage_errors import storage_errors

__all__ = ["create", "delete", "ensure", "erase", "get", "set_draft", "set_meta", "set_status"]


@retry_conflicts
def create(core: ServiceCore, req: api.CreateRequest) -> Result:
    session_id = core.ids.session_id()
    with core.mutating(session_id):
        meta = new_meta(session_id, req.title or "", req.description or "", req.metadata, core.clock.now_ms())
        core.commit(session_id, meta=meta, expect_meta=None)
    return build[api.CreateResponse](session_id=session_id, meta=meta), [ev.created(meta)]


@retry_conflicts
def ensure(core: ServiceCore, req: api.EnsureRequest) -> Result:
    session_id = req.session_id
    with core.mutating(session_id):
        existing = core.store.get_meta(session_id)
        if existing is not None:
            return build[api.EnsureResponse](session_id=session_id, meta=existing, created=False), []
        meta = new_meta(session_id, req.title or "", req.description or "", req.metadata, core.clock.now_ms())
        core.commit(session_id, meta=meta, expect_meta=None)
    return build[api.EnsureResponse](session_id=session_id, meta=meta, created=True), [ev.created(meta)]


def get(core: ServiceCore, req: api.GetRequest) -> Result:
    with storage_errors():
        meta = core.store.get_meta(req.session_id)
    return (build[api.GetResponse](meta=meta) if meta is not None else None), []


@retry_conflicts
def set_meta(core: ServiceCore, req: api.SetMetaRequest) -> Result:
    with core.mutating(req.session_id):
        meta = core.meta_or_raise(req.session_id)
        if req.title is None and req.description is None and req.metadata is None:
            return build[api.SetMetaResponse](meta=meta), []
        now = core.clock.now_ms()
        changes: dict[str, Any] = {"updated_at": now}
        if req.title is not None:
            changes["title"] = req.title
        if req.description is not None:
            changes["description"] = req.description
        if req.metadata is not None:
            changes["metadata"] = req.metadata  # wholesale: merging would leak stale tenancy keys
        read, meta = meta, changed(meta, **changes)
        core.commit(req.session_id, meta=meta, expect_meta=read)
    return build[api.SetMetaResponse](meta=meta), [ev.meta_updated(meta, now)]


@retry_conflicts
def set_status(core: ServiceCore, req: api.SetStatusRequest) -> Result:
    with core.mutating(req.session_id):
        meta = core.meta_or_raise(req.session_id)
        reason = req.reason if req.status != "idle" else None
        previous = meta["status"]
        if previous == req.status and meta.get("status_reason") == reason:
            return build[api.SetStatusResponse](status=previous, previous_status=previous), []
        now = core.clock.now_ms()
        read, meta = meta, changed(meta, status=req.status, status_reason=reason, updated_at=now)
        core.commit(req.session_id, meta=meta, expect_meta=read)
    response = build[api.SetStatusResponse](status=req.status, previous_status=previous)
    return response, [ev.status_changed(meta, previous, now)]


@retry_conflicts
def set_draft(core: ServiceCore, req: api.SetDraftRequest) -> Result:
    with core.mutating(req.session_id):
        meta = core.meta_or_raise(req.session_id)
        draft = req.draft if req.draft is not None and req.draft.strip() else None
        if req.attachment_ids is None:
            parked = meta.get("draft_attachments")
        else:
            parked = _resolve_draft_attachments(core, req.session_id, req.attachment_ids)
        if meta.get("draft") != draft or meta.get("draft_attachments") != parked:
            # No updated_at bump and no event: drafts are saved at keystroke
            # cadence and must neither re-order list nor wake observers.
            read, meta = meta, changed(meta, draft=draft, draft_attachments=parked)
            core.commit(req.session_id, meta=meta, expect_meta=read)
    return build[api.SetDraftResponse](draft=meta.get("draft"), attachments=meta.get("draft_attachments") or []), []


def _resolve_draft_attachments(core: ServiceCore, session_id: str, ids: list[str]) -> list[dict[str, Any]] | None:
    resolved: list[dict[str, Any]] = []
    seen: set[str] = set()
    for attachment_id in ids:
        if attachment_id in seen:
            continue
        seen.add(attachment_id)
        found = core.store.get_attachment_meta(session_id, attachment_id)
        if found is None:
            raise invalid_request(
                f"attachment_ids: unknown attachment {attachment_id}; "
                "upload it with session::put-attachment first"
            )
        resolved.append(found)
    return resolved or None


def delete(core: ServiceCore, req: api.DeleteRequest) -> Result:
    event = erase(core, req.session_id)
    return build[api.DeleteResponse](deleted=event is not None), [event] if event is not None else []


def erase(core: ServiceCore, session_id: str, still: Callable[[Meta], bool] | None = None) -> ev.Event | None:
    """Delete one whole session under its lock, if it exists (and ``still(meta)``
    holds for what is stored now); its ``on-deleted`` event, or None."""
    with core.mutating(session_id):
        meta = core.store.get_meta(session_id)
        if meta is None or (still is not None and not still(meta)):
            return None
        if not core.store.delete_session(session_id):
            return None  # (read present, then gone: a writer sharing the store deleted it first and fired)
        now = core.clock.now_ms()
    # Observers filter on the tenancy the session had when it went away.
    return ev.deleted(session_id, now, meta.get("metadata"))

