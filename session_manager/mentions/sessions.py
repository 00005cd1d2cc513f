"""The ``@session(id="<session_id>")`` provider: ``session::mention::search``
feeds the console's ``@session:`` menu, ``session::mention::get`` turns one
id into the pill, the preview card and the agent's one-line summary.

Both read only (``(response, [])``, no events) through the store's read API.

Two facts about a session come from its record, as in the reference worker:

- **Sub-agent**: its ``metadata.parent_session_id`` is a non-empty string
  (the session an agent spawned it from). Everything else is a top-level
  chat; searches list top-level chats first.
- **Kind** (``user``, ``automation`` or ``e2e``): the reference keeps it as a
  field of the session record, which the v1.1.1 wire model does not carry.
  We read the record's own ``kind`` when a writer stored one, else
  ``metadata.kind``; anything else is ``user``. End-to-end test sessions
  (kind ``e2e``) never appear in a search.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from .._service.service import Result, SessionService
from .._wire.shape import build
from ..errors import STORAGE, SessionError, StoreError, UnstorableValue
from ..store.base import Meta
from .provider import MentionDetails, MentionProvider
from .token import words as _words
from .wire import (
    MentionField,
    MentionGetRequest,
    MentionItem,
    MentionSearchRequest,
    MentionSearchResponse,
    MentionView,
    OpenSession,
    json_text,
)

SEARCH_FN = "session::mention::search"
GET_FN = "session::mention::get"
MENTION_NAME = "session"
ICON = "session"

T = TypeVar("T")
Kind = Literal["user", "automation", "e2e"]
_KINDS: frozenset[str] = frozenset({"user", "automation", "e2e"})

_STATUS_LABEL = {"idle": "Idle", "working": "Working", "done": "Done", "error": "Error"}
_STATUS_COLOR = {"idle": "neutral", "working": "blue", "done": "green", "error": "rose"}
_STATUS_TONE = {"idle": "neutral", "working": "info", "done": "success", "error": "danger"}
_PRIVATE_KEYS = ("draft", "draft_attachments")

PROVIDER = MentionProvider(
    name=MENTION_NAME,
    label="Sessions",
    search=SEARCH_FN,
    description="A chat session, by session id; its transcript reads through session::messages-tail",
    icon=ICON,
    color="neutral",
    details=MentionDetails(function_id="session::get", id_field="session_id"),
)
"""The descriptor ``session::mention::get`` registers."""


# -- the two functions -------------------------------------------------------------


def search(service: SessionService, req: MentionSearchRequest) -> Result:
    """``session::mention::search``: the best-matching sessions as menu rows."""
    metas = _read(service.store.list_metas)
    hits = search_metas(metas, req.trimmed_query(), req.asking_session(), req.effective_limit())
    items = [item(meta).model_dump(mode="json", exclude_none=True) for meta in hits]
    return build[MentionSearchResponse](items=items), []


def get(service: SessionService, req: MentionGetRequest) -> Result:
    """``session::mention::get``: the view of one session, or null when unknown."""
    if not req.id:
        return None, []
    try:
        meta = _read(lambda: service.store.get_meta(req.id))
    except UnstorableValue:
        # An id this store cannot hold (longer than an fs data_dir's file names, which the
        # token grammar's 512 characters can be) names no session it knows: null, as for any.
        return None, []
    return (view(meta).to_json() if meta is not None else None), []


def _read(fetch: Callable[[], T]) -> T:
    try:
        return fetch()
    except UnstorableValue:
        raise  # the caller's value, not a storage fault
    except (StoreError, OSError) as e:
        raise SessionError(STORAGE, str(e)) from None


# -- ranking ------------------------------------------------------------------------

ID_PREFIX_MIN_BYTES = 4  # the shortest query (UTF-8 bytes) that matches as an id prefix


def search_metas(metas: list[Meta], query: str, exclude: str | None, limit: int) -> list[Meta]:
    """Sessions matching ``query`` (case-insensitive), best first.

    Tiers: 0 the id or title equals the query, or the title starts with it;
    1 the id starts with a query of 4+ UTF-8 bytes (as the reference counts
    ``str::len``: ``éé`` and ``日本`` qualify), or every query word
    starts a word of the title; 2 the title contains the query; 3 the
    description does. Within a tier top-level chats come before sub-agents,
    then the most recently updated, then by id. An empty query puts every
    session in tier 0. e2e sessions and ``exclude`` (the asking session)
    never match.
    """
    q = query.lower()
    terms = q.split()
    # Bytes, not characters: the reference's rule is on the UTF-8 length (surrogatepass: a
    # lone surrogate JSON let through counts as its 3 bytes instead of failing the search).
    id_prefix = len(q.encode("utf-8", "surrogatepass")) >= ID_PREFIX_MIN_BYTES
    ranked: list[tuple[int, bool, int, str, Meta]] = []
    for meta in metas:
        session_id = meta["session_id"]
        if session_id == exclude or session_kind(meta) == "e2e":
            continue
        tier = 0 if not q else _tier(meta, q, terms, id_prefix)
        if tier is not None:
            ranked.append((tier, parent_session(meta) is not None, -meta["updated_at"], session_id, meta))
    ranked.sort(key=lambda r: r[:4])
    return [r[4] for r in ranked[:limit]]


def _tier(meta: Meta, q: str, terms: list[str], id_prefix: bool) -> int | None:
    session_id = meta["session_id"].lower()
    title = meta["title"].lower()
    if session_id == q or title.startswith(q):  # a title equal to q starts with it
        return 0
    if id_prefix and session_id.startswith(q):
        return 1
    if terms:
        words = _words(title)
        if all(any(w.startswith(t) for w in words) for t in terms):
            return 1
    if q in title:
        return 2
    if q in meta["description"].lower():
        return 3
    return None


# -- what a session looks like as a mention ------------------------------------------------


def session_kind(meta: Meta) -> Kind:
    """``user``, ``automation`` or ``e2e`` (see the module docstring)."""
    for raw in (meta.get("kind"), _metadata_str(meta, "kind")):
        if isinstance(raw, str) and raw in _KINDS:
            return raw  # type: ignore[return-value]
    return "user"


def parent_session(meta: Meta) -> str | None:
    """The parent session of a sub-agent session; ``None`` for a top-level chat."""
    return _metadata_str(meta, "parent_session_id")


def item(meta: Meta) -> MentionItem:
    """One search row."""
    return MentionItem(
        id=meta["session_id"],
        label=_label(meta),
        hint=_hint(meta),
        description=_description(meta),
        color=_STATUS_COLOR.get(meta["status"], "neutral"),
    )


def view(meta: Meta) -> MentionView:
    """The pill, preview card, summary and public record of one session;
    never its parked draft."""
    status = meta["status"]
    updated = rfc3339_from_ms(meta["updated_at"])
    fields = [
        MentionField(label="Status", value=_status_label(status), tone=_STATUS_TONE.get(status, "neutral")),
        MentionField(label="Messages", value=str(meta["message_count"])),
        MentionField(label="Updated", value=updated),
    ]
    reason = meta.get("status_reason")
    if isinstance(reason, str) and reason:
        fields.append(MentionField(label="Reason", value=reason))
    agent = _metadata_str(meta, "agent_profile")
    if agent is not None:
        fields.append(MentionField(label="Agent", value=agent))
    parent = parent_session(meta)
    if parent is not None:
        fields.append(MentionField(label="Parent", value=parent))
    forked_from = meta.get("forked_from")
    if isinstance(forked_from, str) and forked_from:
        fields.append(MentionField(label="Forked from", value=forked_from))
    kind = session_kind(meta)
    if kind != "user":
        fields.append(MentionField(label="Kind", value=kind))
    return MentionView(
        id=meta["session_id"],
        label=_label(meta),
        hint=_hint(meta),
        description=_description(meta),
        icon=ICON,
        color=_STATUS_COLOR.get(status, "neutral"),
        fields=fields,
        open=OpenSession(session=meta["session_id"]),
        summary=_summary(meta, updated),
        data=public_meta(meta),
        updated_at=updated,
    )


def public_meta(meta: Meta) -> dict[str, Any]:
    """The session record without the parked composer draft: that is the
    owner's unsent input and no part of what a mention shares."""
    return {k: json.loads(json.dumps(v)) for k, v in meta.items() if k not in _PRIVATE_KEYS}


