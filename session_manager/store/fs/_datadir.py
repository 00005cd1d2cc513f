"""The data_dir an fs store opened: what every part of the store shares.

:class:`DataDir` is the one object the store's parts (writer, group commit,
lister, compaction, deleter, attachments) are handed, as a recorder is handed
its datastore: the directory and its lock, the os seam, the store-wide lock,
the loaded sessions, the kept descriptors and per-session files, the log
budgets, the list catalog, and the checks every write path makes. The store
(:class:`~._store.FsStore`) builds it and its parts; no part holds the store.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Literal, ParamSpec, TypeVar

from ...errors import StoreError
from .._core.state import SessionState
from ..base import Meta
from . import _removal, _rewrite, _sessions_index
from ._background import Compactor
from ._cache import StateCache
from ._casefold import FoldIndex, names_fold
from ._catalog import MetaCatalog
from ._descriptors import FdCache
from ._fileops import Ops, name_max, reason
from ._lock import LOCK_NAME, DirLock
from ._logfiles import LogFiles
from ._opener import LOG_SUFFIX, checked_stem, open_append, open_read
from ._sidecar import INDEX_DIR
from ._tail import TailFix

log = logging.getLogger("session_manager.store.fs")

Durability = Literal["flush", "fsync"]
_DURABILITIES: dict[str, Durability] = {"flush": "flush", "fsync": "fsync"}

# The longest name the store makes from a session's stem (log, compaction
# temp, delete aside, attachment folder aside): every accepted id fits them all.
_LONGEST_SUFFIX = max(len(LOG_SUFFIX + _rewrite.TEMP_SUFFIX), len(LOG_SUFFIX + _removal.ASIDE))

P = ParamSpec("P")
R = TypeVar("R")


def durability_of(value: str) -> Durability:
    """``value`` as a :data:`Durability`; ValueError for anything else (a typo must not run unsynced)."""
    known = _DURABILITIES.get(value)
    if known is None:
        raise ValueError(f"durability must be 'flush' or 'fsync', not {value!r}")
    return known


def sync_everything() -> None:
    """``os.sync``, where there is one (it waits for the writes on Linux): once per switch from
    flush to fsync, and at an fsync-mode open."""
    sync = getattr(os, "sync", None)
    if sync is not None:
        sync()


def weakly(method: Callable[P, R]) -> Callable[P, R]:
    """``method`` (bound to the store) without a reference to the store: a part calling back
    keeps no cycle, so dropping the store's last reference releases the data_dir at once."""
    ref = weakref.WeakMethod(method)  # (a bound method, as WeakMethod needs)

    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        bound = ref()
        if bound is None:
            raise StoreError("the store was closed")
        result: R = bound(*args, **kwargs)
        return result

    return call


from session_manager.errors import ReadOnlyStore as ReadOnlyStore  # noqa: E402 (defined with every other error)


def _no_load(session_id: str, create: bool = False) -> SessionState | None:
    raise AssertionError("the store binds DataDir.load")  # pragma: no cover


def _no_detach(session_id: str, state: SessionState) -> None:
    raise AssertionError("the store binds DataDir.detach")  # pragma: no cover


