"""The filesystem adapter: one append-only JSONL file per session.

``<data_dir>/<encoded_session_id>.jsonl`` holds the session's records (see
:mod:`.records`); a data_dir moves between this worker and the reference in
both directions. One mutation is one ``write`` of whole lines to a file
opened in append mode; replay (:class:`.records.Replay`, the one rule every
reader uses) is last-wins per key and skips, with a warning, any line that
is not a valid record, so a torn tail or one corrupt line never hides the
lines after it. A log that is mostly superseded records is rewritten as its
live state (:mod:`._compaction`); deleting a session is whole or not at all
(:mod:`._delete`). Attachments live under ``attachments/`` (:mod:`._attachments`).

A writable store owns its data_dir (:mod:`._lock`): it replays a session on
first access and keeps it in memory, write-through, afterwards. A
read-only store takes no lock, writes nothing, and re-reads a log that has
grown (or been replaced by a compaction) since it last read it.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Literal

from ..errors import StoreError, Vanished
from . import _compaction, _delete, _opened_listing, _sessions_index
from ._attachments import AttachmentFiles
from ._cache import DEFAULT_CACHE_BYTES, StateCache
from ._casefold import FoldIndex, names_fold
from ._catalog import MetaCatalog
from ._compactor import Compactor
from ._fds import FdCache
from ._follow import Follower
from ._fs_append import LogAppends
from ._fs_delete import SessionDeletion
from ._fs_listing import CatalogListing
from ._fs_open import LOG_SUFFIX, checked_stem, log_exists, open_append, open_read
from ._fsio import NotRegular, Ops, name_max, open_regular, read_fd, reason
from ._group import GroupCommit
from ._index import INDEX_DIR
from ._lazy import LazyEntries
from ._lock import LOCK_NAME, DirLock
from ._logfiles import LogFiles
from ._online import OnlineCompaction
from ._opened_listing import OpenedListing
from ._records import meta_size, written_spans
from ._search_fs import open_index
from ._search_index import Matches
from ._search_text import Query
from ._sized import encode_sized
from ._state import SessionState, StateBackedStore
from ._tail import TailFix
from ._watch import FollowerEvents, LogWatch
from .base import Commit, Entry, Meta

log = logging.getLogger("session_manager.store.fs")

Durability = Literal["flush", "fsync"]
_DURABILITIES: dict[str, Durability] = {"flush": "flush", "fsync": "fsync"}


def _durability_of(value: str) -> Durability:
    """``value`` as a :data:`Durability`; ValueError for anything else (a typo must not run unsynced)."""
    known = _DURABILITIES.get(value)
    if known is None:
        raise ValueError(f"durability must be 'flush' or 'fsync', not {value!r}")
    return known


def _sync_everything() -> None:
    """``os.sync``, where there is one (it waits for the writes on Linux): once per switch from
    flush to fsync, and at an fsync-mode open."""
    sync = getattr(os, "sync", None)
    if sync is not None:
        sync()

# The longest name the store makes from a session's stem (log, compaction
# temp, delete aside, attachment folder aside): every accepted id fits them all.
_LONGEST_SUFFIX = max(len(LOG_SUFFIX + _compaction.TEMP_SUFFIX), len(LOG_SUFFIX + _delete.ASIDE))


def _line_bytes(entries: LazyEntries, entry_id: str) -> int:
    """The bytes :meth:`LazyEntries.live_bytes` counts for ``entry_id``'s newest line (0: none)."""
    at = entries.location(entry_id)
    return 0 if at is None else at[1] + 1


class ReadOnlyStore(StoreError):
    """A mutation of a store opened read-only."""


