"""Branching: fork a path into a new session (attachments travel along),
switch the active leaf."""

from __future__ import annotations

from .._wire import api
from .._wire import events as ev
from .._wire.models import ENTRY_MODELS, AttachmentMeta, CustomEntry
from .._wire.shape import build, edit
from ..errors import STORAGE, Conflict, SessionError
from ..store.base import AttachmentMeta as StoredAttachment
from ..store.base import Entry
from .contention import retry_conflicts
from .core import Result, ServiceCore, changed, new_meta
from .transcript import entry_attachment_ids

__all__ = ["fork", "set_active_leaf"]

# How many times one copy's id is drawn again while the generator repeats an id this fork drew.
REDRAWS = 16


@retry_conflicts
def fork(core: ServiceCore, req: api.ForkRequest) -> Result:
    source_id = req.session_id
    with core.mutating(source_id):
        source = core.meta_or_raise(source_id)
        core.entry_or_raise(source_id, req.entry_id)
        path = core.path(source_id, req.entry_id)
        new_id = core.ids.session_id()
        now = core.clock.now_ms()
        id_map: dict[str, str] = {}
        copies: list[Entry] = []
        drawn: set[str] = set()
        for entry in path:
            new_entry_id = _fresh_entry_id(core, drawn)
            id_map[entry["id"]] = new_entry_id
            parent = entry.get("parent_id")
            # A fresh entry starts a fresh revision space.
            copy = edit[ENTRY_MODELS[entry["kind"]]](entry, id=new_entry_id,
                         parent_id=id_map.get(parent) if parent else None, revision=0)
            copies.append(_remap_compaction(copy, id_map))
        meta = new_meta(
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
        attachments: list[tuple[StoredAttachment, bytes]] = []
        for attachment_id in referenced:
            found = core.store.get_attachment_meta(source_id, attachment_id)
            data = core.store.read_attachment(source_id, attachment_id)
            if found is None or data is None:
                continue  # a dangling reference stays dangling; nothing to copy
            attachments.append((edit[AttachmentMeta](found, session_id=new_id), data))
        leaf = id_map[req.entry_id]
    # Not nested in the source's block: its settle must confirm what was
    # copied is durable before the copy is written, and two forks whose ids
    # share stripes in opposite order would deadlock. The copy is a snapshot
    # already, and nobody else knows the new id yet: no lock of it to take.
    with core.mutating_new(new_id):
        if core.store.get_meta(new_id) is not None:
            # A generator that repeated a session id (an injected one): decided again under a
            # fresh id before anything is written. The attachments went first, into the other
            # session (over its own of the same id), and sqlite's commit wrote over its meta.
            raise Conflict(f"fork: session {new_id} already exists")
        for copied, data in attachments:
            core.store.put_attachment(copied, [data])
        core.commit(new_id, entries=tuple(copies), leaf=leaf, meta=meta, expect_meta=None)
    return build[api.ForkResponse](session_id=new_id, meta=meta), [ev.created(meta)]


@retry_conflicts
def set_active_leaf(core: ServiceCore, req: api.SetActiveLeafRequest) -> Result:
    with core.mutating(req.session_id):
        meta = core.meta_or_raise(req.session_id)
        core.entry_or_raise(req.session_id, req.entry_id)
        # Team rule (the issue): every mutation but set-draft bumps updated_at.
        moved = changed(meta, updated_at=core.clock.now_ms())
        core.commit(req.session_id, leaf=req.entry_id, meta=moved, expect_meta=meta)
    return build[api.SetActiveLeafResponse](active_leaf=req.entry_id), []


def _fresh_entry_id(core: ServiceCore, drawn: set[str]) -> str:
    """A new entry id none of this fork's copies has (``drawn``, which it joins): a generator
    that repeats one (an injected one; the default draws random ids) is asked again, at most
    :data:`REDRAWS` times, then the fork is refused before anything is written. Two copies under
    one id would be stored one over the other (the copy naming itself as its parent's parent)."""
    for _ in range(REDRAWS + 1):
        entry_id = core.ids.entry_id()
        if entry_id not in drawn:
            drawn.add(entry_id)
            return entry_id
    raise SessionError(STORAGE, f"fork: the id generator repeated entry id {entry_id!r} "
                                f"{REDRAWS + 1} times among one fork's copies; nothing was written")


def _remap_compaction(entry: Entry, id_map: dict[str, str]) -> Entry:
    """A copied compaction record points at the copy of its tail start."""
    data = entry.get("data")
    if entry.get("custom_type") == "compaction" and isinstance(data, dict):
        tail = data.get("tail_start_entry_id")
        if isinstance(tail, str) and tail in id_map:
            return edit[CustomEntry](entry, data={**data, "tail_start_entry_id": id_map[tail]})
    return entry