class DataDir:
    """The opened data_dir and the state the store's parts share (see the module)."""

    def __init__(self, data_dir: str | os.PathLike[str], durability: Durability, *, read_only: bool,
                 ops: Ops | None, cache_bytes: int) -> None:
        shown = os.fspath(data_dir)
        self.dir = Path(data_dir)
        self.path = os.fspath(self.dir)
        self.shown = shown
        self.durability: Durability = durability  # read on every write (the store's property sets it)
        self.read_only = read_only
        self.ops = ops or Ops()
        _make(self.dir, shown, read_only)
        self.owner = None if read_only else DirLock.acquire(self.ops, self.dir, shown)
        self.name_max = name_max(self.dir)
        self.stem_limit = self.name_max - _LONGEST_SUFFIX
        # Read-only: the lock file exists if a writer ever opened the directory.
        self.case_insensitive = names_fold(self.ops, self.path, LOCK_NAME)
        self.fold: FoldIndex | None = None  # filled at open when names fold
        self.lock = threading.Lock()  # store-wide; never held across file I/O
        self.sessions = StateCache(cache_bytes)
        self.tail_fix: dict[str, TailFix] = {}
        self.budgets: dict[str, _rewrite.LogBudget] = {}
        self.compactor = None if read_only else Compactor(self.ops)  # background rewrites (:mod:`._background`)
        # Kept descriptors, paths computed once, index sidecars (:mod:`._logfiles`). Module
        # functions bound to ops (not methods): no cycle, the data_dir is released at once.
        self.fds = FdCache(opener=functools.partial(_open_owned, self.ops, self.owner))
        self.fds.sync_flushed = durability == "fsync"
        self.files = LogFiles(self.dir, self.fds, read_only=read_only,
                              stem=functools.partial(checked_stem, self.stem_limit),
                              open_log=functools.partial(open_read, self.ops))
        # The list catalog (:mod:`._lister`), which commits, deletes and undos keep current.
        self.sessions_file = self.dir / INDEX_DIR / _sessions_index.FILE
        self.metas: MetaCatalog | None = None  # filled by the first list (writable only)
        self.scans = 0  # lists reading files right now
        self.changed: dict[str, Meta | None] = {}  # metas written while a list was reading
        self.list_dirty: set[str] = set()  # metas changed since the sessions index was written
        self._warned: set[str] = set()
        # The store's loading, bound weakly by the store (:func:`weakly`).
        self.load: Callable[[str, bool], SessionState | None] = _no_load
        self.detach: Callable[[str, SessionState], None] = _no_detach

    # -- names -----------------------------------------------------------------------

    def stem(self, session_id: str) -> str:
        """The encoded file stem of a session; ids too long for every name the
        store makes from it are the caller's error."""
        return checked_stem(self.stem_limit, session_id)

    def log(self, session_id: str) -> str:
        """The path of the session's log."""
        return os.path.join(self.path, self.stem(session_id) + LOG_SUFFIX)

    def folder_of_stem(self, stem: str) -> Path:
        """The attachment folder of the session whose log stem is ``stem``."""
        name = stem.replace(".", "%2E") if stem in (".", "..") else stem
        return self.dir / "attachments" / name

    # -- the checks of the write paths -----------------------------------------------

    def writable(self) -> None:
        """Refuse a write: read-only, forked from the owner, or data_dir lost."""
        if self.read_only:
            raise ReadOnlyStore()
        self.not_inherited()
        self.still_ours()

    def still_ours(self) -> None:
        """The one "is this still my directory" check of every write path: raise
        :class:`~._lock.DataDirLost` once data_dir (its lock file) is not the one this
        store locked (removed, or created again: nothing written there could be found).
        One ``stat``: a commit asks it after its write, before it is acknowledged."""
        owner = self.owner
        if owner is not None:
            owner.verify()

    def still_ours_after_write(self) -> None:
        """:meth:`still_ours` for a commit just written, before its answer: the cheaper
        :meth:`~._lock.DirLock.check` (a removed data_dir is refused at once, a renamed
        one within ``FULL_CHECK_SECONDS``)."""
        owner = self.owner
        if owner is not None:
            owner.check()

    def owns(self) -> bool:
        """:meth:`still_ours` for writes nobody waits on (indexes, rewrites): skip them instead."""
        try:
            self.still_ours()
        except StoreError:
            return False
        return True

    def not_inherited(self) -> None:
        """Refuse a call in a process forked from the owner: the store's cache and
        kept descriptors are the owner's, so a write here would be a second writer
        the owner never sees, and a read would answer the state at the fork."""
        owner = self.owner
        if owner is not None and owner.inherited_from is not None:
            raise StoreError(
                f"data_dir {self.shown} is open for writing by process {owner.inherited_from}, which "
                "forked this process: open the data_dir here (read_only=True beside the owner)")

    def warn_once(self, name: str, why: str) -> None:
        """Log once per name that a file was skipped."""
        with self.lock:
            if name in self._warned:
                return
            self._warned.add(name)
        log.warning("skipping %s: %s", name, why)

    # -- the list catalog --------------------------------------------------------------

    def catalogue(self, session_id: str, meta: Meta | None) -> None:
        """A session's meta changed (``None``: it is gone): keep the catalog and a list
        reading files now current (under :attr:`lock`)."""
        if self.metas is not None:
            if meta is None:
                self.metas.remove(session_id)
            else:
                self.metas.put(meta)
            self.list_dirty.add(session_id)
        if self.scans:
            self.changed[session_id] = meta


def _open_owned(ops: Ops, owner: DirLock | None, path: str, create: bool) -> tuple[int, bool]:
    """The kept descriptors' opener: a log is opened by its path only while data_dir is still
    the directory ``owner`` locked (:meth:`DataDir.still_ours`, asked before the open): once it
    was removed or replaced, opening by path would create an empty log in, or append to a log
    of, a directory another owner may hold."""
    if owner is not None:
        owner.verify()
    return open_append(ops, path, create)


def _make(path: Path, shown: str, read_only: bool) -> None:
    """Create data_dir (writable), and check it is a directory."""
    if not read_only:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"create data_dir {shown}: {reason(e)}") from None
    if not path.is_dir():
        raise StoreError(f"data_dir {shown} is not a directory" if path.exists()
                         else f"data_dir {shown} does not exist")
