"""What an optimistic mutation works from (:class:`Known`, :class:`Plan`) and
the arguments of ``sm_apply`` (:func:`apply_params`), which both write paths
send (see :mod:`.optimistic` and :mod:`.writes`)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from psycopg.types.json import Jsonb

from ..._wire.events import EVENT_FUNCTIONS, Event
from .._core.codec import encode_line as encode_json
from ..base import Commit, Entry, Meta
from ..sql.keys import key, key_or_none
from ..sql.values import sanitize
from .arrays import FixedTextArray, TextArray
from .at_leaf import HOLE_JSON, AtLeaf
from .outbox import channel_of as _channel_of

channel_of = functools.lru_cache(maxsize=64)(_channel_of)  # (a sha256 per write otherwise)

__all__ = ["Known", "Plan", "append_call_params", "apply_params"]

# sm_apply numbers the NOTIFY's functions by their place here (never changed).
_ALL = FixedTextArray(list(EVENT_FUNCTIONS))


@dataclass
class Known:
    """What this instance knows of one session (valid until a conflict says otherwise)."""

    meta: Meta
    text: str
    leaf: str | None
    # The entries it wrote last (at most optimistic.KNOWN_BODIES), oldest first: a dict (its copy,
    # each append's, copies its table at once; an OrderedDict's re-inserts item by item).
    bodies: dict[str, tuple[Entry, str]] = field(default_factory=dict)
    cut: AtLeaf | None = None  # ``text`` cut at its two numbers an append changes (at_leaf.segments)
    # The links (depth, jump_id, jump_depth) of the entries on the leaf's chain of jump pointers, by
    # stored key, as far as known (plain.py: a plain append sends its new entry's, computed from them).
    links: dict[str, tuple[int, str, int]] = field(default_factory=dict)
    # The session row's version (its xmin, as text) the last plain statement left, ``links`` valid
    # for it (plain.LINKED's compare-and-set); None when another path wrote it last.
    row: str | None = None
    # The session's version (SessionStore.session_token's: its row's xmin, leaf key and meta text)
    # this instance's last commit left (plain statements, sm_apply of migration 14: their answers
    # name the xmin; None: another path wrote it last), and the one that commit checked it was at
    # when it wrote (plain.LINKED's compare-and-set, sm_apply's check with p_expect_row: all three
    # compared; None when not checked so). What PgStore.version_left answers from.
    version: tuple[str, str | None, str] | None = None
    since: tuple[str, str | None, str] | None = None


@dataclass(init=False)
class Plan:
    """One optimistic mutation in progress: what it read, and its deferred commit.

    Made with its session's id only (one per mutation: its other fields start at their
    defaults, the class's own, and only its two containers are made here)."""

    session_id: str
    check: int = 0  # 0: read nothing of the session; 1: its meta and leaf as known; 2: it must not exist
    known: Known | None = None
    cached: bool = False  # a decision read remembered state (unverified until sm_apply)
    reads: dict[str, str | None] = field(default_factory=dict)  # entry id -> its text (None: absent)
    commit: Commit | None = None
    bodies: list[str] = field(default_factory=list)
    meta_text: str | None = None
    at_leaf: AtLeaf | None = None  # a plain append: the server chooses the leaf (see at_leaf.py)
    holed: bool = False  # the commit was resolved on the hole, not yet cut (at_leaf.choose_at_leaf)
    # A plain append resolved on the known leaf for the plain statement (at_leaf.resolve_at_leaf):
    # if that statement does not write it, the call is decided again, held off for the server.
    plain: bool = False
    links: dict[str, tuple[int, str, int]] | None = None  # Known.links after a plain append (plain.learn)
    row: str | None = None  # Known.row after a plain append (the session row version it left)
    version: tuple[str, str | None, str] | None = None  # Known.version after a commit that names it
    since: tuple[str, str | None, str] | None = None  # Known.since after a commit checked at a version
    # plain.LINKED wrote nothing, not saying why (see Optimistic._apply): 1; 2: it checked a row version
    plain_missed: int = 0

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.reads = {}
        self.bodies = []


def apply_params(session_id: str, commit: Commit, bodies: list[str], meta_text: str | None, *,
                 instance: str, schema: str, events: Sequence[Event] = (), plan: Plan | None = None) -> dict[str, Any]:
    """``sm_apply``'s arguments: the commit (its entries' and meta's exact texts given),
    the read set to check (``plan``; none: nothing checked) and the events to record."""
    known = plan.known if plan is not None else None
    meta = commit.meta
    metadata = meta.get("metadata") if meta is not None else None
    return {
        "sid": key(session_id), "check": plan.check if plan is not None else 0,
        "expect_meta": known.text if known is not None else None,
        "expect_leaf": key_or_none(known.leaf) if known is not None else None,
        "read_ids": TextArray(key(i) for i in plan.reads) if plan is not None else TextArray(),
        "read_bodies": TextArray(plan.reads.values()) if plan is not None else TextArray(),
        "ids": TextArray(key(e["id"]) for e in commit.entries),
        "parents": TextArray(key_or_none(e.get("parent_id")) for e in commit.entries),
        "bodies": TextArray(bodies),
        "has_meta": meta is not None, "meta": meta_text,
        "status": meta.get("status") if meta is not None else None,
        "created": meta.get("created_at") if meta is not None else None,
        "updated": meta.get("updated_at") if meta is not None else None,
        "metadata": Jsonb(sanitize(metadata)) if isinstance(metadata, dict) else None,
        "has_leaf": commit.leaf is not None, "leaf": key_or_none(commit.leaf),
        "instance": instance, "fids": TextArray(e.function_id for e in events),
        "payloads": TextArray(encode_json(e.payload).decode() for e in events),
        "channel": channel_of(schema), "all": _ALL,
        # (migration 14's sm_apply: the row's xmin checked too, when this instance's last commit
        # named the version it left and the meta text and leaf checked are that version's)
        "row": known.version[0] if known is not None and known.version is not None and plan is not None
        and plan.check == 1 and known.version[1:] == (key_or_none(known.leaf), known.text) else None,
    }


def append_call_params(session_id: str, commit: Commit, bodies: list[str], cut: AtLeaf, *, instance: str,
                       schema: str, events: Sequence[Event], plan: Plan) -> dict[str, Any]:
    """``sm_append_call``'s arguments (see :mod:`.at_leaf`): :func:`apply_params`' for the
    values the two share, built directly (without the meta's columns and the metadata's
    jsonb image, which the procedure does not take: the stored ones stay). Lists, not
    generators: every append builds seven (a generator is a call per element and one more)."""
    meta = commit.meta
    assert meta is not None
    updated = meta["updated_at"]
    entries = commit.entries
    return {
        "sid": key(session_id), "s0": cut.s0, "s1": cut.s1, "s2": cut.s2, "updated_first": cut.updated_first,
        "updated_text": str(updated), "added": cut.added, "hole": HOLE_JSON,
        "read_ids": TextArray([key(i) for i in plan.reads]),
        "read_bodies": TextArray(plan.reads.values()),
        "ids": TextArray([key(e["id"]) for e in entries]),
        "parents": TextArray([key_or_none(e.get("parent_id")) for e in entries]),
        "bodies": TextArray(bodies),
        "updated": updated, "leaf": key_or_none(commit.leaf),
        "instance": instance, "fids": TextArray([e.function_id for e in events]),
        "payloads": TextArray([encode_json(e.payload).decode() for e in events]),
        "channel": channel_of(schema), "all": _ALL,
    }
