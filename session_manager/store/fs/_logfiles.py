"""The fs store's per-session files: log path, open descriptor, index sidecar.

One :class:`LogFiles` per store computes each session's paths once, keeps
its append descriptor in the shared :class:`~._descriptors.FdCache`, loads sessions
through their index (:mod:`._sidecar`), notes where each write put its
entries, and rewrites the index when enough was appended since the last one
(amortized: once half as much again was appended), when the session leaves the cache,
after a compaction, and at close. The log is written first, always; the
index only ever describes a prefix of it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .._core.state import SessionState
from . import _sidecar
from ._descriptors import FdCache
from ._encoding import encode_id
from ._fileops import ReadAt
from ._lazy import LazyEntries
from ._records import entry_line_spans

log = logging.getLogger("session_manager.store.fs")

# Rewrite a session's index once this many bytes were appended after it,
# or half of what it covers, whichever is more. Only a crash leaves that much
# unindexed (eviction and close save): its next open replays it (~12 ms per MiB),
# against a save (~0.5 ms: the arrays encoded, a temp file renamed) every few
# hundred appends (it was 256 KiB: ~2.5 us of every append in 3,000 on a new session).
SAVE_MIN_BYTES = 1024 * 1024
# A background rewrite's index, written after it landed: log path, index path, log inode, bytes.
LandedIndex = tuple[str, str, int, bytes]


@dataclass(slots=True)
class _Files:
    log: str
    index: str
    covered: int = 0  # the clean prefix the in-memory state reflects
    saved: int = -1  # the prefix the index on disk describes (-1: none)
    ino: int | None = None


class LogFiles:
    def __init__(self, data_dir: Path, fds: FdCache, *, read_only: bool = False,
                 stem: Callable[[str], str] = encode_id,
                 open_log: Callable[[str], int | None] | None = None) -> None:
        self.dir = data_dir
        self.fds = fds
        self.read_only = read_only
        self._stem = stem
        self._open_log = open_log
        self._lock = threading.Lock()
        self._files: dict[str, _Files] = {}

    def files(self, session_id: str) -> _Files:
        files = self._files.get(session_id)
        if files is None:
            stem = self._stem(session_id)
            files = _Files(os.path.join(self.dir, stem + ".jsonl"), _sidecar.index_path(self.dir, stem))
            with self._lock:
                files = self._files.setdefault(session_id, files)
        return files

    def log_path(self, session_id: str) -> str:
        return self.files(session_id).log

    def known_log_path(self, session_id: str) -> str | None:
        """:meth:`log_path` of a session this store has files for (keeps nothing for others)."""
        files = self._files.get(session_id)
        return None if files is None else files.log

    def reader(self, session_id: str, lock: threading.RLock) -> ReadAt:
        """Reads of the session's current log through the cached descriptor,
        under the session's lock (so a compaction never swaps the file mid-read)."""
        path = self.files(session_id).log
        fds = self.fds

        def read(offset: int, length: int) -> bytes:
            with lock:
                slot, _ = fds.acquire(path, create=False)  # (not ``use``: a generator per body read)
                try:
                    return os.pread(slot.fd, length, offset)
                finally:
                    fds.release(path, slot)

        return read

    # -- loading -------------------------------------------------------------------

    def load(self, session_id: str, state: SessionState) -> _sidecar.TailFix:
        """Fill ``state`` (empty, under its lock) from the log, through the
        index when it matches; writes a new index when it did not (unless
        read-only). Returns what the next write must fix about the tail."""
        files = self.files(session_id)
        reader = self.reader(session_id, state.lock)
        if self._open_log is None:
            loaded = _sidecar.load(files.log, files.index, session_id, reader)
        else:
            loaded = _sidecar.load(files.log, files.index, session_id, reader, open_log=self._open_log)
        state.entries = loaded.entries
        if isinstance(loaded.entries, LazyEntries):
            loaded.entries.guard(state.lock)
        state.meta, state.leaf = loaded.state.meta, loaded.state.leaf
        state.renew()  # (filled afresh: a version never seen)
        state.path_ids = state.path_pos = None
        files.covered, files.ino = loaded.covered, loaded.ino
        files.saved = loaded.covered if loaded.index_current else -1
        if loaded.ino is not None and not loaded.index_current and not self.read_only:
            self.save(session_id, state)
        return loaded.tail_fix

    # -- writing -------------------------------------------------------------------

    def note_commit(self, session_id: str, state: SessionState, end: int) -> None:
        """After a commit's whole lines landed, up to ``end``, and the state holds
        where (:meth:`SessionState.apply`): (amortized) a fresh index."""
        files = self._files.get(session_id) or self.files(session_id)  # (known: the write just made them)
        files.covered = end
        if files.saved < 0 or end - files.saved > max(SAVE_MIN_BYTES, files.saved // 2):
            self.save(session_id, state)

    def save(self, session_id: str, state: SessionState) -> None:
        """Write the index for what the state reflects (under the state's lock)."""
        files = self.files(session_id)
        entries = state.entries
        if self.read_only or not isinstance(entries, LazyEntries) or files.saved == files.covered:
            return
        if _sidecar.save(files.log, files.index, session_id, state, entries, files.covered):
            files.saved = files.covered
        else:
            files.saved = -1

    def rewritten(self, session_id: str, state: SessionState, body: bytes) -> None:
        """The log was replaced by ``body`` (a compaction snapshot): point the
        entries at their new lines and replace the index (a log under
        SAVE_MIN_BYTES: remove it, write none: :meth:`_small_rewrite`)."""
        files = self.files(session_id)
        self.fds.forget(files.log)
        entries = state.entries
        indexed = files.saved != 0
        files.covered, files.saved = len(body), -1
        if isinstance(entries, LazyEntries):
            spans = dict(_snapshot_spans(body, state.meta is not None, list(entries)))
            entries.rebase(self.reader(session_id, state.lock), spans)
            if len(body) < SAVE_MIN_BYTES and not self.read_only and entries.fully_located():
                self._small_rewrite(files, indexed)
                return
        self.save(session_id, state)

    @staticmethod
    def _small_rewrite(files: _Files, indexed: bool) -> None:
        """A log just rewritten under SAVE_MIN_BYTES (under the state's lock): small enough to
        replay as fast as an index loads, so none is written (a stream's every rewrite paid a
        file create and a rename for one). "Saved at 0" defers the next index as for a new log
        (past SAVE_MIN_BYTES, or at eviction and close); the replaced log's index goes, once
        (``indexed``: one may be there), since a later file may get its inode back. Removed under
        the lock: later, it could take away the index a save (eviction, a commit past
        SAVE_MIN_BYTES) wrote since."""
        files.saved = 0
        if indexed:
            with contextlib.suppress(OSError):
                _sidecar.remove_index(files.index)

    def landed(self, session_id: str, state: SessionState, body: bytes, ids: list[str], has_meta: bool,
               journal: list[tuple[bytes, tuple[str, ...]]], fd: int) -> tuple[int | None, LandedIndex | None]:
        """A background rewrite renamed its file over the log (under the state's
        lock): ``body`` (the snapshot of ``ids``) then the ``journal`` of commits
        made since, each with its entry ids. ``fd`` becomes the kept descriptor;
        the entries point at their new lines. Returns the old descriptor to
        close and the new index to write (log path, index path, log inode, bytes), both
        without the lock."""
        files = self.files(session_id)
        old = self.fds.swap(files.log, fd)
        size = len(body) + sum(len(data) for data, _ in journal)
        ino = os.fstat(fd).st_ino
        indexed = files.saved != 0  # 0: a small rewrite before this one removed the index (and none since)
        files.covered, files.ino, files.saved = size, ino, -1
        entries = state.entries
        if not isinstance(entries, LazyEntries):
            return old, None
        spans = dict(_snapshot_spans(body, has_meta, ids))
        pos = len(body)
        for data, entry_ids in journal:  # a later line of an entry wins, as in replay
            spans.update(zip(entry_ids, entry_line_spans(data, pos), strict=False))
            pos += len(data)
        entries.rebase(self.reader(session_id, state.lock), spans)
        if self.read_only or not entries.fully_located():
            return old, None
        if size < SAVE_MIN_BYTES:
            self._small_rewrite(files, indexed)
            return old, None
        try:
            tail = _sidecar.tail_digest(fd, size)
        except OSError:
            return old, None  # no index now: the next save or open writes one
        index = _sidecar.encode_index(session_id, ino, size, tail, state, entries)
        files.saved = size  # written by the caller (a lost one costs a rebuild, never an entry)
        return old, (files.log, files.index, ino, index)

    @staticmethod
    def write_landed_index(log_path: str, path: str, ino: int, index: bytes) -> None:
        """The index :meth:`landed` returned (no lock held; its own temp name, so a
        concurrent :meth:`save` of the same session never shares one). Skipped when
        the log was replaced again meanwhile: it would only describe a gone file."""
        try:
            if os.stat(log_path).st_ino != ino:
                return
            _sidecar.write_index(path, index, tmp_suffix=".compact.tmp")
        except OSError as e:
            log.warning("%s: index not written (%s); the next open replays the log", path, e)

    def forget(self, session_id: str, *, remove_index: bool = False) -> None:
        """The session left the store (delete) or its log is about to be
        replaced: close its descriptor, optionally drop its index."""
        with self._lock:
            files = self._files.pop(session_id, None)
        if files is not None:
            self.fds.forget(files.log)
        if remove_index and not self.read_only:
            index = files.index if files is not None else _sidecar.index_path(self.dir, self._stem(session_id))
            with contextlib.suppress(OSError):
                _sidecar.remove_index(index)

    def evicted(self, session_id: str) -> None:
        """The session left the cache (its index saved): keep nothing for it;
        its descriptor stays in the bounded :class:`FdCache` until pushed out."""
        with self._lock:
            self._files.pop(session_id, None)

    def close(self, states: dict[str, SessionState]) -> None:
        for session_id, state in list(states.items()):
            if session_id in self._files and state.loaded:
                with state.lock:
                    self.save(session_id, state)
        self.fds.close_all()


def _snapshot_spans(body: bytes, has_meta: bool, ids: list[str]) -> list[tuple[str, tuple[int, int]]]:
    """Where :func:`._records.encode_snapshot` put each entry line: after the
    meta line, one line per entry in order."""
    out: list[tuple[str, tuple[int, int]]] = []
    pos = body.index(b"\n") + 1 if has_meta else 0
    for eid in ids:
        end = body.index(b"\n", pos)
        out.append((eid, (pos, end - pos)))
        pos = end + 1
    return out
