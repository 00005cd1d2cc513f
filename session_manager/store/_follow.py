"""How a read-only fs store follows logs another process writes.

Each refresh applies only what a log gained since the last read, fed to the
same :class:`~.records.Replay` (so a group split across two reads is decided
as a whole-file replay would). A log replaced by a compaction (a new file
under the same name) or cut shorter is read again from the start.

"The same file" is decided against a descriptor kept open on the file last
read: while it is open its inode cannot be freed and handed to the next
compaction's file, which a bare inode number comparison would mistake for
the old one. Descriptors are bounded (least recently read are closed; their
logs are read whole next time).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable

from ..errors import StoreError
from ._fsio import NotRegular, Ops, open_regular, read_fd, reason
from ._records import Replay, decode_record
from ._state import SessionState

MAX_OPEN = 128


class _Seen:
    __slots__ = ("fd", "offset", "replay")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.offset = 0
        self.replay = Replay()


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class Follower:
    """Per-session read positions of a read-only store."""

    def __init__(self, ops: Ops) -> None:
        self._ops = ops
        self._seen: OrderedDict[str, _Seen] = OrderedDict()
        # One refresh at a time: evicting a session's descriptor while another
        # thread reads through it would read a closed (or reused) descriptor.
        self._lock = threading.Lock()

    def refresh(self, session_id: str, state: SessionState, path: str,
                skip: Callable[[int, str], None]) -> None:
        """Bring ``state`` (its lock held by the caller) up to the log at ``path``."""
        with self._lock:
            self._refresh(session_id, state, path, skip)

    def _refresh(self, session_id: str, state: SessionState, path: str,
                 skip: Callable[[int, str], None]) -> None:
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
            if seen is not None and _same_file(os.fstat(seen.fd), st) and st.st_size >= seen.offset:
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
                    os.close(oldest.fd)
            data = read_fd(seen.fd, seen.offset, st.st_size) if st.st_size > seen.offset else b""
        except OSError as e:
            raise StoreError(f"read {os.path.basename(path)}: {reason(e)}") from None
        finally:
            if fd >= 0:
                os.close(fd)
        cut = data.rfind(b"\n") + 1  # whole lines only: the writer may be mid-line
        for record in seen.replay.feed(data[:cut].split(b"\n")[:-1], session_id, skip):
            state.apply_record(record)
        seen.offset += cut
        tail = decode_record(data[cut:], session_id) if cut < len(data) else None
        if tail is not None and tail.get("tx") is None and seen.replay.idle:
            # A valid unterminated record counts, as on a writable open; applying
            # it again once its line is complete changes nothing (last-wins).
            state.apply_record(tail)

    def forget(self, session_id: str) -> None:
        """Start over for ``session_id`` next time (its state was dropped)."""
        with self._lock:
            self._forget(session_id)

    def _forget(self, session_id: str) -> None:
        seen = self._seen.pop(session_id, None)
        if seen is not None:
            os.close(seen.fd)

    def close(self) -> None:
        with self._lock:
            self._close_all()

    def _close_all(self) -> None:
        while self._seen:
            _, seen = self._seen.popitem()
            os.close(seen.fd)
