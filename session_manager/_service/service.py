"""All domain logic of the session store.

Every public method takes a validated request model and returns
``(response, events)``: the JSON-compatible response and the events the host
must deliver once the call has returned. Nothing here emits, and nothing
here knows whether the store is local or remote.

Mutations of one session are serialized by a per-session lock, so the
read-modify-write invariants (active leaf, message_count, revisions,
idempotent append) hold; reads take no lock. Ids and time come only from the
injected :class:`~session_manager.ids.IdGen` and :class:`~session_manager.clock.Clock`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel

from .._wire import api, cursors
from .._wire import events as ev
from .._wire.models import (
    ENTRY_MODELS,
    MESSAGE_MODELS,
    AttachmentMeta,
    CustomEntry,
    CustomPayload,
    FileBlock,
    MessageEntry,
    SessionMeta,
    dump,
)
from .._wire.shape import build, edit, shape
from ..clock import Clock, SystemClock
from ..errors import (
    ATTACHMENT_IN_USE,
    ATTACHMENT_TOO_LARGE,
    DETAILS_NOT_SUPPORTED,
    EMPTY_BATCH,
    INVALID_CURSOR,
    INVALID_ENTRY_KIND,
    PARENT_NOT_FOUND,
    STORAGE,
    SessionError,
    StoreError,
    UnstorableValue,
    entry_not_found,
    invalid_request,
    not_found,
)
from ..ids import IdGen, UuidIds
from ..store.base import Commit, Entry, Meta, SessionStore
from ..store.path import EntryPath
from .limits import LimitsCell
from .transcript import (
    elide_message,
    entry_attachment_ids,
    find_positions,
    is_run_member,
    item,
    kept_whole_in_run,
    role_of,
    without_image_data,
)

Result = tuple[Any, list[ev.Event]]

DEFAULT_MIME = "application/octet-stream"
_B64_CHUNK = 4 * 64 * 1024  # base64 characters decoded per step (a multiple of 4)
_B64_SHAPE = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def _meta(
    session_id: str,
    title: str,
    description: str,
    metadata: dict[str, Any] | None,
    now: int,
    *,
    forked_from: str | None = None,
    message_count: int = 0,
) -> Meta:
    return build[SessionMeta](session_id=session_id, title=title, description=description, status="idle",
                 metadata=metadata, forked_from=forked_from, created_at=now, updated_at=now,
                 message_count=message_count)


def _with(meta: Meta, **changes: Any) -> Meta:
    """A copy of ``meta`` with changes applied; ``None`` removes a key."""
    return edit[SessionMeta](meta, **changes)


class SessionService:
    """The session store's domain: 21 functions over a :class:`SessionStore`."""

    def __init__(
        self,
        store: SessionStore,
        *,
        ids: IdGen | None = None,
        clock: Clock | None = None,
        limits: LimitsCell | None = None,
    ) -> None:
        self.store = store
        self.ids: IdGen = ids or UuidIds()
        self.clock: Clock = clock or SystemClock()
        self.limits = limits or LimitsCell()
        # Optional on duck-typed generators (see IdGen): without it the store picks.
        self._tx: Callable[[], str] | None = getattr(self.ids, "tx_id", None)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    # -- plumbing -------------------------------------------------------------

    def session_lock(self, session_id: str) -> threading.Lock:
        """The lock that serializes mutations of one session (the store
        protocol takes it too, so raw writes never interleave with ours)."""
        # Locks are never dropped: two waiters must never hold different
        # locks for one session.
        with self._locks_guard:
            lock = self._locks.get(session_id)
            if lock is None:
                lock = self._locks[session_id] = threading.Lock()
            return lock

    @contextmanager
    def _session(self, session_id: str) -> Iterator[None]:
        with self.session_lock(session_id), storage_errors():
            yield

    def _commit(self, session_id: str, *, entries: tuple[Entry, ...] = (), leaf: str | None = None,
                meta: Meta | None = None) -> None:
        """Write one mutation (inside :meth:`_session`)."""
        self.store.commit(session_id, Commit(entries=entries, leaf=leaf, meta=meta, tx=self._tx))

    def _meta_or_raise(self, session_id: str) -> Meta:
        meta = self.store.get_meta(session_id)
        if meta is None:
            raise not_found(session_id)
        return meta

    def _entry_or_raise(self, session_id: str, entry_id: str) -> Entry:
        entry = self.store.get_entry(session_id, entry_id)
        if entry is None:
            raise entry_not_found(session_id, entry_id)
        return entry

    def _limit(self, requested: int | None) -> int:
        return self.limits.get().clamp(requested)

    # -- lifecycle --------------------------------------------------------------

    def create(self, req: api.CreateRequest) -> Result:
        session_id = self.ids.session_id()
        with self._session(session_id):
            meta = _meta(session_id, req.title or "", req.description or "", req.metadata, self.clock.now_ms())
            self._commit(session_id, meta=meta)
        return build[api.CreateResponse](session_id=session_id, meta=meta), [ev.created(meta)]

    def ensure(self, req: api.EnsureRequest) -> Result:
        session_id = req.session_id
        with self._session(session_id):
            existing = self.store.get_meta(session_id)
            if existing is not None:
                return build[api.EnsureResponse](session_id=session_id, meta=existing, created=False), []
            meta = _meta(session_id, req.title or "", req.description or "", req.metadata, self.clock.now_ms())
            self._commit(session_id, meta=meta)
        return build[api.EnsureResponse](session_id=session_id, meta=meta, created=True), [ev.created(meta)]

    def get(self, req: api.GetRequest) -> Result:
        with storage_errors():
            meta = self.store.get_meta(req.session_id)
        return (build[api.GetResponse](meta=meta) if meta is not None else None), []

    def list_sessions(self, req: api.ListRequest) -> Result:
        order = req.order or "updated_desc"
        limit = self._limit(req.limit)
        with storage_errors():
            metas = self.store.list_metas()
        if req.status is not None:
            metas = [m for m in metas if m.get("status") == req.status]
        if req.metadata:
            want = req.metadata
            metas = [m for m in metas if _metadata_matches(want, m.get("metadata"))]
        key_field = "updated_at" if order == "updated_desc" else "created_at"
        descending = order != "created_asc"
        keyed = sorted(((m[key_field], m["session_id"]), m) for m in metas) if metas else []
        if descending:
            keyed.reverse()
        start = 0
        if req.cursor is not None:
            after = cursors.decode_list_cursor(req.cursor, order)
            start = len(keyed)
            for i, (key, _) in enumerate(keyed):
                if (key < after) if descending else (key > after):
                    start = i
                    break
        page = keyed[start : start + limit]
        next_cursor = None
        if start + limit < len(keyed) and page:
            (k, sid), _ = page[-1]
            next_cursor = cursors.list_cursor(order, k, sid)
        return build[api.ListResponse](sessions=[m for _, m in page], next_cursor=next_cursor), []

    def set_meta(self, req: api.SetMetaRequest) -> Result:
        with self._session(req.session_id):
            meta = self._meta_or_raise(req.session_id)
            if req.title is None and req.description is None and req.metadata is None:
                return build[api.SetMetaResponse](meta=meta), []
            now = self.clock.now_ms()
            changes: dict[str, Any] = {"updated_at": now}
            if req.title is not None:
                changes["title"] = req.title
            if req.description is not None:
                changes["description"] = req.description
            if req.metadata is not None:
                changes["metadata"] = req.metadata  # wholesale: merging would leak stale tenancy keys
            meta = _with(meta, **changes)
            self._commit(req.session_id, meta=meta)
        return build[api.SetMetaResponse](meta=meta), [ev.meta_updated(meta, now)]

    def set_status(self, req: api.SetStatusRequest) -> Result:
        with self._session(req.session_id):
            meta = self._meta_or_raise(req.session_id)
            reason = req.reason if req.status != "idle" else None
            previous = meta["status"]
            if previous == req.status and meta.get("status_reason") == reason:
                return build[api.SetStatusResponse](status=previous, previous_status=previous), []
            now = self.clock.now_ms()
            meta = _with(meta, status=req.status, status_reason=reason, updated_at=now)
            self._commit(req.session_id, meta=meta)
        response = build[api.SetStatusResponse](status=req.status, previous_status=previous)
        return response, [ev.status_changed(meta, previous, now)]

    def set_draft(self, req: api.SetDraftRequest) -> Result:
        with self._session(req.session_id):
            meta = self._meta_or_raise(req.session_id)
            draft = req.draft if req.draft is not None and req.draft.strip() else None
            if req.attachment_ids is None:
                parked = meta.get("draft_attachments")
            else:
                parked = self._resolve_draft_attachments(req.session_id, req.attachment_ids)
            if meta.get("draft") != draft or meta.get("draft_attachments") != parked:
                # No updated_at bump and no event: drafts are saved at keystroke
                # cadence and must neither re-order list nor wake observers.
                meta = _with(meta, draft=draft, draft_attachments=parked)
                self._commit(req.session_id, meta=meta)
        return build[api.SetDraftResponse](draft=meta.get("draft"), attachments=meta.get("draft_attachments") or []), []

    def _resolve_draft_attachments(self, session_id: str, ids: list[str]) -> list[dict[str, Any]] | None:
        resolved: list[dict[str, Any]] = []
        seen: set[str] = set()
        for attachment_id in ids:
            if attachment_id in seen:
                continue
            seen.add(attachment_id)
            found = self.store.get_attachment_meta(session_id, attachment_id)
            if found is None:
                raise invalid_request(
                    f"attachment_ids: unknown attachment {attachment_id}; "
                    "upload it with session::put-attachment first"
                )
            resolved.append(found)
        return resolved or None

    def delete(self, req: api.DeleteRequest) -> Result:
        with self._session(req.session_id):
            meta = self.store.get_meta(req.session_id)
            if meta is None:
                return build[api.DeleteResponse](deleted=False), []
            self.store.delete_session(req.session_id)
            now = self.clock.now_ms()
        # Observers filter on the tenancy the session had when it went away.
        return build[api.DeleteResponse](deleted=True), [ev.deleted(req.session_id, now, meta.get("metadata"))]

    # -- messages ---------------------------------------------------------------

    def append(self, req: api.AppendRequest) -> Result:
        session_id = req.session_id
        with self._session(session_id):
            meta = self._meta_or_raise(session_id)
            if (req.message is None) == (req.custom is None):
                raise invalid_request("message, custom: exactly one of `message` / `custom` must be supplied")
            if req.entry_id is not None:
                existing = self.store.get_entry(session_id, req.entry_id)
                if existing is not None:
                    # Idempotent replay: the original, nothing written, nothing fired.
                    return _append_response(existing), []
            parent = self._parent(session_id, req.parent_id)
            now = self.clock.now_ms()
            entry_id = req.entry_id or self.ids.entry_id()
            entry = _new_entry(entry_id, parent, now, req.origin, req.message, req.custom)
            is_message = entry["kind"] == "message"
            meta = _with(meta, updated_at=now, message_count=meta["message_count"] + int(is_message))
            self._commit(session_id, entries=(entry,), leaf=entry_id, meta=meta)
        return _append_response(entry), [ev.message_added(session_id, entry, meta.get("metadata"))]

    def _parent(self, session_id: str, parent_id: str | None) -> str | None:
        if parent_id is None:
            return self.store.get_leaf(session_id)
        if self.store.get_entry(session_id, parent_id) is None:
            raise SessionError(
                PARENT_NOT_FOUND, f"parent entry {parent_id} does not exist in session {session_id}"
            )
        return parent_id

    def append_many(self, req: api.AppendManyRequest) -> Result:
        session_id = req.session_id
        with self._session(session_id):
            meta = self._meta_or_raise(session_id)
            if not req.messages:
                raise SessionError(EMPTY_BATCH, "messages must contain at least one message")
            parent = self._parent(session_id, req.parent_id)
            now = self.clock.now_ms()
            entries: list[Entry] = []
            for message in req.messages:
                entry = _new_entry(self.ids.entry_id(), parent, now, req.origin, message, None)
                entries.append(entry)
                parent = entry["id"]
            meta = _with(meta, updated_at=now, message_count=meta["message_count"] + len(entries))
            self._commit(session_id, entries=tuple(entries), leaf=parent, meta=meta)
        metadata = meta.get("metadata")
        ids = [e["id"] for e in entries]
        return build[api.AppendManyResponse](entry_ids=ids, last_entry_id=ids[-1]), [
            ev.message_added(session_id, e, metadata) for e in entries
        ]

    def update_message(self, req: api.UpdateMessageRequest) -> Result:
        session_id = req.session_id
        with self._session(session_id):
            meta = self._meta_or_raise(session_id)
            entry = self._entry_or_raise(session_id, req.entry_id)
            if entry["kind"] != "message":
                raise SessionError(
                    INVALID_ENTRY_KIND,
                    f"entry {req.entry_id} is a custom entry; session::update-message only applies to messages",
                )
            revision = int(entry.get("revision", 0))
            if req.expected_revision is not None and req.expected_revision != revision:
                return build[api.UpdateMessageResponse](updated=False, revision=revision), []
            message = entry["message"]
            role = message.get("role")
            changes: dict[str, Any] = {"content": [dump(b) if isinstance(b, BaseModel) else b for b in req.content]}
            if req.usage is not None:
                if role != "assistant":
                    raise SessionError(
                        INVALID_ENTRY_KIND,
                        f"entry {req.entry_id} has role {role}; `usage` applies only to assistant messages",
                    )
                changes["usage"] = dump(req.usage)
            if req.details is not None:
                if role not in ("function_result", "custom"):
                    raise SessionError(
                        DETAILS_NOT_SUPPORTED,
                        f"entry {req.entry_id} has role {role}; "
                        "`details` applies to function_result and custom messages",
                    )
                changes["details"] = req.details
            message = edit[MESSAGE_MODELS[role]](message, **changes)
            now = self.clock.now_ms()
            updated = edit[MessageEntry](entry, revision=revision + 1, message=message)
            meta = _with(meta, updated_at=now)
            self._commit(session_id, entries=(updated,), meta=meta)
        event = ev.message_updated(session_id, updated, req.origin, now, meta.get("metadata"))
        return build[api.UpdateMessageResponse](updated=True, revision=revision + 1), [event]

    def _path(self, session_id: str, leaf: str | None) -> EntryPath:
        return self.store.path(session_id, leaf)

    def messages(self, req: api.MessagesRequest) -> Result:
        session_id = req.session_id
        with storage_errors():
            self._meta_or_raise(session_id)
            if req.from_entry_id is not None:
                self._entry_or_raise(session_id, req.from_entry_id)
                leaf: str | None = req.from_entry_id
            else:
                leaf = self.store.get_leaf(session_id)
            path = self._path(session_id, leaf)
        if not len(path):
            return build[api.MessagesResponse](messages=[]), []
        roles = set(req.roles) if req.roles is not None else None
        include_custom = bool(req.include_custom) and roles is None

        def keep(entry: Entry) -> bool:
            if entry.get("kind") == "message":
                return roles is None or role_of(entry) in roles
            return include_custom

        start = 0
        anchor, what = (
            (cursors.decode_entry_cursor(req.cursor), "cursor entry")
            if req.cursor is not None
            else (req.after_entry_id, "after_entry_id")
        )
        if anchor is not None:
            i = path.index_of(anchor)
            if i is None or not keep(path[i]):
                raise SessionError(INVALID_CURSOR, f"{what} {anchor} is not on the requested path")
            start = i + 1
        found, more = find_positions(path, keep, start, self._limit(req.limit))
        image_data = req.include_image_data is not False
        next_cursor = cursors.entry_cursor(path[found[-1]]["id"]) if more and found else None
        items = [item(path[i], image_data=image_data) for i in found]
        return build[api.MessagesResponse](messages=items, next_cursor=next_cursor), []

    def messages_tail(self, req: api.MessagesTailRequest) -> Result:
        session_id = req.session_id
        with storage_errors():
            self._meta_or_raise(session_id)
            path = self._path(session_id, self.store.get_leaf(session_id))
        include_custom = req.include_custom is not False
        # Everything walks the path backwards from its end by raw index, so a
        # page costs O(page), however long the session (custom entries that
        # the request leaves out are stepped over, never listed up front).

        def keep(i: int) -> bool:
            return include_custom or path[i].get("kind") == "message"

        def before(i: int) -> int:
            """The nearest kept index below ``i``, or -1."""
            i -= 1
            while i >= 0 and not keep(i):
                i -= 1
            return i

        def member(i: int) -> bool:
            return is_run_member(path[i])

        def block_start(i: int) -> int:
            if not member(i):
                return i
            while True:
                p = before(i)
                if p < 0 or not member(p):
                    return i
                i = p

        def anchor(entry_id: str, name: str) -> int:
            i = path.index_of(entry_id)
            if i is None or not keep(i):
                raise SessionError(INVALID_CURSOR, f"{name} {entry_id} is not on the active path")
            return i

        if before(len(path)) < 0:
            return build[api.MessagesTailResponse](messages=[], has_more=False), []
        end = len(path)
        if req.before_entry_id is not None:
            end = block_start(anchor(req.before_entry_id, "before_entry_id"))
        until = None
        if req.until_entry_id is not None:
            until = block_start(anchor(req.until_entry_id, "until_entry_id"))
        start, blocks, limit = end, 0, self._limit(req.limit)
        while blocks < limit:
            p = before(start)
            if p < 0:
                break
            start, blocks = block_start(p), blocks + 1
        if until is not None and until < start:
            start = until
        image_data = req.include_image_data is not False
        items: list[dict[str, Any]] = []
        i = start
        while i < end:
            if not keep(i):
                i += 1
                continue
            if not member(i):
                items.append(item(path[i], image_data=image_data))
                i += 1
                continue
            run: list[Entry] = []
            while i < end and (not keep(i) or member(i)):
                if keep(i):
                    run.append(path[i])
                i += 1
            for entry, whole in zip(run, kept_whole_in_run(run), strict=True):
                if whole:
                    items.append(item(entry, image_data=image_data))
                else:
                    collapsed = edit[MessageEntry](entry, message=elide_message(entry["message"]))
                    items.append(item(collapsed, image_data=image_data, elided=True))
        oldest = items[0]["entry_id"] if items else None
        return build[api.MessagesTailResponse](messages=items, has_more=before(start) >= 0, oldest_entry_id=oldest), []

    def messages_range(self, req: api.MessagesRangeRequest) -> Result:
        session_id = req.session_id
        span = req.from_entry_id is not None or req.to_entry_id is not None
        with storage_errors():
            self._meta_or_raise(session_id)
            if span == (req.entry_ids is not None) or (
                span and (req.from_entry_id is None or req.to_entry_id is None)
            ):
                raise invalid_request(
                    "from_entry_id, to_entry_id, entry_ids: exactly one selector is required: "
                    "from_entry_id + to_entry_id, or entry_ids"
                )
            path = self._path(session_id, self.store.get_leaf(session_id))

            def on_path(entry_id: str) -> int:
                i = path.index_of(entry_id)
                if i is None:
                    self._entry_or_raise(session_id, entry_id)
                    raise SessionError(INVALID_CURSOR, f"entry {entry_id} is not on the active path")
                return i

            if span:
                assert req.from_entry_id is not None and req.to_entry_id is not None
                lo, hi = on_path(req.from_entry_id), on_path(req.to_entry_id)
                if lo > hi:
                    raise invalid_request(
                        f"from_entry_id {req.from_entry_id} comes after to_entry_id "
                        f"{req.to_entry_id} on the active path"
                    )
                selection: list[int] | range = range(lo, hi + 1)
            else:
                assert req.entry_ids is not None
                selection = sorted({on_path(eid) for eid in req.entry_ids})
        start = 0
        if req.cursor is not None:
            after = path.index_of(cursors.decode_entry_cursor(req.cursor))
            k = _bisect(selection, after) if after is not None else None
            if k is None:
                raise SessionError(INVALID_CURSOR, "cursor entry is not in the selection")
            start = k + 1
        limit = self._limit(req.limit)
        chosen = selection[start : start + limit]
        image_data = req.include_image_data is not False
        more = start + limit < len(selection) and len(chosen)
        next_cursor = cursors.entry_cursor(path[chosen[-1]]["id"]) if more else None
        items = [item(path[i], image_data=image_data) for i in chosen]
        return build[api.MessagesRangeResponse](messages=items, next_cursor=next_cursor), []

    def get_message(self, req: api.GetMessageRequest) -> Result:
        with storage_errors():
            entry = self.store.get_entry(req.session_id, req.entry_id)
        if entry is None:
            return None, []
        if req.include_image_data is False and entry.get("kind") == "message":
            entry = edit[MessageEntry](entry, message=without_image_data(entry["message"]))
        return build[api.GetMessageResponse](entry=entry), []

    # -- branching ----------------------------------------------------------------

    def fork(self, req: api.ForkRequest) -> Result:
        source_id = req.session_id
        with self._session(source_id):
            source = self._meta_or_raise(source_id)
            self._entry_or_raise(source_id, req.entry_id)
            path = self._path(source_id, req.entry_id)
            new_id = self.ids.session_id()
            now = self.clock.now_ms()
            id_map: dict[str, str] = {}
            copies: list[Entry] = []
            for entry in path:
                new_entry_id = self.ids.entry_id()
                id_map[entry["id"]] = new_entry_id
                parent = entry.get("parent_id")
                # A fresh entry starts a fresh revision space.
                copy = edit[ENTRY_MODELS[entry["kind"]]](entry, id=new_entry_id,
                             parent_id=id_map.get(parent) if parent else None, revision=0)
                copies.append(_remap_compaction(copy, id_map))
            meta = _meta(
                new_id,
                req.title if req.title is not None else source["title"],
                source["description"],
                source.get("metadata"),  # tenancy follows the fork
                now,
                forked_from=source_id,
                message_count=sum(1 for c in copies if c["kind"] == "message"),
            )
            # Attachments the copied path references travel under the same ids.
            referenced: list[str] = []
            for entry in path:
                for attachment_id in entry_attachment_ids(entry):
                    if attachment_id not in referenced:
                        referenced.append(attachment_id)
            for attachment_id in referenced:
                found = self.store.get_attachment_meta(source_id, attachment_id)
                data = self.store.read_attachment(source_id, attachment_id)
                if found is None or data is None:
                    continue  # a dangling reference stays dangling; nothing to copy
                self.store.put_attachment(edit[AttachmentMeta](found, session_id=new_id), [data])
            leaf = id_map[req.entry_id]
            with self.session_lock(new_id):
                self._commit(new_id, entries=tuple(copies), leaf=leaf, meta=meta)
        return build[api.ForkResponse](session_id=new_id, meta=meta), [ev.created(meta)]

    def set_active_leaf(self, req: api.SetActiveLeafRequest) -> Result:
        with self._session(req.session_id):
            meta = self._meta_or_raise(req.session_id)
            self._entry_or_raise(req.session_id, req.entry_id)
            # Team rule (the issue): every mutation but set-draft bumps updated_at.
            meta = _with(meta, updated_at=self.clock.now_ms())
            self._commit(req.session_id, leaf=req.entry_id, meta=meta)
        return build[api.SetActiveLeafResponse](active_leaf=req.entry_id), []

    # -- attachments ----------------------------------------------------------------

    def put_attachment(self, req: api.PutAttachmentRequest) -> Result:
        name = req.name.strip()
        if not name:
            raise invalid_request("name: attachment name must not be empty")
        size = _decoded_size(req.data)
        max_bytes = self.limits.get().max_attachment_bytes
        if size > max_bytes:
            raise SessionError(
                ATTACHMENT_TOO_LARGE, f"attachment {name} is {size} bytes; the limit is {max_bytes} bytes"
            )
        mime = req.mime.strip() or DEFAULT_MIME
        with self._session(req.session_id):
            self._meta_or_raise(req.session_id)
            meta = build[AttachmentMeta](attachment_id=self.ids.attachment_id(), session_id=req.session_id,
                         name=name, mime=mime, size=size, sha256="", created_at=self.clock.now_ms())
            # Decode, hash and write in one pass: the decoded bytes are never
            # held whole, and the metadata (written last) carries the hash.
            self.store.put_attachment(meta, _decode_chunks(req.data, meta))
        block = shape(FileBlock, meta, type="file")
        return build[api.PutAttachmentResponse](attachment=meta, block=block), []

    def get_attachment(self, req: api.GetAttachmentRequest) -> Result:
        with storage_errors():
            meta = self.store.get_attachment_meta(req.session_id, req.attachment_id)
            if meta is None:
                return None, []
            if req.include_data is False:
                return build[api.GetAttachmentResponse](attachment=meta, data=None), []
            data = self.store.read_attachment(req.session_id, req.attachment_id)
        if data is None:
            return None, []
        return build[api.GetAttachmentResponse](attachment=meta, data=base64.b64encode(data).decode("ascii")), []

    def list_attachments(self, req: api.ListAttachmentsRequest) -> Result:
        with storage_errors():
            self._meta_or_raise(req.session_id)
            found = self.store.list_attachments(req.session_id)
        found.sort(key=lambda m: (m.get("created_at", 0), m.get("attachment_id", "")))
        return build[api.ListAttachmentsResponse](attachments=found), []

    def delete_attachment(self, req: api.DeleteAttachmentRequest) -> Result:
        session_id, attachment_id = req.session_id, req.attachment_id
        with self._session(session_id):
            meta = self._meta_or_raise(session_id)
            for entry in self.store.entries(session_id):
                if attachment_id in entry_attachment_ids(entry):
                    raise SessionError(
                        ATTACHMENT_IN_USE, f"attachment {attachment_id} is referenced by entry {entry['id']}"
                    )
            deleted = self.store.delete_attachment(session_id, attachment_id)
            parked = meta.get("draft_attachments")
            if parked:
                kept = [m for m in parked if m.get("attachment_id") != attachment_id]
                if len(kept) != len(parked):
                    self._commit(session_id, meta=_with(meta, draft_attachments=kept or None))
        return build[api.DeleteAttachmentResponse](deleted=deleted), []


