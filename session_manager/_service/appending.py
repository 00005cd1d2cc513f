"""Writing entries: append (idempotent on a caller's entry id), append-many,
update-message (streaming revisions)."""

from __future__ import annotations

from typing import Any, NamedTuple

from pydantic import BaseModel

from .._wire import api
from .._wire import events as ev
from .._wire.dumping import _DUMPERS, _Unusual, fast_dump
from .._wire.events import ON_MESSAGE_ADDED, Event, _message_added
from .._wire.models import MESSAGE_MODELS, CustomEntry, CustomPayload, MessageEntry, SessionMeta, dump
from .._wire.shape import build, edit, editor
from ..errors import (
    DETAILS_NOT_SUPPORTED,
    EMPTY_BATCH,
    INVALID_ENTRY_KIND,
    PARENT_NOT_FOUND,
    SessionError,
    entry_not_found,
    invalid_request,
    not_found,
)
from ..store.base import Entry, append_commit
from .contention import retry_conflicts
from .core import Result, ServiceCore

__all__ = ["LeafMoved", "OwnedCustom", "append", "append_at", "append_custom_owned", "append_many", "update_message"]

# A session as a writer last saw it: its created_at and its active leaf.
SessionAt = tuple[Any, str | None]


class LeafMoved(Exception):
    """:func:`append_at`'s session is no longer as its caller saw it (another
    writer appended, or it was deleted and created again); nothing was written."""

class OwnedCustom(NamedTuple):
    """A custom entry this package's own code built (an adapter's hot write), appended
    without a request model: :func:`append_custom_owned`. Its builder vouches for what
    parsing an :class:`~session_manager._wire.api.AppendRequest` would check (ids
    non-empty strings, ``data`` exact JSON it hands over); the host still admits its size."""

    session_id: str
    custom_type: str
    data: Any
    parent_id: str | None
    at: SessionAt | None  # as :func:`append_at`'s; None: unconditionally
    data_json: bytes | None = None  # ``orjson.dumps(data)``, when encoded (to size the request, or by its builder)
    # Nothing will receive the append's event (no observer as the call began, and a store that
    # records none: its host drops them): not built. Whoever receives it gets it as before.
    unheard: bool = False


_new = object.__new__  # (an Event made without its __init__'s frame: see _append)

# update-message's edits of the entry and the meta (every streamed token): the fields they always change.
_revised = editor(MessageEntry, "revision", "message")
_touched = editor(SessionMeta, "updated_at")




@retry_conflicts
def append_at(core: ServiceCore, request: tuple[api.AppendRequest, SessionAt]) -> Result:
    """:func:`append` only while the session's ``(created_at, active leaf)`` is
    ``request[1]``, checked where the append reads them (so inside its
    transaction): :class:`LeafMoved` otherwise. A writer that keeps its own view
    of a session (an adapter's index) learns it is stale without a read of its own."""
    return _append(core, request[0], request[1])


@retry_conflicts
def append_custom_owned(core: ServiceCore, req: OwnedCustom) -> Result:
    """:func:`append` (or, with ``req.at``, :func:`append_at`) of a custom entry without
    a caller's entry id, for a request built as :class:`OwnedCustom` rather than parsed:
    the same reads, checks, commit and event; the response is the stored entry itself
    (the embedded host's typed path hands on only its id)."""
    session_id = req.session_id
    store = core.store
    with core.mutating(session_id):
        # (the session read and _parent's common case, inline: every typed append)
        meta, leaf = store.meta_and_leaf_to_commit(session_id)  # one lookup: the hot path reads both
        if meta is None:
            raise not_found(session_id)
        at = req.at
        if at is not None and (meta.get("created_at"), leaf) != at:
            raise LeafMoved(session_id)
        parent_id = req.parent_id
        parent = leaf if parent_id is None or parent_id == leaf else _parent(core, session_id, parent_id, leaf)
        # build[CustomEntry](kind="custom", id=..., parent_id=parent, timestamp=..., revision=0, origin=None,
        # custom_type=..., data=...), as a literal: the same keys in the model's order (no origin: None
        # is left out; parent_id and data kept even when None), no keyword call (every typed append;
        # test_typed_append_entry.py holds it to the builder)
        entry: Entry = {"kind": "custom", "id": core.ids.entry_id(), "parent_id": parent,
                        "timestamp": core.clock.now_ms(), "revision": 0, "custom_type": req.custom_type,
                        "data": req.data}
        # (with ``at`` and no parent named: on the leaf it names, never chained onto another: see _append;
        # core.commit_append inline, its ``checked`` as expect_meta)
        if parent_id is None and at is not None:
            applied = store.commit(session_id, append_commit(meta, (entry,), chain=False, tx=core._tx,
                                                             data_json=req.data_json, expect_meta=meta))
        else:
            applied = store.commit(session_id, append_commit(meta, (entry,), chain=parent_id is None, tx=core._tx,
                                                             data_json=req.data_json))
        entry, meta = applied.entries[0], applied.meta or meta
    if req.unheard:
        return entry, []
    return entry, [ev.message_added(session_id, entry, meta.get("metadata"))]


