"""In-memory state of one session, shared by every store adapter.

Applying records here is the single definition of replay semantics:
last-wins per key (meta, each entry id, the leaf). It also keeps the active
path indexed so reads of a loaded session cost O(result).
"""

from __future__ import annotations

import itertools
import threading
from abc import abstractmethod
from collections.abc import Hashable, Iterable, MutableMapping, Sequence
from typing import Any, Protocol, cast

from ..base import Commit, Entry, Meta, SessionStore
from ..path import EntryPath, parent_of, walk_to_root
from . import cas as cas


class LocatedEntries(Protocol):
    """An entries mapping that keeps each entry's log location instead of its body
    (the fs adapter's lazy entries): replay and a commit hand it locations."""

    def put_located(self, entry: Entry, offset: int, length: int) -> None: ...

    def put_written(self, entry: Entry, offset: int, length: int) -> None: ...


def _located(entries: MutableMapping[str, Entry]) -> LocatedEntries | None:
    """``entries`` as :class:`LocatedEntries`, ``None`` for a plain dict (the usual mapping:
    one type test, no attribute lookup, on every applied record)."""
    return None if type(entries) is dict else cast(LocatedEntries, entries)


# Each SessionState's first version number: drawn once per state made or filled afresh, so a
# version (born, writes) never comes back in this process (a deleted and recreated session,
# or one dropped from a cache and loaded again, is another state or born again).
_BORN = itertools.count(1)


