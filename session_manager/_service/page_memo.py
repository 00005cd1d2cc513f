"""Pages this service built, kept with the version of the session they were built
from, so a read that finds the session at that version again answers the page
kept instead of building it anew (``messages-tail``).

Only a store that names versions (:meth:`~session_manager.store.base.SessionStore.
meta_and_leaf_since`: postgres by the session row's ``xmin``, sqlite by its ``rev``)
makes pages worth keeping: it checks the version in the read the call makes anyway
(one statement, and no path read when it holds), so every call still sees every
write, this instance's or another's. A page is kept as its exact JSON line and
decoded for each answer: each caller gets objects of its own (one C call, cheaper
than a deep copy), and the bytes bound the memory kept. A page orjson cannot write
exactly (an integer past 64 bits, a lone surrogate) is not kept; what it writes it
reads back equal (the store's values hold no NaN or infinity).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import orjson

__all__ = ["PageMemo"]

MAX_PAGES = 256  # sessions x requests kept (the least recently used goes first)
MAX_BYTES = 8 * 1024 * 1024  # their JSON, all together
MAX_PAGE_BYTES = 512 * 1024  # a larger page is built each time (a rare, heavy page is no hot path)


class PageMemo:
    """Pages by request key, each with the session version it was built from."""

    def __init__(self, max_pages: int = MAX_PAGES, max_bytes: int = MAX_BYTES) -> None:
        self._pages: OrderedDict[Hashable, tuple[Hashable, bytes]] = OrderedDict()
        self._bytes = 0
        self._max_pages = max_pages
        self._max_bytes = max_bytes
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> tuple[Hashable, bytes] | None:
        """The version and page kept for ``key`` (hold on to both: the page may be
        replaced or dropped before the read that checks the version answers)."""
        with self._lock:
            found = self._pages.get(key)
            if found is not None:
                self._pages.move_to_end(key)
            return found

    @staticmethod
    def page(kept: tuple[Hashable, bytes]) -> Any:
        """A fresh copy of a kept page (objects no other caller holds)."""
        return orjson.loads(kept[1])

    def keep(self, key: Hashable, version: Hashable, page: Any) -> None:
        """Keep ``page``, built from the session at ``version``, for ``key``. Call it
        before handing ``page`` out: what is kept is its JSON as built."""
        try:
            line = orjson.dumps(page)
        except TypeError:  # (orjson.JSONEncodeError is one)
            return  # not for orjson: built each time
        if len(line) > MAX_PAGE_BYTES:
            return
        with self._lock:
            old = self._pages.pop(key, None)
            if old is not None:
                self._bytes -= len(old[1])
            self._pages[key] = (version, line)
            self._bytes += len(line)
            while self._pages and (len(self._pages) > self._max_pages or self._bytes > self._max_bytes):
                _, (_, dropped) = self._pages.popitem(last=False)
                self._bytes -= len(dropped)
