"""Decoding a lazy entry's body from its log line, and keeping it (mixed into
:class:`~._lazy.LazyEntries`, whose arrays it reads).

A reader takes an entry's location outside the session's lock; its line is
read under it. Everything that may happen in between is answered here: a
compaction moved the line (read where it lives now), the session was deleted
(:class:`~session_manager.errors.Vanished`), the session left the cache and a
newer load owns the log (ask the store for the entry now), the entry was
replaced (answer with what was read, which came first, but never cache it
over the newer body).
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import StoreError, Vanished
from ._fileops import ReadAt
from ._records import decode_record

Entry = dict[str, Any]


def _deleted(offset: int, length: int) -> bytes:
    """The reader of a deleted session's arrays (:meth:`LazyEntries.vanish`)."""
    raise FileNotFoundError("the session's log was deleted")


class BodyReads:
    """The body half of :class:`~._lazy.LazyEntries` (which declares the slots)."""

    if not TYPE_CHECKING:
        # Empty at run time (LazyEntries holds the slots: no per-mapping __dict__); the
        # checker sees the declarations below instead, which it would refuse beside slots.
        __slots__ = ()

    _session_id: str
    _read: ReadAt | None
    _guard: threading.RLock | None
    _current: Callable[[str], Entry | None] | None
    _bodies: dict[str, Entry]
    _offs: array[int]
    _lens: array[int]
    body_bytes: int

    def guard(self, lock: threading.RLock) -> None:
        """Bodies decoded from now on are cached under ``lock`` (the session's:
        its writers replace entries holding it)."""
        self._guard = lock

    def vanish(self) -> None:
        """The session was deleted (under its lock): a reader still holding these
        arrays hears so (:class:`Vanished`) instead of reading a log created
        since under the same name at their offsets."""
        self._read = _deleted

    def detach(self, current: Callable[[str], Entry | None]) -> None:
        """The store no longer keeps these arrays current (the session left its
        cache; a later load may compact the log under them): a body whose line
        moved is asked of ``current`` (the session's entry now, or ``None``)."""
        self._current = current

    def _decode(self, i: int, entry_id: str, offset: int, length: int) -> Entry:
        """The body of ``entry_id`` (at position ``i``) from its line at (``offset``, ``length``)."""
        while True:
            read = self._read
            if read is None:
                raise StoreError(f"entry {entry_id} of session {self._session_id} has no readable log")
            try:
                line = read(offset, length)
            except FileNotFoundError:
                # Deleted since this reader took its path (the log is renamed aside first).
                raise Vanished(self._session_id, f"session {self._session_id} was deleted during the read") from None
            except OSError as e:
                raise StoreError(f"read entry {entry_id} of session {self._session_id}: {e}") from e
            record = decode_record(line, self._session_id)
            entry = record.get("entry") if record is not None else None
            if isinstance(entry, dict) and entry.get("id") == entry_id:
                break
            if self._read is _deleted:  # deleted while this read waited for the session's lock
                raise Vanished(self._session_id, f"session {self._session_id} was deleted during the read")
            # The location was taken outside the session's lock: a compaction may have replaced
            # the log (and moved the line) since. Read where the entry lives now, or its new body.
            body = self._bodies.get(entry_id)
            if body is not None:
                return body
            moved = (self._offs[i], self._lens[i]) if i < len(self._offs) else (offset, length)
            if moved == (offset, length) or moved[0] < 0:
                current = self._current(entry_id) if self._current is not None else None
                if current is not None:
                    return current  # a reader still holding a dropped session: the entry as stored now
                # The log changed under an index that matched it when loaded: not
                # ours to guess, so say so instead of handing out a wrong entry.
                raise StoreError(f"log of session {self._session_id} changed under its index (entry {entry_id})")
            offset, length = moved
        guard = self._guard
        if guard is None:
            self._cache(i, entry_id, entry, offset, length)
        else:
            with guard:  # the line was read under it, but a writer may have replaced the entry since
                self._cache(i, entry_id, entry, offset, length)
        return entry

    def _cache(self, i: int, entry_id: str, entry: Entry, offset: int, length: int) -> None:
        """Keep a body just decoded from (``offset``, ``length``) unless the entry was replaced
        meanwhile (a newer body, or a new line): the reader answers with what it read, which
        came first, and the next reader gets the newer one."""
        if entry_id in self._bodies or i >= len(self._offs) or self._offs[i] != offset or self._lens[i] != length:
            return
        self._bodies[entry_id] = entry
        self.body_bytes += length
