"""The fs store's list path: the catalog of every session's meta, built by
the first list from the sessions index (:mod:`._coldlist`), and the index
written back. Mixed into :class:`~.fs.FsStore`."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import StoreError
from ..base import Meta
from . import _cold_list, _open_listing, _removal, _rewrite, _sessions_index
from ._cache import StateCache
from ._catalog import MetaCatalog
from ._fileops import Ops, reason
from ._open_listing import OpenedListing
from ._opener import LOG_SUFFIX
from ._shared_keys import shared_keys
from ._tail import meta_of_log


class CatalogListing:
    """What :class:`~.fs.FsStore` lists with (its attributes, declared here for the checker)."""

    dir: Path
    read_only: bool
    _ops: Ops
    _dir: str
    _lock: threading.Lock
    _sessions: StateCache
    _metas: MetaCatalog | None
    _scans: int
    _changed: dict[str, Meta | None]
    _sessions_file: Path
    _list_dirty: set[str]
    _peeked: dict[str, tuple[tuple[int, int, int], Meta | None]]
    _opened: OpenedListing | None

    if TYPE_CHECKING:
        def _log(self, session_id: str) -> str: ...
        def _warn_once(self, name: str, why: str) -> None: ...

    def _catalog(self) -> MetaCatalog:
        """The list catalog (writable), built by the first list from the sessions index."""
        with self._lock:
            if self._metas is not None:
                return self._metas
            self._scans += 1
        try:
            catalog = _cold_list.catalog(self._scan_with_index())  # file I/O: outside the store-wide lock
        finally:
            with self._lock:
                self._scans -= 1
                changed = dict(self._changed)
                if not self._scans:
                    self._changed.clear()
        with self._lock:
            if self._metas is None:
                for sid, meta in changed.items():  # written while the scan read the files
                    catalog.remove(sid) if meta is None else catalog.put(meta)
                self._metas = catalog
            return self._metas

    def _log_names(self) -> list[str]:
        try:
            names = self._ops.listdir(self.dir)
        except OSError as e:
            raise StoreError(f"read data_dir: {reason(e)}") from None
        return [n for n in names if n.endswith(LOG_SUFFIX)]

    def _scan_metas(self) -> dict[str, Meta]:
        """A read-only store's scan: the sessions index where it matches a log
        (never written here), every other log's last meta from its tail."""
        logs = _cold_list.log_stats(self._ops, self._dir, self._warn_once)
        return _cold_list.metas(_cold_list.scan(logs, self._sessions_file, lambda sid: (False, None),
                                              self._peek_meta, self._warn_once, write_back=False))

    def _scan_with_index(self) -> _cold_list.ColdList:
        """A writable store's scan: through the sessions index (a stat per log;
        only logs changed since it was written are read)."""
        def loaded_meta(session_id: str) -> tuple[bool, Meta | None]:
            with self._lock:
                state = self._sessions.get(session_id)
            # A state still replaying (another thread, under its own lock) holds
            # a partial meta: only a loaded one is the truth, else the file is.
            if state is not None and state.loaded:
                return True, state.meta
            return False, None

        with self._lock:
            opened, self._opened = self._opened, None  # one use: later lists read the catalog
        recorded = _sessions_index.read(self._sessions_file)
        listed, stamp = _opened_logs(opened, recorded, self._ops, self._dir)
        logs = _cold_list.log_stats(self._ops, self._dir, self._warn_once, listed)
        if listed is not None and len(logs[0]) != len(listed):
            stamp = None  # a name is not a regular log (now): every open must list, to look at it again
        cold = _cold_list.match(logs, recorded, self._sessions_file, loaded_meta, self._peek_meta,
                               self._warn_once, write_back=True, stamp=stamp)
        with self._lock:
            self._list_dirty.clear()
        return cold

    def _save_sessions_index(self) -> None:
        """Record the metas written since the last scan (under the store lock)."""
        changed: dict[str, tuple[str, _sessions_index.Key, Meta | None] | None] = {}
        for session_id in self._list_dirty:
            path = self._log(session_id)  # not through LogFiles: that would keep a record per evicted session
            try:
                key = _sessions_index.file_key(self._ops.lstat(path))
            except OSError:
                changed[os.path.basename(path)] = None
                continue
            changed[os.path.basename(path)] = (
                session_id, key, self._metas.get(session_id) if self._metas is not None else None)
        try:
            listed, opened = _open_listing.take(self._ops, self._dir, LOG_SUFFIX)
        except OSError:
            _cold_list.update(self._sessions_file, changed, None)
        else:
            # Stamped when data_dir last changed long enough ago (only appends since: the common
            # session), so the next open need not list it (:mod:`._opened_listing`).
            clean = not _removal.holds_leftovers(listed, _rewrite.TEMP_SUFFIX)
            _cold_list.update(self._sessions_file, changed, listed, opened.stamp if clean else None)
        self._list_dirty.clear()

    def _peek_meta(self, name: str, session_id: str) -> Meta | None:
        """The last committed meta of a log, from its tail: listing never
        needs entries (a read-only store also remembers it per file version)."""
        meta = meta_of_log(self._ops, os.path.join(self._dir, name), session_id,
                           self._peeked if self.read_only else None)
        return None if meta is None else shared_keys(meta)


def _opened_logs(opened: OpenedListing | None, recorded: _sessions_index.Recorded | None, ops: Ops,
                 data_dir: str) -> tuple[list[str] | None, _sessions_index.Stamp | None]:
    """data_dir's log names as the open knew them, if they are still current, and
    the stamp that vouches for them; ``(None, None)``: list data_dir."""
    if opened is None or not opened.current(ops, data_dir):
        return None, None
    if opened.logs is not None:
        return opened.names(), opened.stamp
    if recorded is not None and recorded.stamp == opened.stamp:  # (not replaced since the open read its stamp)
        # A list of its own, not the cached ``names``: the catalog keeps the index alive
        # while metas are pending, and 10k names would stay with it (~1 MiB).
        return (recorded.names_text.split("/") if recorded.sids else []), opened.stamp
    return None, None
