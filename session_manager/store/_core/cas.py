"""Compare-and-set for commits: what a commit was decided on, checked at apply.

A :class:`~.base.Commit` may carry the meta its decision read
(``expect_meta``), the revisions of entries it rewrites
(``expect_revisions``), or be an *append* (``append=True``): new entries
whose meta the store derives from its own current meta, optionally chained
onto the store's current leaf (``chain=True``). Every adapter checks and
resolves a commit with :func:`resolve` inside the same critical section
that writes it, so several writers on one session (threads over one store,
or several bridged instances over one main) never interleave a decision
with another writer's write: a stale commit is refused with
:class:`~session_manager.errors.Conflict` and the domain re-reads and decides again.

"Prior version" is the meta itself (or :func:`meta_version`, its hash, on
the wire): nothing new is stored on disk.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from ...errors import Conflict, StoreError
from ..base import Commit, Entry, Meta
from .append import UNSET, Unset, derive_append_meta

__all__ = ["UNSET", "Unset", "check_new_ids", "derive_append_meta", "meta_version", "resolve"]


def meta_version(meta: Meta | None) -> str | None:
    """A stable hash of a meta (canonical JSON), ``None`` for an absent one."""
    if meta is None:
        return None
    text = json.dumps(meta, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _same_meta(current: Meta | None, expected: Meta | None) -> bool:
    return current is expected or meta_version(current) == meta_version(expected)


def check_new_ids(entries: tuple[Entry, ...], stored: Callable[[str], bool] | None = None) -> None:
    """:class:`Conflict` unless an append's entries have distinct ids and, with ``stored``,
    none after the first (:func:`resolve` checks that one) is stored. A store that checks
    storage itself (postgres's transactional path: in its write) passes no ``stored``."""
    ids = [e["id"] for e in entries]
    if len(set(ids)) != len(ids):
        raise Conflict("an append's new entries repeat an id")
    if stored is not None:
        for entry_id in ids[1:]:
            if stored(entry_id):
                raise Conflict(f"entry {entry_id} already exists")


def resolve(commit: Commit, meta: Meta | None, leaf: str | None,
            get_entry: Callable[[str], Entry | None], has_entry: Callable[[str], bool] | None = None) -> Commit:
    """The commit as it applies to the current state (``meta``, ``leaf``,
    entries by id), or :class:`~session_manager.errors.Conflict` when its expectations fail.
    Call it inside the critical section that then writes the result. With
    ``has_entry``, an append onto a named parent is refused if the parent is
    gone (an fs store in fsync mode undoes a write whose shared fsync failed,
    outside the session's lock: a parent checked a moment ago may be gone)."""
    if commit.expect_meta is not UNSET and not _same_meta(meta, commit.expect_meta):
        raise Conflict("the session meta changed since the commit was decided")
    for entry_id, revision in commit.expect_revisions:
        found = get_entry(entry_id)
        if found is None or int(found.get("revision", 0)) != revision:
            raise Conflict(f"entry {entry_id} changed since the commit was decided")
    if not commit.append:
        return commit
    if meta is None:
        raise Conflict("the session no longer exists")
    entries = commit.entries
    if not entries:
        raise StoreError("an append commit needs at least one entry")
    first = entries[0]
    if has_entry(first["id"]) if has_entry is not None else get_entry(first["id"]) is not None:
        raise Conflict(f"entry {first['id']} already exists")
    if len(entries) > 1:
        # Every new entry, not the first alone: a batch's later id that is stored (or repeated
        # within it: a generator two instances share) was written over the stored entry.
        # (A conflict: the service draws fresh ids; a caller's id re-reads and replays.)
        check_new_ids(entries, has_entry if has_entry is not None else lambda i: get_entry(i) is not None)
    if not commit.chain:
        parent = first.get("parent_id")
        if has_entry is not None and parent is not None and not has_entry(parent):
            raise Conflict(f"parent entry {parent} is no longer in the session")
    elif first.get("parent_id") != leaf:
        entries = ({**first, "parent_id": leaf}, *entries[1:])
    same_ids = commit.leaf == entries[-1]["id"]
    if same_ids and commit.derived_from is meta and commit.meta is not None:
        # Derived from this very meta: the same derivation, not redone (a first entry given
        # another parent changes neither the count nor the time the meta takes from them).
        if entries is commit.entries:  # decided on the current state (the single-writer case)
            return commit
        derived = dict(commit.meta)  # (the resolved commit's own: a store may fill it in)
    elif entries is commit.entries and same_ids:
        derived = derive_append_meta(meta, entries)
        if commit.meta == derived:
            return commit
    else:
        derived = derive_append_meta(meta, entries)
    # (a Commit built field by field: dataclasses.replace walks the fields in Python, ~20,000
    # instructions on every append a shared store resolves onto the server's leaf)
    return Commit(entries=entries, leaf=entries[-1]["id"], meta=derived, tx=commit.tx,
                  expect_meta=commit.expect_meta, expect_revisions=commit.expect_revisions,
                  append=commit.append, chain=commit.chain, derived_from=meta, data_json=commit.data_json)