# -- helpers -------------------------------------------------------------------


@contextmanager
def storage_errors() -> Iterator[None]:
    """Store failures as the bus reports them: bad values are the caller's
    ``session/invalid_request``, everything else ``session/storage``."""
    try:
        yield
    except UnstorableValue as e:
        raise invalid_request(str(e)) from None
    except StoreError as e:
        raise SessionError(STORAGE, str(e)) from None
    except OSError as e:
        raise SessionError(STORAGE, str(e)) from None


def _metadata_matches(want: dict[str, Any], have: Any) -> bool:
    if not want:
        return True
    if not isinstance(have, dict):
        return False
    return all(k in have and _json_equal(have[k], v) for k, v in want.items())


def _json_equal(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1, and 1 equals 1.0 only as numbers.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _append_response(entry: Entry) -> dict[str, Any]:
    return build[api.AppendResponse](entry_id=entry["id"], parent_id=entry.get("parent_id"),
                                     timestamp=entry["timestamp"])


def _new_entry(
    entry_id: str,
    parent: str | None,
    now: int,
    origin: dict[str, Any] | None,
    message: BaseModel | None,
    custom: CustomPayload | None,
) -> Entry:
    if message is not None:
        return build[MessageEntry](kind="message", id=entry_id, parent_id=parent, timestamp=now, revision=0,
                     origin=origin, message=dump(message))
    assert custom is not None
    return build[CustomEntry](kind="custom", id=entry_id, parent_id=parent, timestamp=now, revision=0, origin=origin,
                 custom_type=custom.custom_type, data=custom.data)


def _remap_compaction(entry: Entry, id_map: dict[str, str]) -> Entry:
    """A copied compaction record points at the copy of its tail start."""
    data = entry.get("data")
    if entry.get("custom_type") == "compaction" and isinstance(data, dict):
        tail = data.get("tail_start_entry_id")
        if isinstance(tail, str) and tail in id_map:
            return edit[CustomEntry](entry, data={**data, "tail_start_entry_id": id_map[tail]})
    return entry


def _bisect(seq: list[int] | range, value: int) -> int | None:
    """Index of ``value`` in the sorted ``seq``, or ``None``."""
    lo, hi = 0, len(seq)
    while lo < hi:
        mid = (lo + hi) // 2
        if seq[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < len(seq) and seq[lo] == value else None


def _decoded_size(data: str) -> int:
    """Decoded length of standard padded base64, checked without decoding."""
    n = len(data)
    if n % 4:
        raise invalid_request("data: attachment data is not valid base64 (length is not a multiple of 4)")
    if n == 0:
        return 0
    # A regex scan allocates nothing, so bad input is refused before an id is
    # taken or a folder made; the last quantum must be canonical (zero spare bits).
    if _B64_SHAPE.fullmatch(data) is None:
        raise invalid_request("data: attachment data is not valid base64 (unexpected character or padding)")
    if base64.b64encode(base64.b64decode(data[-4:])).decode("ascii") != data[-4:]:
        raise invalid_request("data: attachment data is not valid base64 (non-zero trailing bits)")
    pad = 2 if data.endswith("==") else 1 if data.endswith("=") else 0
    return n // 4 * 3 - pad


def _decode_chunks(data: str, meta: dict[str, Any]) -> Iterator[bytes]:
    """Decoded bytes in chunks; once exhausted, ``meta["sha256"]`` is set."""
    digest = hashlib.sha256()
    for start in range(0, len(data), _B64_CHUNK):
        part = data[start : start + _B64_CHUNK]
        if "=" in part[:-2] or (start + _B64_CHUNK < len(data) and "=" in part):
            raise invalid_request("data: attachment data is not valid base64 (padding inside the data)")
        try:
            chunk = base64.b64decode(part, validate=True)
        except (binascii.Error, ValueError) as e:
            raise invalid_request(f"data: attachment data is not valid base64: {e}") from None
        digest.update(chunk)
        yield chunk
    meta["sha256"] = digest.hexdigest()


ServiceMethod = Callable[[SessionService, Any], Result]