def _append(core: ServiceCore, req: api.AppendRequest, at: SessionAt | None = None) -> Result:
    # (the session read, _parent, _new_entry and core.commit_append written out where the common case
    # needs no call of its own: this runs on every append)
    session_id = req.session_id
    store = core.store
    with core.mutating(session_id):
        meta, leaf = store.meta_and_leaf_to_commit(session_id)  # one lookup: the hot path reads both
        if meta is None:
            raise not_found(session_id)
        if at is not None and (meta.get("created_at"), leaf) != at:
            raise LeafMoved(session_id)
        message = req.message
        if (message is None) == (req.custom is None):
            raise invalid_request("message, custom: exactly one of `message` / `custom` must be supplied")
        if req.entry_id is not None:
            existing = store.entry_held(session_id, req.entry_id)
            if existing is not None:
                # Idempotent replay: the original, nothing written, nothing fired.
                return _append_response(existing), []
        parent_id = req.parent_id
        parent = leaf if parent_id is None or parent_id == leaf else _parent(core, session_id, parent_id, leaf)
        now = core.clock.now_ms()
        entry_id = req.entry_id or core.ids.entry_id()
        if message is not None:
            try:  # (fast_dump, inline)
                dumped = _DUMPERS[type(message)](message, 0)
            except (_Unusual, RecursionError):
                dumped = dump(message)
            # (build[MessageEntry]'s dict, written out: its fields in order, origin only when given,
            # as the builder leaves a None out; tests/unit/test_append_inline_shapes.py compares them)
            origin = req.origin
            entry = ({"kind": "message", "id": entry_id, "parent_id": parent, "timestamp": now, "revision": 0,
                      "message": dumped} if origin is None else
                     {"kind": "message", "id": entry_id, "parent_id": parent, "timestamp": now, "revision": 0,
                      "origin": origin, "message": dumped})
        else:
            entry = _new_entry(entry_id, parent, now, req.origin, None, req.custom)
        # Chained (the store may place it on its own current leaf: a shared store's other writers)
        # unless made at a leaf (``at``, no parent named): there only, on the meta read (another
        # writer's append changes it), which the store checks as it writes: a conflict, read
        # again, LeafMoved. (A named parent is not chained anyway.)
        if parent_id is None and at is not None:
            applied = core.commit_append(session_id, meta, (entry,), chain=False, checked=True)
        else:
            applied = store.commit(session_id, append_commit(meta, (entry,), chain=parent_id is None, tx=core._tx))
        entry, meta = applied.entries[0], applied.meta or meta
    # (build[api.AppendResponse]'s dict, written out: an entry's id and timestamp are never None)
    response = {"entry_id": entry["id"], "parent_id": entry.get("parent_id"), "timestamp": entry["timestamp"]}
    # (ev.message_added's Event, its fields set without its __init__'s frame: a deferred payload)
    metadata = meta.get("metadata")
    event = _new(Event)
    event.function_id, event._payload, event._build = ON_MESSAGE_ADDED, None, _message_added
    event._args, event._about = (session_id, entry, metadata), (session_id, metadata)
    return response, [event]



# session::append: _append itself retried (no frame of its own between: this runs on every append).
append = retry_conflicts(_append)


