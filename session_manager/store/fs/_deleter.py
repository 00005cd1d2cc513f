"""Deleting a session from the fs store: whole or not at all (the commit
point is the log's rename aside, :mod:`._removal`), after any background
rewrite of its log was cancelled. A part of :class:`~._store.FsStore`."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from .._core.state import SessionState
from . import _removal, _sessions_index
from ._attachments import Attachments
from ._datadir import DataDir
from ._lazy import LazyEntries
from ._sidecar import index_path
from ._versions import EvictedVersions


class Deleter:
    """The fs store's deletes (its part): the session's log, its attachment folder
    (``attachments``' naming) and its row in the sessions index."""

    def __init__(self, data: DataDir, attachments: Attachments, versions: EvictedVersions | None = None) -> None:
        self._d = data
        self._attachments = attachments
        self._versions = versions  # a dropped session's version: forgotten with it (one made again is another)
        self._erase_local = threading.local()  # :meth:`erasing`: this thread's batch

    def delete_session(self, session_id: str) -> bool:
        """Whole or not at all; the commit point is the log's rename aside (:mod:`._removal`)."""
        self._d.writable()
        self._d.stem(session_id)  # an over-long id is the caller's error, before anything
        # The session's lock without loading it: a replay could compact, and
        # compaction never runs inside a delete (nothing it wrote would survive).
        while True:
            with self._d.lock:
                state = self._d.sessions.setdefault(session_id, SessionState())
            state.lock.acquire()
            if self._d.sessions.get(session_id) is state:
                if self._d.compactor is None or not self._d.compactor.rewriting(session_id):
                    break
                self._d.compactor.cancel(session_id)  # its rewrite must not land over the delete
            state.lock.release()  # dropped from the cache meanwhile, or a rewrite in flight: again
            if self._d.compactor is not None:
                self._d.compactor.wait(session_id)
        try:
            if self._d.compactor is not None:
                self._d.compactor.wait(session_id)  # a landed rewrite's cleanup (it never takes this lock)
            self._d.fds.forget(self._d.log(session_id))  # no descriptor into the log set aside
            existed = _removal.delete(self._d.ops, Path(self._d.log(session_id)),
                                      self._attachments.attachments_dir(session_id), sync=self._d.durability == "fsync",
                                      index=index_path(self._d.dir, self._d.stem(session_id)))
            if isinstance(state.entries, LazyEntries):
                state.entries.vanish()  # a reader holding its path must not read a re-created log
            state.clear()  # a writer waiting on this state must see the session gone
            if self._versions is not None:  # (under the session's lock, as an eviction keeps it)
                self._versions.forget(session_id)
            self._d.files.forget(session_id, remove_index=True)  # after the commit point: a failed delete keeps it
            with self._d.lock:
                self._d.sessions.pop(session_id, None)
                self._d.tail_fix.pop(session_id, None)
                self._d.budgets.pop(session_id, None)
                if self._d.metas is not None:
                    self._d.metas.remove(session_id)
                if self._d.scans:
                    self._d.changed[session_id] = None
                if self._d.fold is not None:
                    self._d.fold.release(session_id)
        finally:
            state.lock.release()
        self._unlist(os.path.basename(self._d.log(session_id)))
        return existed

    # -- erasure of what a deleted session left in the sessions index ---------------

    def _erase_batch(self) -> threading.local:
        return self._erase_local

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
        with self._d.lock:  # the index's other writer (_save_sessions_index) holds it too
            try:
                _sessions_index.scrub(self._d.sessions_file, names)
            except OSError:
                # A cache (rebuilt from the logs when missing): gone whole rather than left holding them.
                with contextlib.suppress(FileNotFoundError):
                    self._d.sessions_file.unlink()