class SessionState:
    __slots__ = ("born", "entries", "leaf", "loaded", "lock", "meta", "path_ids", "path_pos", "writes")

    def __init__(self) -> None:
        self.lock = threading.RLock()
        # The session's version, :meth:`version`: one more write with every commit or replayed record.
        self.born = next(_BORN)
        self.writes = 0
        self.loaded = False  # set once the store has replayed what it holds
        self.meta: Meta | None = None
        # A plain dict, or the fs store's lazy mapping (bodies read on demand).
        self.entries: MutableMapping[str, Entry] = {}
        self.leaf: str | None = None
        # The active path (root -> leaf), built lazily, extended in place on
        # appends that chain from the leaf, dropped when the leaf jumps.
        self.path_ids: list[str] | None = None
        self.path_pos: dict[str, int] | None = None

    def version(self) -> tuple[int, int]:
        """A value that changes with every write of this state and never comes back in this
        process (:meth:`SessionStore.session_token`): one more with each :meth:`apply` (a
        commit) and replayed record, born again when it is filled afresh (:meth:`renew`)."""
        return self.born, self.writes

    def renew(self) -> None:
        """Its content was replaced wholesale (a load, a reset, a clear): a version never seen."""
        self.born, self.writes = next(_BORN), 0

    def reset(self) -> None:
        """Forget what was replayed (a read-only store re-reading a replaced log)."""
        self.renew()
        self.meta = None
        self.entries = {}
        self.leaf = None
        self._drop_path()

    @property
    def is_empty(self) -> bool:
        return self.meta is None and not self.entries and self.leaf is None

    # -- replay records ------------------------------------------------------

    def put_entry(self, entry: Entry, at: tuple[int, int] | None = None) -> None:
        """Store ``entry``; ``at``: the (offset, length) of the log line replay
        read it from, when the entries are held lazily (the body is read back
        from there on demand instead of being kept)."""
        eid = entry["id"]
        # (No path held, nothing to drop: a lazily held session keeps its own.)
        if self.path_ids is not None and eid in self.entries and parent_of(self.entries, eid) != entry.get("parent_id"):
            self._drop_path()
        located = None if at is None else _located(self.entries)
        if located is not None and at is not None:
            located.put_located(entry, *at)
        else:
            self.entries[eid] = entry

    def set_leaf(self, leaf: str | None) -> None:
        if leaf == self.leaf:
            return
        ids, pos = self.path_ids, self.path_pos
        if ids is None:  # no path held (always so when entries are held lazily): nothing to extend
            self.leaf = leaf
            return
        if (
            ids is not None
            and pos is not None
            and leaf is not None
            and leaf not in pos
            and leaf in self.entries
            and parent_of(self.entries, leaf) == self.leaf
            and (self.leaf is not None or not ids)
        ):
            pos[leaf] = len(ids)
            ids.append(leaf)
        else:
            self._drop_path()
        self.leaf = leaf

    def clear(self) -> None:
        """The session was deleted: a writer still holding this state (it
        waited on :attr:`lock`) must see it absent, not resurrect it."""
        self.renew()
        self.meta = None
        self.entries = {}
        self.leaf = None
        self._drop_path()

    def resolve(self, commit: Commit) -> Commit:
        """The commit checked against (and resolved on) this state; call
        under :attr:`lock`, then :meth:`apply` the result."""
        return cas.resolve(commit, self.meta, self.leaf, self.entries.get, self.entries.__contains__)

    def apply(self, commit: Commit, written: Iterable[tuple[int, int]] | None = None) -> None:
        """``written``: the (offset, length) of each entry's log line, in order,
        when the commit was just written to a log whose entries are held lazily."""
        entries = self.entries
        if written is not None and type(entries) is not dict:  # (:func:`_located`, inline: every commit)
            located: LocatedEntries = entries  # type: ignore[assignment]
            put_written = located.put_written
            for entry, (offset, length) in zip(commit.entries, written, strict=False):  # (its other lines follow)
                put_written(entry, offset, length)
        else:
            for entry in commit.entries:
                self.put_entry(entry)
        leaf = commit.leaf
        if leaf is not None and leaf != self.leaf:
            if self.path_ids is None:  # (:meth:`set_leaf`'s no-path case, inline: always so when held lazily)
                self.leaf = leaf
            else:
                self.set_leaf(leaf)
        if commit.meta is not None:
            self.meta = commit.meta
        self.writes += 1  # (last: a reader taking the version first sees no newer one than the content)

    def apply_record(self, record: dict[str, Any], at: tuple[int, int] | None = None) -> None:
        """Apply one decoded, validated JSONL record (read from the log line at
        ``at``, when known: see :meth:`put_entry`)."""
        kind = record["type"]
        if kind == "meta":
            self.meta = record["meta"]
        elif kind == "entry":
            self.put_entry(record["entry"], at)
        elif kind == "leaf":
            self.set_leaf(record.get("entry_id"))
        elif kind == "append":
            self.put_entry(record["entry"], at)
            self.set_leaf(record["entry"]["id"])
            self.meta = record["meta"]
        # "commit" markers only matter to the reference's legacy recovery.
        self.writes += 1

    # -- reads ---------------------------------------------------------------

    def _drop_path(self) -> None:
        self.path_ids = None
        self.path_pos = None

    def path(self, leaf: str | None) -> EntryPath:
        if leaf is None:
            return EntryPath([], self.entries)
        view = getattr(self.entries, "path_view", None)
        if view is not None:
            # Lazily held entries keep (and extend) their own path, by position.
            found: EntryPath | None = view(leaf)
            return found if found is not None else EntryPath(walk_to_root(self.entries, leaf), self.entries)
        if self.path_ids is None and self.leaf is not None:
            walked = walk_to_root(self.entries, self.leaf)
            self.path_ids, self.path_pos = walked, {eid: i for i, eid in enumerate(walked)}
        ids, pos = self.path_ids, self.path_pos
        if ids is not None and pos is not None:
            i = pos.get(leaf)
            if i is not None and i < len(ids):
                return EntryPath(ids, self.entries, pos, length=i + 1)
        return EntryPath(walk_to_root(self.entries, leaf), self.entries)


