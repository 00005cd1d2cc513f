"""The search index of a read-only fs open: an in-memory :class:`TermIndex`
brought up to date before each query, made from the logs.

A writable open keeps the persisted index instead (:mod:`._search_db`,
chosen by :func:`open_index`); a read-only one writes nothing, so it reads
each session in scope from its log once, then again whenever the log's
identity (size, mtime, inode) changes. (It still reads per-session files
``.search/<stem>.json`` of the earlier layout when one names the log; the
writable index removes them.)
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Collection
from typing import Any

from ..search_index import Matches, Ranked, SortKey, Stats, TermIndex, rank
from ..search_text import Query
from ._search_db import FsSearchDb, LogSource, Signature, _signature

__all__ = ["SEARCH_DIR", "FsSearch", "open_index"]

SEARCH_DIR = ".search"
_VERSION = 2  # (2: words of the text in NFC, search_text.py; a file of 1 holds the older words)




def _parse(raw: bytes, sig: Signature) -> list[tuple[str, str, int, dict[str, int]]] | None:
    """The docs of an index file made from the log ``sig`` names; ``None`` when
    it is not one (corrupted, another version, another log)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("v") != _VERSION or data.get("sig") != list(sig):
        return None
    docs = data.get("docs")
    if not isinstance(docs, list):
        return None
    out: list[tuple[str, str, int, dict[str, int]]] = []
    for d in docs:
        if not (isinstance(d, list) and len(d) == 4 and isinstance(d[0], str) and isinstance(d[1], str)
                and isinstance(d[2], int) and isinstance(d[3], dict)
                and all(isinstance(n, int) for n in d[3].values())):
            return None
        out.append((d[0], d[1], d[2], d[3]))
    return out


class FsSearch:
    """The search index of one fs store (see the module docstring)."""

    def __init__(self, data_dir: str, stem: Callable[[str], str], *, writable: bool) -> None:
        self._dir = os.path.join(data_dir, SEARCH_DIR)
        self._stem = stem
        self._writable = writable
        self._index = TermIndex()
        self._sigs: dict[str, Signature] = {}
        self._lock = threading.Lock()  # one catch-up at a time; a delete waits for a query in flight
        self._swept = False
        # Sessions this process committed to since their last catch-up (a writable store is the
        # only writer of its logs: the others need no stat per query).
        self._touched: set[str] = set()
        # ``touched(session_id)``: a commit wrote that session's log (O(1); the catch-up waits for
        # the next query). The set's own add: no frame of this class's on every commit.
        self.touched: Callable[[str], None] = self._touched.add
        self._stale: set[str] = set()  # touched, not yet caught up (outside an earlier query's scope)
        self._swept_all = False  # every session checked against its log once since the open

    def close(self) -> None:
        """Nothing to release (the files are written whole, per query)."""

    def _file(self, session_id: str) -> str:
        return os.path.join(self._dir, self._stem(session_id) + ".json")

    def search(self, store: LogSource, query: Query, sessions: Collection[str] | None,
               roles: Collection[str] | None) -> Matches:
        """:class:`Matches` from the index, brought up to date with ``store``'s logs first.
        (The store is passed per call, not kept: it holds this object, and no cycle.)"""
        with self._lock:
            if self._writable and self._swept_all:
                # Every log was checked once since the open, and this process is their one
                # writer: only the sessions it committed to since need a look (deletes forget).
                wanted = None if sessions is None else set(sessions)
                while self._touched:  # (a commit racing this adds again: caught up next time)
                    self._stale.add(self._touched.pop())
                for sid in [s for s in self._stale if wanted is None or s in wanted]:
                    self._stale.discard(sid)
                    self._catch_up(store, sid)
                ids = None if sessions is None else list(sessions)
            else:
                live = [m["session_id"] for m in store.list_metas()]
                ids = list(sessions) if sessions is not None else live
                if sessions is None or not self._swept:
                    self._sweep(set(live))
                for sid in ids:
                    self._catch_up(store, sid)
                self._swept_all = self._swept_all or sessions is None
            return self._index.search(query, ids, roles)

    def search_page(self, store: LogSource, query: Query, sessions: Collection[str] | None,
                    roles: Collection[str] | None, limit: int,
                    after: SortKey | None, stats: Stats | None = None) -> Ranked:
        """Every candidate of :meth:`search`, ranked here."""
        return rank(self.search(store, query, sessions, roles), limit, after, stats)

    def forget(self, session_id: str) -> None:
        """Drop a deleted session: from memory, and its file at once."""
        with self._lock:
            self._drop(session_id)

    def _drop(self, session_id: str) -> None:
        self._index.drop(session_id)
        self._sigs.pop(session_id, None)
        if self._writable:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._file(session_id))

    def _sweep(self, live: set[str]) -> None:
        """Forget sessions gone from the store (deleted by another process, or a
        delete that crashed between its log and its index file)."""
        for sid in self._index.sessions():
            if sid not in live:
                self._drop(sid)
        if self._writable and not self._swept:
            keep = {self._stem(s) + ".json" for s in live}
            with contextlib.suppress(FileNotFoundError):
                for name in os.listdir(self._dir):
                    if name not in keep:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(os.path.join(self._dir, name))
        self._swept = True

    def _catch_up(self, store: LogSource, session_id: str) -> None:
        sig = _signature(os.fspath(store.file_path(session_id)))
        if sig is None:
            self._drop(session_id)
            return
        if self._sigs.get(session_id) == sig:
            return
        docs = self._read_file(session_id, sig)
        if docs is None:
            self._index.drop(session_id)
            for e in store.entries_held(session_id):
                self._index.put(session_id, e)
            docs = self._index.docs_of(session_id)
            self._write_file(session_id, sig, docs)
        else:
            self._index.drop(session_id)
            for eid, role, ts, counts in docs:
                self._index.put_doc(session_id, eid, role, ts, counts)
        self._sigs[session_id] = sig

    def _read_file(self, session_id: str, sig: Signature) -> list[tuple[str, str, int, dict[str, int]]] | None:
        try:
            with open(self._file(session_id), "rb") as f:
                raw = f.read()
        except OSError:
            return None
        return _parse(raw, sig)

    def _write_file(self, session_id: str, sig: Signature, docs: list[Any]) -> None:
        if not self._writable:
            return
        body = json.dumps({"v": _VERSION, "sig": list(sig), "docs": [list(d) for d in docs]},
                          separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
        path = self._file(session_id)
        tmp = path + ".tmp"
        try:
            os.makedirs(self._dir, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(body)
            os.replace(tmp, path)  # whole: the previous file's words are gone with it
        except OSError:
            # Never a source of truth: a query answers from memory; the next one retries.
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def open_index(data_dir: str, stem: Callable[[str], str], *, writable: bool) -> FsSearch | FsSearchDb:
    """The search index of an fs store: a writable one keeps the persisted FTS5 index
    (:mod:`._search_db`); a read-only one (not the writer of the logs nor of the index)
    keeps this in-memory one, made from the logs."""
    if writable:
        return FsSearchDb(data_dir)  # (its rows name sessions by number, not by file stem)
    return FsSearch(data_dir, stem, writable=False)
