"""The filesystem adapter: one append-only JSONL file per session.

``<data_dir>/<encoded_session_id>.jsonl`` holds the session's records (see
:mod:`.records`); a data_dir moves between this worker and the reference in
both directions. One mutation is one ``write`` of whole lines to a file
opened in append mode; replay (:class:`.records.Replay`, the one rule every
reader uses) is last-wins per key and skips, with a warning, any line that
is not a valid record, so a torn tail or one corrupt line never hides the
lines after it. A log that is mostly superseded records is rewritten as its
live state (:mod:`._rewrite`); deleting a session is whole or not at all
(:mod:`._removal`). Attachments live under ``attachments/`` (:mod:`._attachments`).

A writable store owns its data_dir (:mod:`._lock`): it replays a session on
first access and keeps it in memory, write-through, afterwards. A
read-only store takes no lock, writes nothing, and re-reads a log that has
grown (or been replaced by a compaction) since it last read it.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ...errors import StoreError, Vanished
from .._core.cas import UNSET, resolve
from .._core.state import SessionState, StateBackedStore
from ..base import NO_TRANSACTION, AttachmentMeta, Commit, Entry, EventSink, Meta
from ..search_index import Matches, Ranked, SortKey, Stats
from ..search_text import Query
from ._attachments import Attachments
from ._cache import DEFAULT_CACHE_BYTES
from ._compaction import Compaction, loaded_budget
from ._datadir import DataDir, Durability, ReadOnlyStore, durability_of, sync_everything, weakly
from ._deleter import Deleter
from ._fileops import Ops, reason
from ._follower import Follower
from ._group_commit import GroupCommit
from ._lazy import LazyEntries
from ._lister import Lister
from ._opener import checked_stem, log_exists
from ._records import written_spans
from ._rewrite import LogBudget
from ._search import open_index
from ._sizes import encode_append, encode_sized
from ._versions import EvictedVersions
from ._watch import Reads, Watches
from ._writer import Writer

log = logging.getLogger("session_manager.store.fs")

__all__ = ["Durability", "FsStore", "ReadOnlyStore"]


class _Part:
    """A facade attribute that is one of its parts' (read and set there): for the tools and
    tests that look inside a store, which knew these names before the store had parts."""

    def __init__(self, part: str, name: str) -> None:
        self._part, self._name = part, name

    def __get__(self, store: object, owner: type | None = None) -> Any:
        return self if store is None else getattr(getattr(store, self._part), self._name)

    def __set__(self, store: object, value: Any) -> None:
        setattr(getattr(store, self._part), self._name, value)


class FsStore(StateBackedStore):
    """JSONL-per-session storage under ``data_dir``.

    ``durability="flush"`` (default): every acknowledged mutation has been
    handed to the OS, so it survives a crash of this process.
    ``durability="fsync"``: it has also been forced to the disk, so it
    survives power loss. ``read_only=True``: inspect a data_dir another
    process may own; every write raises :class:`ReadOnlyStore`.

    A facade over its parts, each handed the :class:`~._datadir.DataDir` they share (and
    the parts it calls): the writer and its group commit, the lister, the compaction, the
    deleter, the attachments, the watches; loading (and the cache of loaded sessions) and
    the commit itself are the store's own.
    """

    _ops, _dir, _lock = _Part("_d", "ops"), _Part("_d", "path"), _Part("_d", "lock")
    _sessions, _files, _fds = _Part("_d", "sessions"), _Part("_d", "files"), _Part("_d", "fds")
    _budgets, _metas = _Part("_d", "budgets"), _Part("_d", "metas")
    _compactor, _opened = _Part("_d", "compactor"), _Part("_lister", "opened")
    _names_unsynced = _Part("_writer", "_names_unsynced")
    _write_atomically = _Part("_attachments", "_write_atomically")
    _attachment_paths = _Part("_attachments", "_attachment_paths")

    def __init__(self, data_dir: str | os.PathLike[str], durability: Durability = "flush", *,
                 read_only: bool = False, ops: Ops | None = None, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        d = self._d = DataDir(data_dir, durability_of(durability), read_only=read_only, ops=ops,
                              cache_bytes=cache_bytes)
        self.dir = d.dir
        self.read_only = read_only
        self.case_insensitive = d.case_insensitive
        # Weakly: a part calling back holds no cycle (the data_dir is released with the store).
        d.load, d.detach = weakly(self._state), weakly(self._detach)
        self._group = GroupCommit(d)  # fsync mode: appends queued on a session share an fsync
        # :meth:`settle` as the group's own (every mutation calls it once its lock is let go: one frame fewer).
        self.settle = self._group.settle  # type: ignore[method-assign]
        self._writer = Writer(d, self._group)
        self._compaction = Compaction(d, self._writer, self._group)
        self._lister = Lister(d)
        self._attachments = Attachments(d)
        self._evicted = None if read_only else EvictedVersions()
        self._deleter = Deleter(d, self._attachments, self._evicted)
        self._watches = Watches(d)
        self._follow = Follower(d.ops) if read_only else None  # how far each log was read
        self._search = open_index(d.path, functools.partial(checked_stem, d.stem_limit), writable=not read_only)
        if d.owner is not None:
            if d.durability == "fsync":
                sync_everything()  # what a flush-mode owner before this one answered may rest in the page cache
            self._lister.recover()

    def close(self) -> None:
        """Write the indexes of sessions appended to since their last one, close
        the kept descriptors, release the data_dir (its lock); the store takes
        no calls afterwards."""
        if self._d.owner is not None and self._d.owner.inherited_from is not None:
            # A forked child's copy: its indexes are the owner's to write, and the
            # compactor's thread (and any lock held across the fork) stayed in the owner.
            self._d.fds.close_all()
            return
        if self._d.compactor is not None:
            self._d.compactor.close()  # before anything it would touch: a rewrite in flight is abandoned
        self._search.close()
        if self._d.owner is not None:
            with self._d.lock:
                # Indexes only into the data_dir this store locked (not one created again since).
                states = dict(self._d.sessions) if self._d.owns() else {}
                if states and self._d.metas is not None and self._d.list_dirty:
                    self._lister.save_sessions_index()
            self._d.files.close(states)
            self._d.owner.release()
        if self._follow is not None:
            self._watches.stop()
            self._follow.close()

    @property
    def durability(self) -> str:  # (str, as the interface reads it; only a Durability is ever stored)
        """``"flush"`` or ``"fsync"`` (see the class); read on every write, so a change applies
        from the next one (the worker's configuration reload assigns it)."""
        return self._d.durability

    @durability.setter
    def durability(self, value: str) -> None:
        new = durability_of(value)
        before, self._d.durability = self._d.durability, new
        self._d.fds.sync_flushed = new == "fsync"
        if before == "flush" and new == "fsync" and not self.read_only:
            # From the next write on, an answer means "on disk": so must what was answered before
            # in flush mode, which a later answer may rest on without a write of its own (an
            # idempotent replay, an existing session ensured) and which no fsync ticket covers.
            # A write that read "flush" just before this is marked on its descriptor instead
            # (``_Slot.flushed``: synced before such an answer, or before the descriptor closes).
            sync_everything()

    @property
    def cache_bytes(self) -> int:
        """The memory budget for loaded sessions (least recently used ones are
        dropped past it; they are read again, through their index, when touched)."""
        return self._d.sessions.budget

    @cache_bytes.setter
    def cache_bytes(self, value: int) -> None:
        if value < 0:
            raise ValueError("cache_bytes must not be negative")
        with self._d.lock:
            self._d.sessions.budget = value
            self._d.sessions.evict("", self._drop)

    def _drop(self, session_id: str, state: SessionState) -> None:
        """A session leaves the cache (under its lock): keep its index current,
        then forget what was kept for it (the next load derives it all again)."""
        if self._d.owns():
            self._d.files.save(session_id, state)
        if self._evicted is not None and state.meta is not None:
            self._evicted.dropped(session_id, state)
        self._detach(session_id, state)
        self._d.files.evicted(session_id)
        self._d.budgets.pop(session_id, None)
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
        return self._d.stem(session_id)

    @property
    def stem_limit(self) -> int:
        """The longest encoded session id (bytes) this data_dir accepts."""
        return self._d.stem_limit

    def file_path(self, session_id: str) -> Path:
        return Path(self._d.log(session_id))

    # -- loading -----------------------------------------------------------------

    def _replay(self, session_id: str, state: SessionState) -> None:
        if self._follow is not None:
            files = self._d.files.files(session_id)
            held, held_meta = state.entries, state.meta
            self._follow.refresh(session_id, state, files.log, lambda n, w: None, files.index)
            if state.entries is not held:
                # The log was replaced (compacted, or deleted and created again): a reader
                # still holding a path into the old arrays asks for each entry as it is now.
                self._detach_entries(session_id, held, held_meta)
            return
        try:
            fix = self._d.files.load(session_id, state)
        except OSError as e:
            raise StoreError(f"read {os.path.basename(self._d.log(session_id))}: {reason(e)}") from None
        if fix is not None:
            self._d.tail_fix[session_id] = fix
        files = self._d.files.files(session_id)
        if files.ino is None:
            return  # no log: nothing to account for (and nothing kept per unknown id)
        # Not compacted here: a load is a read, and reads never write (the
        # next commit compacts it if it is long; see :meth:`compact`).
        self._d.budgets[session_id] = loaded_budget(files.covered, state)

    def _state(self, session_id: str, create: bool = False) -> SessionState | None:
        """The loaded state of a session, replayed on first access (and, read-only,
        refreshed on every access).

        Replay runs under the session's own lock, so loading one large
        session never stalls the others. A probe of an unknown id caches
        nothing (the file stays the truth, so dropping an empty state is safe).
        """
        self._d.not_inherited()  # before any lock: one held across the fork is never released here
        with self._d.lock:
            state = self._d.sessions.get(session_id)
            if state is not None and state.loaded:
                self._d.sessions.touch(session_id, state, self._drop)
                if state.meta is not None and not self.read_only:
                    return state  # the usual case: nothing to load, not empty
            known = self._d.metas is None or session_id in self._d.metas
        if state is None:
            path = self._d.log(session_id)  # checks the id's length (a held state's id passed already)
            if not create and not known and not log_exists(self._d.ops, path):
                self._missing()
                return None
            with self._d.lock:
                state = self._d.sessions.setdefault(session_id, SessionState())
        if not state.loaded or self.read_only:
            with state.lock:
                if not state.loaded or self.read_only:
                    self._replay(session_id, state)
                    if self._evicted is not None:
                        self._evicted.loaded(session_id, state)
                    state.loaded = True
            with self._d.lock:
                self._d.sessions.charge(session_id, state)
                self._d.sessions.touch(session_id, state, self._drop)
        if not create and state.is_empty:
            with state.lock, self._d.lock:
                if state.is_empty and self._d.sessions.get(session_id) is state:
                    del self._d.sessions[session_id]
                    self._d.files.forget(session_id)  # a probe of an unknown id keeps nothing
                    if self._follow is not None:
                        self._follow.forget(session_id)
            self._missing()
            return None
        return state

    def _missing(self) -> None:
        """A session found in no log: an answer (``not_found``, ``deleted: false``) only while
        data_dir is still the directory this store locked; once it was removed or replaced the
        session may well exist, and every call needing it (each write first reads its session)
        is refused with :class:`~._lock.DataDirLost` naming data_dir. One ``stat``, on a miss only."""
        if not self.read_only:
            self._d.still_ours()

    def _state_to_commit(self, session_id: str) -> SessionState | None:
        """:meth:`_state` for the read a commit follows: a loaded session is marked most
        recent and its charge left to that commit (:meth:`.StateCache.reserve`), so a
        mutation charges it once; any other case (a load, read-only) is a read's."""
        d = self._d
        owner = d.owner
        if owner is not None and owner.inherited_from is not None:
            d.not_inherited()  # (raises: its test inline, every write's read passes here)
        if not self.read_only:
            with d.lock:
                sessions = d.sessions
                state = sessions.get(session_id)
                if state is not None and state.loaded and state.meta is not None:
                    sessions.reserve(session_id, state, self._drop)
                    return state
        return self._state(session_id)

    # -- reads -----------------------------------------------------------------

    def list_metas(self) -> list[Meta]:
        self._d.not_inherited()
        if self.read_only:
            return list(self._lister.scan_metas().values())
        return self._lister.catalog().values()

    def ordered_metas(
        self, order: str, after: tuple[int, str] | None, status: str | None, metadata: Meta | None
    ) -> Iterator[Meta]:
        """From the catalog (writable): a bisect to the cursor, then candidates
        in order, narrowed by the status and metadata-key indexes; never a
        sort of the store. A read-only store sorts what it reads."""
        if self.read_only:
            return super().ordered_metas(order, after, status, metadata)
        self._d.not_inherited()
        catalog = self._lister.catalog()
        with self._d.lock:
            return catalog.ordered(order, after, status, metadata)

    def search(self, query: Query, sessions: Collection[str] | None,
               roles: Collection[str] | None) -> Matches:
        """From the persisted search index, brought up to date with the logs (:mod:`._search`)."""
        self._d.not_inherited()
        if not self.read_only:
            self._d.still_ours()  # a query brings the index (a file in data_dir) up to date first
        return self._search.search(self, query, sessions, roles)

    def bulk_delete_problem(self) -> str | None:
        """A purge, a tree delete or a retention batch first lists the sessions: refused (naming
        data_dir) once data_dir is not the directory this store locked."""
        self._d.writable()
        return None

    def search_page(self, query: Query, sessions: Collection[str] | None, roles: Collection[str] | None,
                    limit: int, after: SortKey | None, stats: Stats | None = None) -> Ranked:
        """Ranked inside the persisted search index (a read-only open: its in-memory one)."""
        self._d.not_inherited()
        if not self.read_only:
            self._d.still_ours()  # a query brings the index (a file in data_dir) up to date first
        return self._search.search_page(self, query, sessions, roles, limit, after, stats)

    def delete_session(self, session_id: str) -> bool:
        self._d.writable()  # before the search index forgets anything of it
        self._d.stem(session_id)  # (an over-long id: the caller's error, before the index forgets it)
        self._search.forget(session_id)  # before the log (a crash between leaves no index of it) ...
        try:
            existed = self._deleter.delete_session(session_id)
        except BaseException:
            # Failed before its commit point: the session stands, whole, and its log is indexed
            # again at the next query (forgotten, it was never looked at again until a reopen).
            self._search.touched(session_id)
            raise
        self._search.forget(session_id)  # ... and after (a query in between re-read the log)
        return existed

    # -- writes ------------------------------------------------------------------

    def commit(self, session_id: str, commit: Commit) -> Commit:
        if self.read_only:  # (:meth:`_writable`, inline: every write passes here)
            raise ReadOnlyStore()
        d = self._d
        owner = d.owner
        if owner is not None and owner.inherited_from is not None:
            d.not_inherited()  # (raises: its test inline, every write passes here)
        state = self._current_state(session_id)
        try:
            entries = state.entries
            meta = state.meta
            new = commit.entries
            # A plain append of one entry decided on the current meta (nearly every write): what
            # resolve() would find, asked here, so it returns the commit as it is; then written by
            # _append_one. Anything else (a conflict included) goes the general way, which decides.
            if (len(new) == 1 and meta is not None and commit.derived_from is meta and commit.append
                    and commit.meta is not None and not commit.expect_revisions
                    and (commit.expect_meta is UNSET or commit.expect_meta is meta)):
                entry = new[0]
                entry_id = entry["id"]
                if commit.leaf == entry_id and entry_id not in entries:
                    parent = entry.get("parent_id")
                    if parent == state.leaf if commit.chain else parent is None or parent in entries:
                        done = self._append_one(d, session_id, state, commit, entry, entry_id)
                        if done is not None:
                            return done
            # compare-and-set, inside the write's critical section (SessionState.resolve's call, inline)
            commit = resolve(commit, meta, state.leaf, entries.get, entries.__contains__)
            data, sizes = encode_sized(commit)
            start = self._write(d, session_id, data, commit.entries)
            budget = self._writer.account(session_id, commit, data, sizes)  # (before apply: a loaded entry's old line)
            state.apply(commit, written_spans(len(commit.entries), data, start))
            self._applied(d, session_id, state, commit.meta, start + len(data), budget)
            return commit
        finally:
            state.lock.release()

    def _append_one(self, d: DataDir, session_id: str, state: SessionState, commit: Commit, entry: Entry,
                    entry_id: str) -> Commit | None:
        """:meth:`commit`'s write of a plain append of one new entry, resolved already (the
        commit applies as it is), under the state's lock: the same steps with the general
        machinery for several entries left out (one ``append`` line, one entry to charge,
        apply and locate). ``None`` (nothing written) when orjson cannot encode it: the
        general way decides."""
        meta = commit.meta
        assert meta is not None
        encoded = encode_append(entry, meta, commit.data_json)
        if encoded is None:
            return None
        data, entry_size, meta_size = encoded
        start = self._write(d, session_id, data, commit.entries)
        # (Writer.account, inline; before the state applies it, as there)
        budgets = d.budgets
        budget = budgets.get(session_id)
        if budget is None:
            budget = budgets[session_id] = LogBudget()
        written = len(data)
        budget.charge_one(written, entry_id, entry_size, meta_size)
        # (SessionState.apply of one new entry and written_spans' one line, inline)
        entries = state.entries
        if type(entries) is dict:
            entries[entry_id] = entry  # (put_entry: a new id drops no held path)
        else:
            entries.put_written(entry, start, data.find(b"\n"))  # type: ignore[attr-defined]
        if state.path_ids is None:  # (set_leaf's no-path case: always so when held lazily)
            state.leaf = entry_id
        else:
            state.set_leaf(entry_id)
        state.meta = meta
        state.writes += 1  # (last: a reader taking the version first sees no newer one than the content)
        self._applied(d, session_id, state, meta, start + written, budget)
        return commit

    def _write(self, d: DataDir, session_id: str, data: bytes, entries: tuple[Entry, ...]) -> int:
        """A commit's ``data`` appended to the session's log (where it starts), handed to a
        rewrite in flight, which must carry it over."""
        if d.fold is not None:
            d.fold.claim(session_id)
        start = self._writer.append(session_id, data)
        compactor = d.compactor
        if compactor is not None and compactor.jobs:  # (none in flight nearly always: no call)
            compactor.appended(session_id, data, entries)
        return start

    def _applied(self, d: DataDir, session_id: str, state: SessionState, meta: Meta | None, end: int,
                 budget: LogBudget) -> None:
        """What follows a commit written and applied to ``state``: the search mark, the log's
        end, the list's catalogue, the cache's charge, and a compaction when the log wants one."""
        self._search.touched(session_id)  # (a set add: the search index catches up at its next query)
        d.files.note_commit(session_id, state, end)
        with d.lock:
            if meta is not None and (d.metas is not None or d.scans):  # (no list yet: no call)
                d.catalogue(session_id, meta)
            d.sessions.committed(session_id, state, self._drop)  # O(1): the bodies just written count
        if budget.wants_background():  # (nearly every commit is below the line: no call)
            self._compaction.maybe_compact(session_id, state)

    def _current_state(self, session_id: str) -> SessionState:
        """The session's cached state, its lock held: one the cache dropped
        meanwhile is never written to (a newer load would not see the write).

        A loaded one in the cache is taken as it is (the commit marks it most recent,
        re-charges it, settles the others and evicts once it has written:
        :meth:`StateCache.committed`); any other is loaded (or created) as a read would."""
        d = self._d
        while True:
            # Looked up without the store's lock: one dict lookup, atomic, and whether the state
            # found is still the cached one is asked again below, once its lock is held (as that
            # check always was). (Not marked most recent here: the commit does, once written.
            # Dropped by an eviction meanwhile, it is taken again below.)
            state = d.sessions.get(session_id)
            if state is None or not state.loaded:
                state = self._state(session_id, create=True)
                assert state is not None
            state.lock.acquire()
            if d.sessions.get(session_id) is state:
                compactor = d.compactor  # (no rewrite in flight, nearly always: no call)
                if (compactor is None or not compactor.jobs or not compactor.rewriting(session_id)
                        or not self._compaction.must_wait(session_id)):
                    return state
                state.lock.release()
                assert self._d.compactor is not None
                self._d.compactor.wait_landed(session_id)  # the log is past the hard line
                continue
            state.lock.release()

    # -- the parts' calls ----------------------------------------------------------

    def mutation(self, session_ids: Collection[str]) -> AbstractContextManager[None]:
        if self._d.durability != "fsync":  # (:meth:`.GroupCommit.mutation`'s flush-mode answer, inline)
            return NO_TRANSACTION
        return self._group.mutation(session_ids)

    def settle(self) -> None:
        """Wait until every commit this thread made in a mutation scope is on disk (:mod:`._group_commit`)."""
        self._group.settle()

    def compact(self, session_id: str) -> bool:
        """Rewrite the session's log as its live state now (:meth:`.Compaction.compact`)."""
        return self._compaction.compact(session_id)

    @property
    def compactions(self) -> int:
        """Logs rewritten as their live state since this store opened (config-status)."""
        return self._compaction.compactions

    def erasing(self) -> AbstractContextManager[None]:
        return self._deleter.erasing()

    def subscribe(self, sink: EventSink,
                  wants: Callable[[str], bool] | None = None) -> Callable[[], None]:
        reads: Reads = self
        return self._watches.subscribe(reads, sink, wants)

    def observing(self) -> None:
        self._watches.observing()

    def attachments_dir(self, session_id: str) -> Path:
        return self._attachments.attachments_dir(session_id)

    def put_attachment(self, meta: AttachmentMeta, chunks: Iterable[bytes]) -> None:
        self._attachments.put_attachment(meta, chunks)

    def get_attachment_meta(self, session_id: str, attachment_id: str) -> AttachmentMeta | None:
        return self._attachments.get_attachment_meta(session_id, attachment_id)

    def read_attachment(self, session_id: str, attachment_id: str) -> bytes | None:
        return self._attachments.read_attachment(session_id, attachment_id)

    def list_attachments(self, session_id: str) -> list[AttachmentMeta]:
        return self._attachments.list_attachments(session_id)

    def delete_attachment(self, session_id: str, attachment_id: str) -> bool:
        return self._attachments.delete_attachment(session_id, attachment_id)