def _label(meta: Meta) -> str:
    return meta["title"].strip() or "Untitled session"


def _hint(meta: Meta) -> str | None:
    return "sub-agent" if parent_session(meta) is not None else None


def _status_label(status: str) -> str:
    return _STATUS_LABEL.get(status, status)


def _description(meta: Meta) -> str:
    n = meta["message_count"]
    return f"{_status_label(meta['status'])} · {n} message{'' if n == 1 else 's'}"


def _summary(meta: Meta, updated: str) -> str:
    line = (
        f"Chat session {json_text(_label(meta))} ({meta['session_id']}) · "
        f"status: {_status_label(meta['status']).lower()} · {meta['message_count']} message(s) · updated {updated}"
    )
    agent = _metadata_str(meta, "agent_profile")
    if agent is not None:
        line += f" · agent: {agent}"
    parent = parent_session(meta)
    if parent is not None:
        line += f" · sub-agent of {parent}"
    return line


def _metadata_str(meta: Meta, key: str) -> str | None:
    metadata = meta.get("metadata")
    value = metadata.get(key) if isinstance(metadata, dict) else None
    return value if isinstance(value, str) and value else None


# -- time --------------------------------------------------------------------------------


def rfc3339_from_ms(ms: int) -> str:
    """RFC 3339 in UTC with milliseconds, for any int64 milliseconds since the
    epoch (proleptic Gregorian; ``datetime`` stops at year 9999)."""
    secs, millis = divmod(ms, 1000)
    days, day_secs = divmod(secs, 86_400)
    year, month, day = _civil_date(days)
    hh, rest = divmod(day_secs, 3600)
    mm, ss = divmod(rest, 60)
    return f"{year:04d}-{month:02d}-{day:02d}T{hh:02d}:{mm:02d}:{ss:02d}.{millis:03d}Z"


def _civil_date(days: int) -> tuple[int, int, int]:
    """(year, month, day) of ``days`` after 1970-01-01, counting in 400-year
    cycles of 146097 days from a year that starts on 1 March (so the leap
    day falls last)."""
    shifted = days + 719_468  # days from 0000-03-01
    cycle, day_of_cycle = divmod(shifted, 146_097)
    year_of_cycle = (day_of_cycle - day_of_cycle // 1460 + day_of_cycle // 36_524 - day_of_cycle // 146_096) // 365
    day_of_year = day_of_cycle - (365 * year_of_cycle + year_of_cycle // 4 - year_of_cycle // 100)
    month_index = (5 * day_of_year + 2) // 153  # 0 = March
    day = day_of_year - (153 * month_index + 2) // 5 + 1
    month = month_index + 3 if month_index < 10 else month_index - 9
    year = year_of_cycle + cycle * 400 + (1 if month <= 2 else 0)
    return year, month, day
