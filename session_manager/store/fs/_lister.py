"""The fs store's list path: the catalog of every session's meta, built by
the first list from the sessions index (:mod:`._cold_list`), and the index
written back. A part of :class:`~._store.FsStore`."""

from __future__ import annotations

import contextlib
import os

from ...errors import StoreError
from ..base import Meta
from . import _cold_list, _open_listing, _removal, _rewrite, _sessions_index
from ._casefold import FoldIndex
from ._catalog import MetaCatalog
from ._datadir import DataDir
from ._fileops import Ops, reason
from ._open_listing import OpenedListing
from ._opener import LOG_SUFFIX
from ._shared_keys import shared_keys
from ._tail import meta_of_log


class Lister:
    """The fs store's list path (its part): the catalog (:attr:`DataDir.metas`) built by the
    first list, a read-only store's scans, and the sessions index written back."""

    def __init__(self, data: DataDir) -> None:
        self._d = data
        self.opened: OpenedListing | None = None  # the open's listing, for the first list (writable)
        self._peeked: dict[str, tuple[tuple[int, int, int], Meta | None]] = {}  # read-only list cache

    def recover(self) -> None:
        """At a writable open: finish what an earlier owner left half done, and keep what the
        open learnt of data_dir's entries for the first list (:mod:`._open_listing`)."""
        d = self._d
        if not d.case_insensitive:  # (its fold index needs every name)
            vouched = _sessions_index.read_stamp(d.sessions_file)
            if vouched is not None and _open_listing.stamp_of(d.ops, d.path) == vouched:
                # data_dir holds the index's logs and nothing half done: only attachments/ may
                if not _removal.recover(d.ops, d.dir, None, d.folder_of_stem, _rewrite.TEMP_SUFFIX):
                    self.opened = OpenedListing(None, vouched)
                return
        try:
            names, opened = _open_listing.take(d.ops, d.path, LOG_SUFFIX)
        except OSError:
            names, opened = None, None  # the first list reports it
        if names is not None and not _removal.recover(d.ops, d.dir, names, d.folder_of_stem, _rewrite.TEMP_SUFFIX):
            self.opened = opened  # (recovering changed data_dir: the first list lists it again)
        if names is not None:
            # data_dir changed since the index was written: the rows of logs gone (deleted by a
            # process killed before its batch's scrub) are erased now, not at the first list.
            with contextlib.suppress(OSError):
                _sessions_index.scrub_absent(d.sessions_file, names)
        if d.case_insensitive:
            logs = self.log_names() if names is None else [n for n in names if n.endswith(LOG_SUFFIX)]
            d.fold = FoldIndex(logs, LOG_SUFFIX)

    def catalog(self) -> MetaCatalog:
        """The list catalog (writable), built by the first list from the sessions index."""
        with self._d.lock:
            if self._d.metas is not None:
                return self._d.metas
            self._d.scans += 1
        try:
            catalog = _cold_list.catalog(self._scan_with_index())  # file I/O: outside the store-wide lock
        finally:
            with self._d.lock:
                self._d.scans -= 1
                changed = dict(self._d.changed)
                if not self._d.scans:
                    self._d.changed.clear()
        with self._d.lock:
            if self._d.metas is None:
                for sid, meta in changed.items():  # written while the scan read the files
                    catalog.remove(sid) if meta is None else catalog.put(meta)
                self._d.metas = catalog
            return self._d.metas

    def log_names(self) -> list[str]:
        try:
            names = self._d.ops.listdir(self._d.dir)
        except OSError as e:
            raise StoreError(f"read data_dir: {reason(e)}") from None
        return [n for n in names if n.endswith(LOG_SUFFIX)]

    def scan_metas(self) -> dict[str, Meta]:
        """A read-only store's scan: the sessions index where it matches a log
        (never written here), every other log's last meta from its tail."""
        logs = _cold_list.log_stats(self._d.ops, self._d.path, self._d.warn_once)
        return _cold_list.metas(_cold_list.scan(logs, self._d.sessions_file, lambda sid: (False, None),
                                              self._peek_meta, self._d.warn_once, write_back=False))

    def _scan_with_index(self) -> _cold_list.ColdList:
        """A writable store's scan: through the sessions index (a stat per log;
        only logs changed since it was written are read)."""
        def loaded_meta(session_id: str) -> tuple[bool, Meta | None]:
            with self._d.lock:
                state = self._d.sessions.get(session_id)
            # A state still replaying (another thread, under its own lock) holds
            # a partial meta: only a loaded one is the truth, else the file is.
            if state is not None and state.loaded:
                return True, state.meta
            return False, None

        with self._d.lock:
            opened, self.opened = self.opened, None  # one use: later lists read the catalog
        recorded = _sessions_index.read(self._d.sessions_file)
        listed, stamp = _opened_logs(opened, recorded, self._d.ops, self._d.path)
        logs = _cold_list.log_stats(self._d.ops, self._d.path, self._d.warn_once, listed)
        if listed is not None and len(logs[0]) != len(listed):
            stamp = None  # a name is not a regular log (now): every open must list, to look at it again
        cold = _cold_list.match(logs, recorded, self._d.sessions_file, loaded_meta, self._peek_meta,
                               self._d.warn_once, write_back=True, stamp=stamp)
        with self._d.lock:
            self._d.list_dirty.clear()
        return cold

    def save_sessions_index(self) -> None:
        """Record the metas written since the last scan (under the store lock)."""
        changed: dict[str, tuple[str, _sessions_index.Key, Meta | None] | None] = {}
        for session_id in self._d.list_dirty:
            path = self._d.log(session_id)  # not through LogFiles: that would keep a record per evicted session
            try:
                key = _sessions_index.file_key(self._d.ops.lstat(path))
            except OSError:
                changed[os.path.basename(path)] = None
                continue
            changed[os.path.basename(path)] = (
                session_id, key, self._d.metas.get(session_id) if self._d.metas is not None else None)
        try:
            listed, opened = _open_listing.take(self._d.ops, self._d.path, LOG_SUFFIX)
        except OSError:
            _cold_list.update(self._d.sessions_file, changed, None)
        else:
            # Stamped when data_dir last changed long enough ago (only appends since: the common
            # session), so the next open need not list it (:mod:`._open_listing`).
            clean = not _removal.holds_leftovers(listed, _rewrite.TEMP_SUFFIX)
            _cold_list.update(self._d.sessions_file, changed, listed, opened.stamp if clean else None)
        self._d.list_dirty.clear()

    def _peek_meta(self, name: str, session_id: str) -> Meta | None:
        """The last committed meta of a log, from its tail: listing never
        needs entries (a read-only store also remembers it per file version)."""
        meta = meta_of_log(self._d.ops, os.path.join(self._d.path, name), session_id,
                           self._peeked if self._d.read_only else None)
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