class FsStore(FollowerEvents, CatalogListing, SessionDeletion, OnlineCompaction, AttachmentFiles, GroupCommit,
              LogAppends, StateBackedStore):
    """JSONL-per-session storage under ``data_dir``.

    ``durability="flush"`` (default): every acknowledged mutation has been
    handed to the OS, so it survives a crash of this process.
    ``durability="fsync"``: it has also been forced to the disk, so it
    survives power loss. ``read_only=True``: inspect a data_dir another
    process may own; every write raises :class:`ReadOnlyStore`.
    """

    def __init__(self, data_dir: str | os.PathLike[str], durability: Durability = "flush", *,
                 read_only: bool = False, ops: Ops | None = None, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        durability = _durability_of(durability)
        shown = os.fspath(data_dir)
        self.dir = Path(data_dir)
        self._dir = os.fspath(self.dir)
        self._durability: Durability = durability
        self.read_only = read_only
        self._ops = ops or Ops()
        if not read_only:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"create data_dir {shown}: {reason(e)}") from None
        if not self.dir.is_dir():
            raise StoreError(f"data_dir {shown} is not a directory" if self.dir.exists()
                             else f"data_dir {shown} does not exist")
        self._shown = shown
        self._owner = None if read_only else DirLock.acquire(self._ops, self.dir, shown)
        self._name_max = name_max(self.dir)
        self._stem_limit = self._name_max - _LONGEST_SUFFIX
        # Read-only: the lock file exists if a writer ever opened the directory.
        self.case_insensitive = names_fold(self._ops, self._dir, LOCK_NAME)
        self._lock = threading.Lock()  # store-wide; never held across file I/O
        self._sessions = StateCache(cache_bytes)
        self._tail_fix: dict[str, TailFix] = {}
        # A log name changed with no directory fsync since (:mod:`._fs_append`): up at open, since a
        # flush-mode owner before this one may have left names unsynced (one sync at the first
        # fsync-mode write).
        self._names_unsynced = not read_only
        self._names_lock = threading.Lock()
        self._budgets: dict[str, _compaction.LogBudget] = {}
        self._metas: MetaCatalog | None = None  # filled by the first list (writable only)
        self._scans = 0  # lists reading files right now
        self._changed: dict[str, Meta | None] = {}  # metas written while a list was reading
        self._warned: set[str] = set()
        self._follow = Follower(self._ops) if read_only else None  # how far each log was read
        self._watches: list[LogWatch] = []  # read-only: pollers delivering what the follower sees change
        self._peeked: dict[str, tuple[tuple[int, int, int], Meta | None]] = {}  # read-only list cache
        self._fold: FoldIndex | None = None
        self.compactions = 0  # logs rewritten as their live state since this store opened (config-status)
        self._compactor = None if read_only else Compactor(self._ops)  # background rewrites (:mod:`._online`)
        # Kept descriptors, paths computed once, index sidecars (:mod:`._logfiles`).
        # Module functions bound to ops (not methods): the store holds no cycle,
        # so dropping the last reference releases the data_dir at once.
        self._fds = FdCache(opener=functools.partial(open_append, self._ops))
        self._fds.sync_flushed = durability == "fsync"
        self._files = LogFiles(self.dir, self._fds, read_only=read_only,
                               stem=functools.partial(checked_stem, self._stem_limit),
                               open_log=functools.partial(open_read, self._ops))
        self._sessions_file = self.dir / INDEX_DIR / _sessions_index.FILE
        self._list_dirty: set[str] = set()  # metas changed since the sessions index was written
        self._init_group_commit()  # fsync mode: appends queued on a session share an fsync (:mod:`._group`)
        self._opened: OpenedListing | None = None  # the open's listing, for the first list (writable)
        self._search = open_index(self._dir, functools.partial(checked_stem, self._stem_limit),
                                  writable=not read_only)
        if self._owner is not None:
            if durability == "fsync":
                _sync_everything()  # what a flush-mode owner before this one answered may rest in the page cache
            self._recover()

    def _recover(self) -> None:
        """Finish what an earlier owner left half done, and keep what the open
        learnt of data_dir's entries for the first list (:mod:`._opened_listing`)."""
        if not self.case_insensitive:  # (its fold index needs every name)
            vouched = _sessions_index.read_stamp(self._sessions_file)
            if vouched is not None and _opened_listing.stamp_of(self._ops, self._dir) == vouched:
                # data_dir holds the index's logs and nothing half done: only attachments/ may
                if not _delete.recover(self._ops, self.dir, None, self._folder_of_stem, _compaction.TEMP_SUFFIX):
                    self._opened = OpenedListing(None, vouched)
                return
        try:
            names, opened = _opened_listing.take(self._ops, self._dir, LOG_SUFFIX)
        except OSError:
            names, opened = None, None  # the first list reports it
        if names is not None and not _delete.recover(
                self._ops, self.dir, names, self._folder_of_stem, _compaction.TEMP_SUFFIX):
            self._opened = opened  # (recovering changed data_dir: the first list lists it again)
        if self.case_insensitive:
            logs = self._log_names() if names is None else [n for n in names if n.endswith(LOG_SUFFIX)]
            self._fold = FoldIndex(logs, LOG_SUFFIX)

    def close(self) -> None:
        """Write the indexes of sessions appended to since their last one, close
        the kept descriptors, release the data_dir (its lock); the store takes
        no calls afterwards."""
        if self._owner is not None and self._owner.inherited_from is not None:
            # A forked child's copy: its indexes are the owner's to write, and the
            # compactor's thread (and any lock held across the fork) stayed in the owner.
            self._fds.close_all()
            return
        if self._compactor is not None:
            self._compactor.close()  # before anything it would touch: a rewrite in flight is abandoned
        self._search.close()
        if self._owner is not None:
            with self._lock:
                # Indexes only into the data_dir this store locked (not one created again since).
                states = dict(self._sessions) if self._owns() else {}
                if states and self._metas is not None and self._list_dirty:
                    self._save_sessions_index()
            self._files.close(states)
            self._owner.release()
        if self._follow is not None:
            self._stop_watches()
            self._follow.close()

    @property
    def durability(self) -> str:  # (str, as its mixins declare it; only a Durability is ever stored)
        """``"flush"`` or ``"fsync"`` (see the class); read on every write, so a change applies
        from the next one (the worker's configuration reload assigns it)."""
        return self._durability

    @durability.setter
    def durability(self, value: str) -> None:
        new = _durability_of(value)
        before, self._durability = self._durability, new
        self._fds.sync_flushed = new == "fsync"
        if before == "flush" and new == "fsync" and not self.read_only:
            # From the next write on, an answer means "on disk": so must what was answered before
            # in flush mode, which a later answer may rest on without a write of its own (an
            # idempotent replay, an existing session ensured) and which no fsync ticket covers.
            # A write that read "flush" just before this is marked on its descriptor instead
            # (``_Slot.flushed``: synced before such an answer, or before the descriptor closes).
            _sync_everything()

    @property
    def cache_bytes(self) -> int:
        """The memory budget for loaded sessions (least recently used ones are
        dropped past it; they are read again, through their index, when touched)."""
        return self._sessions.budget

    @cache_bytes.setter
    def cache_bytes(self, value: int) -> None:
        if value < 0:
            raise ValueError("cache_bytes must not be negative")
        with self._lock:
            self._sessions.budget = value
            self._sessions.evict("", self._drop)

    def _drop(self, session_id: str, state: SessionState) -> None:
        """A session leaves the cache (under its lock): keep its index current,
        then forget what was kept for it (the next load derives it all again)."""
        if self._owns():
            self._files.save(session_id, state)
        self._detach(session_id, state)
        self._files.evicted(session_id)
        self._budgets.pop(session_id, None)
        if self._follow is not None:
            self._follow.forget(session_id)  # or a reload would apply only the bytes read since

    def _detach(self, session_id: str, state: SessionState) -> None:
        """``state`` leaves the cache (under its lock): a reader handed it may still decode
        bodies, and a later load can compact the log under its arrays."""
        self._detach_entries(session_id, state.entries, state.meta)

    def _detach_entries(self, session_id: str, entries: object, meta: Meta | None) -> None:
        """A reader still holding ``entries`` (the session's once ``meta`` was its meta) asks
        for each moved entry as the session holds it now."""
        if isinstance(entries, LazyEntries):
            entries.detach(functools.partial(self._entry_now, session_id, meta))

    def _entry_now(self, session_id: str, held: Meta | None, entry_id: str) -> Entry | None:
        """The entry as the session holds it now (for a dropped state's reader,
        whose meta was ``held``): :class:`Vanished` when the session was deleted
        since (and maybe created again: another ``created_at``)."""
        state = self._state(session_id)
        meta = None if state is None else state.meta
        if state is None or (meta is not None and held is not None
                             and meta.get("created_at") != held.get("created_at")):
            raise Vanished(session_id, f"session {session_id} was deleted during the read")
        return state.entries.get(entry_id)

    # -- paths -----------------------------------------------------------------

    def stem(self, session_id: str) -> str:
        """The encoded file stem of a session; ids too long for every name the
        store makes from it are the caller's error."""
        return checked_stem(self._stem_limit, session_id)

    @property
    def stem_limit(self) -> int:
        """The longest encoded session id (bytes) this data_dir accepts."""
        return self._stem_limit

    def file_path(self, session_id: str) -> Path:
        return Path(self._log(session_id))

    def _log(self, session_id: str) -> str:
        return os.path.join(self._dir, self.stem(session_id) + LOG_SUFFIX)

    def _writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStore("this store is open read-only")
        self._not_inherited()
        self._still_ours()

    def _still_ours(self) -> None:
        """The one "is this still my directory" check of every write path: raise
        :class:`~._lock.DataDirLost` once data_dir (its lock file) is not the one this
        store locked (removed, or created again: nothing written there could be found).
        One ``stat``: a commit asks it after its write, before it is acknowledged."""
        owner = self._owner
        if owner is not None:
            owner.verify()

    def _owns(self) -> bool:
        """:meth:`_still_ours` for writes nobody waits on (indexes, rewrites): skip them instead."""
        try:
            self._still_ours()
        except StoreError:
            return False
        return True

    def _not_inherited(self) -> None:
        """Refuse a call in a process forked from the owner: the store's cache and
        kept descriptors are the owner's, so a write here would be a second writer
        the owner never sees, and a read would answer the state at the fork."""
        owner = self._owner
        if owner is not None and owner.inherited_from is not None:
            raise StoreError(
                f"data_dir {self._shown} is open for writing by process {owner.inherited_from}, which "
                "forked this process: open the data_dir here (read_only=True beside the owner)")

    def _warn_once(self, name: str, why: str) -> None:
        with self._lock:
            if name in self._warned:
                return
            self._warned.add(name)
        log.warning("skipping %s: %s", name, why)

    # -- loading -----------------------------------------------------------------

    def _read_log(self, session_id: str) -> bytes | None:
        path = self._log(session_id)
        try:
            fd = open_regular(self._ops, path)
            if fd is None:
                return None
            try:
                return read_fd(fd)
            finally:
                os.close(fd)
        except NotRegular:
            raise StoreError(f"the log of session {os.path.basename(path)} is not a regular file") from None
        except OSError as e:
            raise StoreError(f"read {os.path.basename(path)}: {reason(e)}") from None

    def _replay(self, session_id: str, state: SessionState) -> None:
        if self._follow is not None:
            files = self._files.files(session_id)
            held, held_meta = state.entries, state.meta
            self._follow.refresh(session_id, state, files.log, lambda n, w: None, files.index)
            if state.entries is not held:
                # The log was replaced (compacted, or deleted and created again): a reader
                # still holding a path into the old arrays asks for each entry as it is now.
                self._detach_entries(session_id, held, held_meta)
            return
        try:
            fix = self._files.load(session_id, state)
        except OSError as e:
            raise StoreError(f"read {os.path.basename(self._log(session_id))}: {reason(e)}") from None
        if fix is not None:
            self._tail_fix[session_id] = fix
        files = self._files.files(session_id)
        if files.ino is None:
            return  # no log: nothing to account for (and nothing kept per unknown id)
        budget = _compaction.LogBudget()
        budget.disk = files.covered
        entries = state.entries
        if isinstance(entries, LazyEntries):
            # The live entries' newest lines, from the index: no body is decoded for this (an
            # estimate on the high side, an append line also carrying a meta: compaction comes
            # no earlier than it would have).
            budget.live = entries.live_bytes()
            budget.entries = _compaction.LoadedSizes(functools.partial(_line_bytes, entries))
        if state.meta is not None:
            budget.charge(0, (), meta_size(state.meta))
        # Not compacted here: a load is a read, and reads never write (the
        # next commit compacts it if it is long; see :meth:`compact`).
        self._budgets[session_id] = budget

    def _state(self, session_id: str, create: bool = False) -> SessionState | None:
        """The loaded state of a session, replayed on first access (and, read-only,
        refreshed on every access).

        Replay runs under the session's own lock, so loading one large
        session never stalls the others. A probe of an unknown id caches
        nothing (the file stays the truth, so dropping an empty state is safe).
        """
        self._not_inherited()  # before any lock: one held across the fork is never released here
        with self._lock:
            state = self._sessions.get(session_id)
            if state is not None and state.loaded:
                self._sessions.touch(session_id, state, self._drop)
                if state.meta is not None and not self.read_only:
                    return state  # the usual case: nothing to load, not empty
            known = self._metas is None or session_id in self._metas
        if state is None:
            path = self._log(session_id)  # checks the id's length (a held state's id passed already)
            if not create and not known and not self._ops_exists(path):
                return None
            with self._lock:
                state = self._sessions.setdefault(session_id, SessionState())
        if not state.loaded or self.read_only:
            with state.lock:
                if not state.loaded or self.read_only:
                    self._replay(session_id, state)
                    state.loaded = True
            with self._lock:
                self._sessions.charge(session_id, state)
                self._sessions.touch(session_id, state, self._drop)
        if not create and state.is_empty:
            with state.lock, self._lock:
                if state.is_empty and self._sessions.get(session_id) is state:
                    del self._sessions[session_id]
                    self._files.forget(session_id)  # a probe of an unknown id keeps nothing
                    if self._follow is not None:
                        self._follow.forget(session_id)
            return None
        return state

    def _state_to_commit(self, session_id: str) -> SessionState | None:
        """:meth:`_state` for the read a commit follows: a loaded session is marked most
        recent and its charge left to that commit (:meth:`.StateCache.reserve`), so a
        mutation charges it once; any other case (a load, read-only) is a read's."""
        self._not_inherited()
        if not self.read_only:
            with self._lock:
                state = self._sessions.get(session_id)
                if state is not None and state.loaded and state.meta is not None:
                    self._sessions.reserve(session_id, state, self._drop)
                    return state
        return self._state(session_id)

    def _ops_exists(self, path: str) -> bool:
        return log_exists(self._ops, path)

    # -- reads -----------------------------------------------------------------

    def list_metas(self) -> list[Meta]:
        self._not_inherited()
        if self.read_only:
            return list(self._scan_metas().values())
        return self._catalog().values()

    def ordered_metas(
        self, order: str, after: tuple[int, str] | None, status: str | None, metadata: Meta | None
    ) -> Iterator[Meta]:
        """From the catalog (writable): a bisect to the cursor, then candidates
        in order, narrowed by the status and metadata-key indexes; never a
        sort of the store. A read-only store sorts what it reads."""
        if self.read_only:
            return super().ordered_metas(order, after, status, metadata)
        self._not_inherited()
        catalog = self._catalog()
        with self._lock:
            return catalog.ordered(order, after, status, metadata)

    def search(self, query: Query, sessions: Collection[str] | None,
               roles: Collection[str] | None) -> Matches:
        """From the persisted search index, brought up to date with the logs (:mod:`._search_fs`)."""
        self._not_inherited()
        return self._search.search(self, query, sessions, roles)

    def delete_session(self, session_id: str) -> bool:
        self._search.forget(session_id)  # before the log (a crash between leaves no index of it) ...
        existed = super().delete_session(session_id)
        self._search.forget(session_id)  # ... and after (a query in between re-read the log)
        return existed

    # -- writes ------------------------------------------------------------------

    def commit(self, session_id: str, commit: Commit) -> Commit:
        if self.read_only:  # (:meth:`_writable`, inline: every write passes here)
            raise ReadOnlyStore("this store is open read-only")
        self._not_inherited()
        state = self._current_state(session_id)
        try:
            commit = state.resolve(commit)  # compare-and-set, inside the write's critical section
            data, sizes = encode_sized(commit)
            if self._fold is not None:
                self._fold.claim(session_id)
            start = self._append(session_id, data)
            if self._compactor is not None:  # in the log now: a rewrite in flight must carry it over
                self._compactor.appended(session_id, data, commit.entries)
            budget = self._account(session_id, commit, data, sizes)  # (before apply: a loaded entry's old line)
            state.apply(commit, written_spans(len(commit.entries), data, start))
            self._search.touched(session_id)  # (a set add: the search index catches up at its next query)
            self._files.note_commit(session_id, state, start + len(data))
            with self._lock:
                if commit.meta is not None:
                    if self._metas is not None:
                        self._metas.put(commit.meta)
                        self._list_dirty.add(session_id)
                    if self._scans:
                        self._changed[session_id] = commit.meta
                self._sessions.committed(session_id, state, self._drop)  # O(1): the bodies just written count
            if budget.wants_background():  # (nearly every commit is below the line: no call)
                self._maybe_compact(session_id, state)
            return commit
        finally:
            state.lock.release()

    def _current_state(self, session_id: str) -> SessionState:
        """The session's cached state, its lock held: one the cache dropped
        meanwhile is never written to (a newer load would not see the write).

        A loaded one in the cache is only marked most recent (the commit
        re-charges it, settles the others and evicts once it has written:
        :meth:`StateCache.committed`); any other is loaded (or created) as a read would."""
        lock = self._lock
        while True:
            lock.acquire()  # (acquire/try/finally, not ``with``: half the cost, on every write)
            try:
                state = self._sessions.get(session_id)
                if state is not None and state.loaded:
                    self._sessions.move_to_end(session_id)
                else:
                    state = None
            finally:
                lock.release()
            if state is None:
                state = self._state(session_id, create=True)
                assert state is not None
            state.lock.acquire()
            if self._sessions.get(session_id) is state:
                compactor = self._compactor  # (no rewrite in flight, nearly always: no call)
                if compactor is None or not compactor.rewriting(session_id) or not self._must_wait(session_id):
                    return state
                state.lock.release()
                assert self._compactor is not None
                self._compactor.wait_landed(session_id)  # the log is past the hard line
                continue
            state.lock.release()
