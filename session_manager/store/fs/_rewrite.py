"""Online compaction of a session log: when superseded records outweigh the
live state, the log is rewritten as that state.

A streamed reply writes one whole entry snapshot per update, so without
this a log grows quadratically in the reply's length. :class:`LogBudget`
keeps, per session, the bytes on disk and an estimate of the bytes the live
state needs (each live entry's last line, the meta); a rewrite happens once
the log exceeds ``RATIO`` times the live bytes plus ``SLACK``. The rewrite
costs O(live bytes) and at least ``(RATIO - 1) * live + SLACK`` bytes were
written since the last one, so compaction adds O(1) amortized work per byte
appended. With RATIO 2 the log never exceeds 2 * live + SLACK plus the one
commit that crossed the line: at most 3x the live state + 64 KiB.

The rewrite is a temp file, fsync, rename over the log, then (durability
``fsync``) an fsync of the directory: a crash leaves the old log or the new
one, never a mix; a failure leaves the old log and a warning. Past the soft
line (``SOFT_SLACK`` instead of ``SLACK``) it starts in the background
(:mod:`._background`), so the fsync is off the caller's path, past the hard line
too (the commit that crosses it waits for none; the next one waits for the
rewrite to land). :func:`rewrite`, inline, is for a log far past the hard line
(:func:`came_in_long`), for maintenance and for a store whose compactor closed.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable

from ._fileops import CREATE_FLAGS, Ops, reason, write_all

log = logging.getLogger("session_manager.store.fs")

RATIO = 2
# Keeps small sessions from being rewritten every few lines; 64 KiB less a
# margin for the meta lines, so the log stays within 3x live + 64 KiB.
SLACK = 60 * 1024
# A background rewrite starts this far past RATIO * live: the rest of SLACK
# above it is what commits may append while its fsync runs. Close to SLACK:
# the commits carried over stay in the new log, and a wide gap (it was 45 KiB)
# re-triggered a rewrite on landing, doubling the rewrites of a stream (update-
# message 10.8k -> 15.6k/s, a 30 KB streamed reply 1.9k -> 3.9k updates/s).
SOFT_SLACK = SLACK - 4 * 1024
# A log whose live state is at most this many bytes is rewritten inline when it crosses the
# hard line, not in the background: writing and fsyncing a few KB costs its caller less than a
# rewrite beside it, whose worker takes turns at the GIL and whose fsync stalls every append
# meanwhile (a streamed reply of 4 KB, 1,000 updates: ~9k/s in the background, ~12k/s inline).
# Past it, the write of the snapshot grows with the log and the background takes it off the caller.
INLINE_LIVE = 256 * 1024
TEMP_SUFFIX = ".compact"  # appended to the log's name while the rewrite is written


class LogBudget:
    """Bytes on disk vs bytes live, for one session's log."""

    __slots__ = ("disk", "entries", "live", "meta", "retry_at")

    def __init__(self) -> None:
        self.disk = 0
        self.live = 0
        self.meta = 0
        self.retry_at = 0  # after a failed rewrite: not again before the log doubles
        self.entries: dict[str, int] = {}  # (a log loaded from disk: :class:`LoadedSizes`)

    def charge(self, written: int, entries: Iterable[tuple[str, int]], meta: int | None) -> None:
        """``written`` bytes appended, carrying each entry's newest snapshot
        size (by id) and the meta's (``None``: unchanged). One call per commit,
        before the state applies it (:class:`LoadedSizes` reads an entry's old line)."""
        self.disk += written
        sizes = self.entries
        live = self.live
        for entry_id, size in entries:
            live += size - sizes.get(entry_id, 0)
            sizes[entry_id] = size
        if meta is not None:
            live += meta - self.meta
            self.meta = meta
        self.live = live

    def charge_one(self, written: int, entry_id: str, size: int, meta: int) -> None:
        """:meth:`charge` of an append: one entry and the meta (no iterable: every append)."""
        self.disk += written
        sizes = self.entries
        self.live += size - sizes.get(entry_id, 0) + meta - self.meta
        sizes[entry_id] = size
        self.meta = meta

    def wants_compaction(self) -> bool:
        """Past the hard line: rewrite now (or wait for the rewrite in flight)."""
        return self.disk > RATIO * self.live + SLACK and self.disk > self.retry_at

    def wants_background(self) -> bool:
        """Past the soft line: time to start a background rewrite."""
        return self.disk > RATIO * self.live + SOFT_SLACK and self.disk > self.retry_at

    def rewritten(self, size: int) -> None:
        self.disk = size
        self.retry_at = 0

    def failed(self) -> None:
        self.retry_at = 2 * self.disk + SLACK


class LoadedSizes(dict[str, int]):
    """The entry sizes of a log loaded from disk: ``live`` counts its entries (from the
    index) before any is charged, so an entry not charged since counts what the load
    counted for it (``counted``; 0: a new one), not nothing. A plain dict otherwise:
    a budget that never loaded pays nothing for this."""

    __slots__ = ("_counted",)

    def __init__(self, counted: Callable[[str], int]) -> None:
        super().__init__()
        self._counted = counted

    def get(self, entry_id: str, default: int = 0) -> int:  # type: ignore[override]
        size = super().get(entry_id)
        return self._counted(entry_id) if size is None else size


def rewrites_inline(budget: LogBudget) -> bool:
    """A small log (live state at most ``INLINE_LIVE``): no background rewrite at the soft
    line, an inline one at the hard line."""
    return budget.live <= INLINE_LIVE


def came_in_long(budget: LogBudget) -> bool:
    """Past the hard line by more than one commit takes a log (a commit is at most about the
    live state): a log loaded long, or retried after a failed rewrite. Rewritten inline at once,
    not left past issue 9's bound until a background rewrite lands."""
    return budget.disk > (RATIO + 1) * budget.live + SLACK


def rewrite(ops: Ops, path: str, body: bytes) -> bool:
    """Replace the log at ``path`` with ``body`` (temp file, fsync, rename); ``False`` (logged)
    if it could not, in which case the log is as it was. The directory is not synced here: the
    store does it, or owes it to its next fsync-mode write (``FsStore._renamed``)."""
    tmp = path + TEMP_SUFFIX
    try:
        fd = ops.open(tmp, CREATE_FLAGS, 0o644)
        try:
            write_all(fd, body)
            os.fsync(fd)  # always: a rename over the log must never expose an empty file
        finally:
            os.close(fd)
        ops.replace(tmp, path)
    except OSError as e:
        log.warning("%s: compaction skipped (%s); the log stays as it is", os.path.basename(path), reason(e))
        with contextlib.suppress(OSError):
            ops.unlink(tmp)
        return False
    return True
