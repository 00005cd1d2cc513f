"""Deleting a session from the fs store: whole or not at all (the commit
point is the log's rename aside, :mod:`._delete`), after any background
rewrite of its log was cancelled. Mixed into :class:`~.fs.FsStore`."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .._core.state import SessionState
from ..base import Meta
from . import _removal, _rewrite, _sessions_index
from ._background import Compactor
from ._cache import StateCache
from ._casefold import FoldIndex
from ._catalog import MetaCatalog
from ._descriptors import FdCache
from ._fileops import Ops
from ._lazy import LazyEntries
from ._logfiles import LogFiles
from ._tail import TailFix


class SessionDeletion:
    """What :class:`~.fs.FsStore` deletes with (its attributes, declared here for the checker)."""

    durability: str
    _ops: Ops
    _lock: threading.Lock
    _sessions: StateCache
    _compactor: Compactor | None
    _fds: FdCache
    _files: LogFiles
    _tail_fix: dict[str, TailFix]
    _budgets: dict[str, _rewrite.LogBudget]
    _metas: MetaCatalog | None
    _scans: int
    _changed: dict[str, Meta | None]
    _fold: FoldIndex | None
    _sessions_file: Path

    if TYPE_CHECKING:
        def _writable(self) -> None: ...
        def _log(self, session_id: str) -> str: ...
        def stem(self, session_id: str) -> str: ...
        def file_path(self, session_id: str) -> Path: ...
        def attachments_dir(self, session_id: str) -> Path: ...

    def delete_session(self, session_id: str) -> bool:
        """Whole or not at all; the commit point is the log's rename aside (:mod:`._delete`)."""
        self._writable()
        self.stem(session_id)  # an over-long id is the caller's error, before anything
        # The session's lock without loading it: a replay could compact, and
        # compaction never runs inside a delete (nothing it wrote would survive).
        while True:
            with self._lock:
                state = self._sessions.setdefault(session_id, SessionState())
            state.lock.acquire()
            if self._sessions.get(session_id) is state:
                if self._compactor is None or not self._compactor.rewriting(session_id):
                    break
                self._compactor.cancel(session_id)  # its rewrite must not land over the delete
            state.lock.release()  # dropped from the cache meanwhile, or a rewrite in flight: again
            if self._compactor is not None:
                self._compactor.wait(session_id)
        try:
            if self._compactor is not None:
                self._compactor.wait(session_id)  # a landed rewrite's cleanup (it never takes this lock)
            self._fds.forget(self._log(session_id))  # no descriptor into the log set aside
            existed = _removal.delete(self._ops, self.file_path(session_id), self.attachments_dir(session_id),
                           sync=self.durability == "fsync")
            if isinstance(state.entries, LazyEntries):
                state.entries.vanish()  # a reader holding its path must not read a re-created log
            state.clear()  # a writer waiting on this state must see the session gone
            self._files.forget(session_id, remove_index=True)  # after the commit point: a failed delete keeps it
            with self._lock:
                self._sessions.pop(session_id, None)
                self._tail_fix.pop(session_id, None)
                self._budgets.pop(session_id, None)
                if self._metas is not None:
                    self._metas.remove(session_id)
                if self._scans:
                    self._changed[session_id] = None
                if self._fold is not None:
                    self._fold.release(session_id)
        finally:
            state.lock.release()
        self._unlist(os.path.basename(self._log(session_id)))
        return existed

    # -- erasure of what a deleted session left in the sessions index ---------------

    def _erase_batch(self) -> threading.local:
        # Made on first use (dict.setdefault is atomic): a mixin has no __init__ of its own.
        batch: threading.local = self.__dict__.setdefault("_erase_local", threading.local())
        return batch

    @contextlib.contextmanager
    def erasing(self) -> Iterator[None]:
        """Deletes on this thread inside the block rewrite the sessions index once, at its end."""
        batch = self._erase_batch()
        depth = getattr(batch, "depth", 0)
        if depth == 0:
            batch.names = set()
        batch.depth = depth + 1
        try:
            yield
        finally:
            batch.depth = depth
            if depth == 0 and batch.names:
                names, batch.names = batch.names, set()
                self._drop_listed(names)

    def _unlist(self, name: str) -> None:
        batch = self._erase_batch()
        if getattr(batch, "depth", 0):
            batch.names.add(name)
        else:
            self._drop_listed({name})

    def _drop_listed(self, names: set[str]) -> None:
        """Erasure is real: the sessions index keeps each log's last meta (title, metadata,
        draft), so a deleted session's row goes now, not at the next save or open."""
        with self._lock:  # the index's other writer (_save_sessions_index) holds it too
            try:
                _sessions_index.scrub(self._sessions_file, names)
            except OSError:
                # A cache (rebuilt from the logs when missing): gone whole rather than left holding them.
                with contextlib.suppress(FileNotFoundError):
                    self._sessions_file.unlink()