def _parent(core: ServiceCore, session_id: str, parent_id: str | None, leaf: str | None) -> str | None:
    """The parent of a new entry: the session's ``leaf`` (as read), unless one is named.
    A named parent that is that leaf exists without a lookup (an active leaf is always an
    entry of its session: entries leave only with the session), so an append naming the
    entry it follows, as an adapter keeping its own chain does, reads nothing more
    (over a database, one query fewer)."""
    if parent_id is None or parent_id == leaf:
        return leaf
    if core.store.entry_held(session_id, parent_id) is None:
        raise SessionError(
            PARENT_NOT_FOUND, f"parent entry {parent_id} does not exist in session {session_id}"
        )
    return parent_id


@retry_conflicts
def append_many(core: ServiceCore, req: api.AppendManyRequest) -> Result:
    session_id = req.session_id
    with core.mutating(session_id):
        meta, leaf = core.store.meta_and_leaf_to_commit(session_id)
        if meta is None:
            raise not_found(session_id)
        if not req.messages:
            raise SessionError(EMPTY_BATCH, "messages must contain at least one message")
        parent = _parent(core, session_id, req.parent_id, leaf)
        now = core.clock.now_ms()
        entries: list[Entry] = []
        # (_new_entry's message branch inline, its lookups made once: this runs per message of a batch)
        new_id, origin, make = core.ids.entry_id, req.origin, build[MessageEntry]
        for message in req.messages:
            entry_id = new_id()
            entries.append(make(kind="message", id=entry_id, parent_id=parent, timestamp=now, revision=0,
                                origin=origin, message=fast_dump(message)))
            parent = entry_id
        applied = core.commit_append(session_id, meta, tuple(entries), chain=req.parent_id is None)
        entries, meta = list(applied.entries), applied.meta or meta
    metadata = meta.get("metadata")
    ids = [e["id"] for e in entries]
    return build[api.AppendManyResponse](entry_ids=ids, last_entry_id=ids[-1]), [
        ev.message_added(session_id, e, metadata) for e in entries
    ]


@retry_conflicts
def update_message(core: ServiceCore, req: api.UpdateMessageRequest) -> Result:
    session_id = req.session_id
    with core.mutating(session_id):
        meta, entry = core.store.meta_and_entry_to_commit(session_id, req.entry_id)  # one lookup per streamed token
        if meta is None:
            raise not_found(session_id)
        if entry is None:
            core.still_there(session_id)  # deleted between the two reads of a shared store: not_found
            raise entry_not_found(session_id, req.entry_id)
        meta_read = meta
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
        changes: dict[str, Any] = {"content": [fast_dump(b) if isinstance(b, BaseModel) else b
                                               for b in req.content]}
        if req.usage is not None:
            if role != "assistant":
                raise SessionError(
                    INVALID_ENTRY_KIND,
                    f"entry {req.entry_id} has role {role}; `usage` applies only to assistant messages",
                )
            changes["usage"] = fast_dump(req.usage)
        if req.details is not None:
            if role not in ("function_result", "custom"):
                raise SessionError(
                    DETAILS_NOT_SUPPORTED,
                    f"entry {req.entry_id} has role {role}; "
                    "`details` applies to function_result and custom messages",
                )
            changes["details"] = req.details
        model = MESSAGE_MODELS[role]
        # A streamed token changes only the content: that edit, without every other field's default.
        message = (editor(model, "content")(message, changes["content"]) if len(changes) == 1
                   else edit[model](message, **changes))
        now = core.clock.now_ms()
        updated = _revised(entry, revision + 1, message)
        meta = _touched(meta, now)
        core.commit(session_id, entries=(updated,), meta=meta, expect_meta=meta_read,
                     expect_revisions=((req.entry_id, revision),))
    event = ev.message_updated(session_id, updated, req.origin, now, meta.get("metadata"))
    return build[api.UpdateMessageResponse](updated=True, revision=revision + 1), [event]


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
                     origin=origin, message=fast_dump(message))
    assert custom is not None
    return build[CustomEntry](kind="custom", id=entry_id, parent_id=parent, timestamp=now, revision=0, origin=origin,
                 custom_type=custom.custom_type, data=custom.data)