class StateBackedStore(SessionStore):
    """The reads of every adapter that keeps a :class:`SessionState` per
    session; an adapter supplies ``_state`` (load or create) and the writes."""

    @abstractmethod
    def _state(self, session_id: str, create: bool = False) -> SessionState | None: ...

    def get_meta(self, session_id: str) -> Meta | None:
        state = self._state(session_id)
        return state.meta if state else None

    def get_entry(self, session_id: str, entry_id: str) -> Entry | None:
        # The caller's copy: the state's dict is what the store serves every later read from.
        state = self._state(session_id)
        entry = state.entries.get(entry_id) if state else None
        return _copied(entry) if entry is not None else None

    def entry_held(self, session_id: str, entry_id: str) -> Entry | None:
        state = self._state(session_id)
        return state.entries.get(entry_id) if state else None

    def get_leaf(self, session_id: str) -> str | None:
        state = self._state(session_id)
        return state.leaf if state else None

    def _state_to_commit(self, session_id: str) -> SessionState | None:
        """:meth:`_state` for the read a commit follows (see
        :meth:`SessionStore.meta_and_leaf_to_commit`); the default is the read's."""
        return self._state(session_id)

    def meta_and_leaf(self, session_id: str) -> tuple[Meta | None, str | None]:
        return _meta_and_leaf(self._state(session_id))

    def session_token(self, session_id: str, known: Hashable | None = None
                      ) -> tuple[Any, str | None, Hashable | None] | None:
        """With the state's version (:meth:`SessionState.version`: this process holds every
        state the store writes), taken first: a commit landing meanwhile leaves a token that
        matches none the session will have, so an index derived at it is derived again."""
        state = self._state(session_id)
        if state is None:
            return None
        version = state.version()
        meta = state.meta
        return None if meta is None else (meta.get("created_at"), state.leaf, version)

    def version_after(self, version: Hashable | None, commits: int) -> Hashable | None:
        """One more write per commit (:meth:`SessionState.apply`, once each)."""
        if type(version) is not tuple:
            return None
        return version[0], version[1] + commits

    def meta_and_entry(self, session_id: str, entry_id: str) -> tuple[Meta | None, Entry | None]:
        return _meta_and_entry(self._state(session_id), entry_id)

    def meta_and_leaf_to_commit(self, session_id: str) -> tuple[Meta | None, str | None]:
        state = self._state_to_commit(session_id)  # (_meta_and_leaf, inline: every append reads it)
        return (state.meta, state.leaf) if state else (None, None)

    def meta_and_entry_to_commit(self, session_id: str, entry_id: str) -> tuple[Meta | None, Entry | None]:
        return _meta_and_entry(self._state_to_commit(session_id), entry_id)

    def path(self, session_id: str, leaf: str | None) -> EntryPath:
        state = self._state(session_id)
        if state is None:
            return EntryPath([], {})
        with state.lock:
            return state.path(leaf)

    def entries_on_active_path(self, session_id: str, entry_ids: Sequence[str]) -> list[tuple[Entry | None, bool]]:
        state = self._state(session_id)  # (one lookup of the session for every hit of it)
        if state is None:
            return [(None, False) for _ in entry_ids]
        with state.lock:
            path = state.path(state.leaf)
            return [(state.entries.get(eid), path.holds(eid)) for eid in entry_ids]

    def entries(self, session_id: str) -> list[Entry]:
        return [_copied(e) for e in self.entries_held(session_id)]

    def entries_held(self, session_id: str) -> list[Entry]:
        state = self._state(session_id)
        if state is None:
            return []
        with state.lock:
            return list(state.entries.values())


def _copied(value: Any) -> Any:
    """A deep copy of a JSON value (strings and numbers shared)."""
    t = type(value)
    if t is dict:
        return {k: _copied(v) for k, v in value.items()}
    if t is list:
        return [_copied(v) for v in value]
    return value


def _meta_and_leaf(state: SessionState | None) -> tuple[Meta | None, str | None]:
    return (state.meta, state.leaf) if state else (None, None)


def _meta_and_entry(state: SessionState | None, entry_id: str) -> tuple[Meta | None, Entry | None]:
    return (state.meta, state.entries.get(entry_id)) if state else (None, None)
