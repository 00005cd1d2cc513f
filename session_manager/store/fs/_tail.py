"""Reading a log from its end: the last meta (for a cold list) and the state
of the last line (before the next append)."""

from __future__ import annotations

import os
from typing import Any, Literal

from ...errors import StoreError
from ._fileops import NotRegular, Ops, open_regular, read_fd, reason
from ._records import decode_record, last_meta

# What the next write must do first about a file's last line:
# an int truncates a torn tail to that length, "newline" terminates a valid
# but unterminated last record, "check" re-reads the tail after a failed write.
TailFix = int | Literal["newline", "check"]

WINDOW = 64 * 1024

Meta = dict[str, Any]
# Per session: (inode, size, mtime) of the file version read, and its meta.
MetaCache = dict[str, tuple[tuple[int, int, int], Meta | None]]


def meta_of_log(ops: Ops, path: str, session_id: str, cache: MetaCache | None = None) -> Meta | None:
    """The last committed meta of the log at ``path`` (``None``: no log, or no
    meta in it); :class:`StoreError` naming why it cannot be read."""
    try:
        fd = open_regular(ops, path)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            cached = cache.get(session_id) if cache is not None else None
            if cached is not None and cached[0] == key:
                return cached[1]
            meta = meta_from_tail(fd, st.st_size, session_id)
        finally:
            os.close(fd)
    except NotRegular:
        raise StoreError("not a regular file") from None
    except OSError as e:
        raise StoreError(reason(e)) from None
    if cache is not None:
        cache[session_id] = (key, meta)
    return meta


def meta_from_tail(fd: int, size: int, session_id: str) -> dict[str, Any] | None:
    """The last committed meta of the log open as ``fd``, read from a tail
    window that grows until the replay rule can tell (see
    :func:`.records.last_meta`). A compacted log ends with its meta, a live
    one with its last mutation's: one window nearly always suffices."""
    window = WINDOW
    while True:
        start = max(0, size - window)
        meta, certain = last_meta(read_fd(fd, start, size).split(b"\n"), session_id, whole=start == 0)
        if certain:
            return meta
        window *= 4


def inspect_tail(fd: int, session_id: str) -> TailFix | None:
    """What a failed write left at the end of the log open as ``fd``."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return None
    end, buf = size, b""
    while True:
        start = max(0, end - WINDOW)
        buf = os.pread(fd, end - start, start) + buf
        cut = buf.rfind(b"\n")
        if cut >= 0 or start == 0:
            tail = buf[cut + 1 :]
            return "newline" if decode_record(tail, session_id) is not None else size - len(tail)
        end = start
