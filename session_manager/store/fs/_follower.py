"""How a read-only fs store follows logs another process writes.

Each refresh applies only what a log gained since the last read, fed to the
same :class:`~.records.Replay` (so a group split across two reads is decided
as a whole-file replay would). A log replaced by a compaction (a new file
under the same name), cut shorter, or no longer holding what was read last
(the bytes before the read position, an unterminated record counted: its
writer undid a write and wrote on) is read again from the start.

"The same file" is decided against a descriptor kept open on the file last
read: while it is open its inode cannot be freed and handed to the next
compaction's file, which a bare inode number comparison would mistake for
the old one. Descriptors are bounded (least recently read are closed; their
logs are read whole next time).

A log read from its start first looks for its index sidecar: one that is
whole and matches the file (inode, size, tail hash: :mod:`._sidecar`) stands
for the prefix it covers, whose entries are then read on demand through the
kept descriptor, and only the bytes after it are replayed. A follower never
writes an index and never trusts one that does not match.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from itertools import accumulate

from ...errors import StoreError
from .._core.state import SessionState
from . import _sidecar
from ._fileops import NotRegular, Ops, ReadAt, open_regular, pread_file, read_fd, reason
from ._lazy import LazyEntries
from ._records import Replay, decode_record

MAX_OPEN = 128
# How much of what was read last is checked to still be there before a read resumes after it.
MARK = 4096


def _mark(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


class _Seen:
    __slots__ = ("fd", "first", "mark", "offset", "replay", "tail")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.offset = 0
        self.first = 0  # lines fed to ``replay`` before this read
        self.replay = Replay()
        self.mark = b""  # digest of the (up to MARK) bytes before ``offset`` (b"": offset 0)
        self.tail = b""  # an unterminated record after ``offset`` that was applied

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _remark(seen: _Seen) -> None:
    """Note what now lies just before ``seen.offset``."""
    start = max(0, seen.offset - MARK)
    seen.mark = _mark(os.pread(seen.fd, seen.offset - start, start)) if seen.offset else b""


def _continues(seen: _Seen, size: int) -> bool:
    """The file (``size`` bytes now) still holds what was read of it: a writer that cut the
    log back (an undone write) and wrote on may have regrown it past ``offset`` with other
    lines, so a size check alone would resume mid-line and keep the undone records."""
    if size < seen.offset + len(seen.tail):
        return False
    start = max(0, seen.offset - MARK)
    got = os.pread(seen.fd, seen.offset + len(seen.tail) - start, start)
    before, after = got[: seen.offset - start], got[seen.offset - start :]
    return after == seen.tail and (_mark(before) if seen.offset else b"") == seen.mark


class Follower:
    """Per-session read positions of a read-only store."""

    def __init__(self, ops: Ops) -> None:
        self._ops = ops
        self._seen: OrderedDict[str, _Seen] = OrderedDict()
        # One refresh at a time: evicting a session's descriptor while another
        # thread reads through it would read a closed (or reused) descriptor.
        self._lock = threading.Lock()

    def refresh(self, session_id: str, state: SessionState, path: str,
                skip: Callable[[int, str], None], index: str | None = None) -> None:
        """Bring ``state`` (its lock held by the caller) up to the log at
        ``path``, through the sidecar at ``index`` when it matches the log."""
        with self._lock:
            self._refresh(session_id, state, path, skip, index)

    def _refresh(self, session_id: str, state: SessionState, path: str,
                 skip: Callable[[int, str], None], index: str | None) -> None:
        try:
            fd = open_regular(self._ops, path)
        except NotRegular:
            raise StoreError(f"the log of session {os.path.basename(path)} is not a regular file") from None
        except OSError as e:
            raise StoreError(f"read {os.path.basename(path)}: {reason(e)}") from None
        if fd is None:
            state.reset()  # gone, or renamed aside by a delete
            self._forget(session_id)
            return
        try:
            st = os.fstat(fd)
            seen = self._seen.get(session_id)
            if seen is not None and _same_file(os.fstat(seen.fd), st) and _continues(seen, st.st_size):
                os.close(fd)
                fd = -1
                self._seen.move_to_end(session_id)
            else:
                self._forget(session_id)
                state.reset()
                seen = self._seen[session_id] = _Seen(fd)
                fd = -1
                while len(self._seen) > MAX_OPEN:
                    _, oldest = self._seen.popitem(last=False)
                    oldest.close()
                if index is not None:
                    self._adopt(session_id, state, seen, path, index, st)
            data = read_fd(seen.fd, seen.offset, st.st_size) if st.st_size > seen.offset else b""
        except OSError as e:
            raise StoreError(f"read {os.path.basename(path)}: {reason(e)}") from None
        finally:
            if fd >= 0:
                os.close(fd)
        cut = data.rfind(b"\n") + 1  # whole lines only: the writer may be mid-line
        lines = data[:cut].split(b"\n")[:-1]
        start = seen.offset
        starts = list(accumulate((len(line) + 1 for line in lines), initial=start))
        for number, record in seen.replay.feed_numbered(lines, session_id, skip):
            # Line numbers count from where this follower started reading the
            # log; a commit group begun in an earlier read has no line here.
            k = number - seen.first - 1
            state.apply_record(record, (starts[k], len(lines[k])) if k >= 0 else None)
        seen.first += len(lines)
        seen.offset += cut
        if cut:
            _remark(seen)
        applied, seen.tail = seen.tail, b""
        if not cut and applied and data == applied:
            # The very tail applied last time, nothing before it new: applying it again would
            # change nothing but the session's version (a write counted), so a saver over this
            # follower would derive its index again at every read.
            seen.tail = applied
            return
        tail = decode_record(data[cut:], session_id) if cut < len(data) else None
        if tail is not None and tail.get("tx") is None and seen.replay.idle:
            # A valid unterminated record counts, as on a writable open; applying
            # it again once its line is complete changes nothing (last-wins).
            state.apply_record(tail)
            seen.tail = data[cut:]  # its writer may still cut it (a failed write): then read afresh

    def _adopt(self, session_id: str, state: SessionState, seen: _Seen, path: str, index: str,
               st: os.stat_result) -> None:
        """Start a log read from its start at its index, if that matches the file."""
        obj = _sidecar.matching_index(index, session_id, seen.fd, st.st_ino, st.st_size)
        if obj is None:
            return
        covered = obj["covered"]
        if covered and os.pread(seen.fd, 1, covered - 1) != b"\n":
            return  # it ends on an unterminated line: whole lines only, as below
        entries = LazyEntries(session_id, self._reader(seen, path))
        entries.guard(state.lock)  # a refresh replaces entries under it, as a writer does
        state.entries = entries
        _sidecar.adopt(obj, state, entries)
        state.renew()  # (filled afresh: a version never seen)
        seen.offset = covered
        _remark(seen)

    def _reader(self, seen: _Seen, path: str) -> ReadAt:
        """Body reads of an adopted log: through its kept descriptor, or (once
        that was closed) by name; a log replaced meanwhile fails the lazy
        mapping's id check instead of handing out another file's entry."""

        def read(offset: int, length: int) -> bytes:
            with self._lock:
                if seen.fd >= 0:
                    return os.pread(seen.fd, length, offset)
            return by_name(offset, length)  # the kept descriptor was evicted: open by name

        by_name = pread_file(path)
        return read

    def forget(self, session_id: str) -> None:
        """Start over for ``session_id`` next time (its state was dropped)."""
        with self._lock:
            self._forget(session_id)

    def _forget(self, session_id: str) -> None:
        seen = self._seen.pop(session_id, None)
        if seen is not None:
            seen.close()

    def close(self) -> None:
        with self._lock:
            self._close_all()

    def _close_all(self) -> None:
        while self._seen:
            _, seen = self._seen.popitem()
            seen.close()
