"""The sessions index: every log's last meta, so a cold ``list`` reads one file.

``<data_dir>/.index/sessions.list`` records, per log file name, the
(inode, size, mtime_ns, ctime_ns) the log had and the last meta it held
then. It is a cache the reference ignores: a recorded meta is trusted only
while its log's identity still matches, damaged or missing means every log
is read, and it is replaced by rename, never fsynced.

The layout is packed so that a cold list decodes it at C speed and defers
every meta: ``MAGIC``, the stamp of data_dir that vouches for the names (all
zero: none; see :func:`read_stamp`; outside the checksum, so that a first list
can stamp an index in place), the counts, the file keys, ``updated_at``,
``created_at``, the metas' end offsets and the positions in each list order
as native int64 arrays, the log names (in the order they were listed) joined
by ``/`` (which no file name holds), the session ids that are not their
log's stem (JSON), the metas' JSON back to back (an empty one: the log holds
no meta), then the CRC-32 of everything after the stamp. The sort keys come
from the arrays; a meta is decoded only when a page returns it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
import stat
import struct
import sys
import zlib
from array import array
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ._records import loads

log = logging.getLogger("session_manager.store.fs")

FILE = "sessions.list"
# The arrays are native int64: the byte order is part of the format.
MAGIC = b"SMLST4" + (b"L" if sys.byteorder == "little" else b"B") + b"\n"
SUFFIX = ".jsonl"
# data_dir's (dev, inode, mtime_ns, ctime_ns) when the names were listed (:mod:`._open_listing`).
_STAMP = struct.Struct("<QQqq")
_COUNTS = struct.Struct("<5Q")  # logs, logs with a meta, bytes of names, of odd ids, of metas
_TRAILER = 10  # b"\n" + 8 hex digits + b"\n"
KEY_LEN = 4

Meta = dict[str, Any]
Key = tuple[int, int, int, int]  # inode, size, mtime_ns, ctime_ns
Stamp = tuple[int, int, int, int]  # data_dir's dev, inode, mtime_ns, ctime_ns
# What a log contributes when an index is written: its session id, key, last
# meta as JSON (None: the log holds no meta), and that meta's sort keys.
Row = tuple[str, Key, bytes | None, int, int]


def file_key(st: os.stat_result) -> Key:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass
class Recorded:
    """A decoded index. Position ``i`` describes log ``names[i]``, whose key
    is ``keys[4 * i : 4 * i + 4]`` and meta's JSON ``blob[ends[i - 1]:ends[i]]``
    (from 0 for the first). ``by_updated``/``by_created``: the positions of
    the logs holding a meta, in (updated_at, id) / (created_at, id) order."""

    sids: list[str] = field(default_factory=list)
    keys: Sequence[int] = field(default_factory=list)
    updated: Sequence[int] = field(default_factory=list)
    created: Sequence[int] = field(default_factory=list)
    ends: Sequence[int] = field(default_factory=list)
    by_updated: Sequence[int] = field(default_factory=list)
    by_created: Sequence[int] = field(default_factory=list)
    blob: bytes | memoryview = b""
    names_text: str = ""  # the names joined: a listing compares to it without splitting it
    stamp: Stamp | None = None
    file: tuple[int, int] = (0, 0)  # the index file's (inode, size) as read: a restamp writes to that file only

    @functools.cached_property
    def names(self) -> list[str]:
        return self.names_text.split("/") if self.sids else []

    def key(self, i: int) -> tuple[int, ...]:
        return tuple(self.keys[KEY_LEN * i : KEY_LEN * i + KEY_LEN])

    def raw(self, i: int) -> bytes:
        return bytes(self.blob[self.ends[i - 1] if i else 0 : self.ends[i]])

    def has_meta(self, i: int) -> bool:
        return self.ends[i] > (self.ends[i - 1] if i else 0)

    def row(self, i: int) -> Row:
        key: Any = self.key(i)
        return self.sids[i], key, self.raw(i) or None, self.updated[i], self.created[i]


def _checksum(body: bytes | memoryview) -> bytes:
    return b"%08x" % zlib.crc32(body)


def read(path: Path) -> Recorded | None:
    """The index at ``path``, or ``None`` when it is missing or damaged. The
    checksum proves the file is one this store wrote, whole; the shape is
    then checked cheaply (lengths, offsets), never per meta."""
    try:
        with os.fdopen(_open_regular(path, os.O_RDONLY), "rb") as f:
            st = os.fstat(f.fileno())
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("%s: unreadable (%s); listing reads every log", path, e)
        return None
    body = memoryview(raw)[len(MAGIC) + _STAMP.size : -_TRAILER]
    if (not raw.startswith(MAGIC) or len(raw) < len(MAGIC) + _STAMP.size + _COUNTS.size + _TRAILER
            or raw[-_TRAILER:-9] != b"\n" or raw[-1:] != b"\n" or raw[-9:-1] != _checksum(body)):
        log.warning("%s: damaged or from another version; listing reads every log", path)
        return None
    try:
        recorded = _decode(body)
    except (ValueError, TypeError, KeyError, IndexError, RecursionError, UnicodeError):
        log.warning("%s: not understood; listing reads every log", path)
        return None
    stamp: Stamp = _STAMP.unpack_from(raw, len(MAGIC))
    recorded.stamp, recorded.file = (stamp if any(stamp) else None), (st.st_ino, st.st_size)
    return recorded


def read_stamp(path: Path) -> Stamp | None:
    """The stamp an index records, from its first bytes only (an open reads no
    more). No checksum covers a stamp, nor needs to: a stamp is only ever used
    when it equals data_dir's own, which damage cannot produce (the names it
    vouches for are checked when the first list reads the index whole)."""
    try:
        with os.fdopen(_open_regular(path, os.O_RDONLY), "rb", buffering=0) as f:
            head = f.read(len(MAGIC) + _STAMP.size)
    except OSError:
        return None
    if len(head) != len(MAGIC) + _STAMP.size or not head.startswith(MAGIC):
        return None
    stamp: Stamp = _STAMP.unpack_from(head, len(MAGIC))
    return stamp if any(stamp) else None


def _decode(body: memoryview) -> Recorded:
    # Views into the file's bytes, not copies: a cold list touches few of them.
    n, m, names_len, odd_len, blob_len = _COUNTS.unpack_from(body)
    at = _COUNTS.size
    columns: list[memoryview] = []
    for count in (KEY_LEN * n, n, n, n, m, m):
        column = body[at : at + 8 * count]
        if len(column) != 8 * count:
            raise ValueError("truncated")
        columns.append(column.cast("q"))
        at += 8 * count
    text = str(body[at : at + names_len], "utf-8", "surrogateescape")
    at += names_len
    odd = loads(bytes(body[at : at + odd_len])) if odd_len else {}
    at += odd_len
    blob = body[at:]
    # A log's stem is its session id unless the id needed escaping (those are kept apart).
    sids = text.replace(SUFFIX + "/", "/")[: -len(SUFFIX)].split("/") if n else []
    for i, sid in odd.items():
        sids[int(i)] = sid
    keys, updated, created, ends, by_updated, by_created = columns
    if len(sids) != n or len(blob) != blob_len or (ends[-1] if n else 0) != blob_len:
        raise ValueError("counts disagree")
    return Recorded(sids, keys, updated, created, ends, by_updated, by_created, blob, text)


def joined(names: list[str]) -> str:
    """Log names as an index records them (no file name holds a ``/``)."""
    return "/".join(names)


def dump_meta(meta: Meta | dict[str, str]) -> bytes:
    try:
        return orjson.dumps(meta)
    except TypeError:  # an integer past 64 bits, a lone surrogate: the exact encoder
        return json.dumps(meta, separators=(",", ":")).encode("ascii")


def row(session_id: str, key: Key, meta: Meta | None) -> Row:
    if meta is None:
        return session_id, key, None, 0, 0
    # A copy: orjson's result keeps its ~4 KiB buffer, and a first list of a directory without
    # an index holds a row per log until it writes one (400 MiB at 100k logs, not 20).
    raw = bytes(memoryview(dump_meta(meta)))
    return session_id, key, raw, meta["updated_at"], meta["created_at"]


def write(path: Path, rows: Sequence[tuple[str, Row]], stamp: Stamp | None = None) -> None:
    """Replace the index with ``(name, row)`` for each log, in the order the
    logs were listed (rename; a failure only costs speed). ``stamp``: data_dir's
    when it held exactly these logs and nothing left half done."""
    names: list[str] = []
    sids: list[str] = []
    keys: list[int] = []
    updated: list[int] = []
    created: list[int] = []
    ends: list[int] = []
    parts: list[bytes] = []
    end = 0
    for name, (sid, key, data, up, cr) in rows:
        if data:
            end += len(data)
            parts.append(data)
        names.append(name)
        sids.append(sid)
        keys += key
        updated.append(up)
        created.append(cr)
        ends.append(end)
    with_meta = [i for i, (_, r) in enumerate(rows) if r[2]]
    odd = {str(i): sid for i, sid in enumerate(sids) if names[i] != sid + SUFFIX}
    text = joined(names).encode("utf-8", "surrogateescape")
    odd_bytes = dump_meta(odd) if odd else b""
    try:
        columns = [array("q", column) for column in (
            keys, updated, created, ends, sorted(with_meta, key=lambda i: (updated[i], sids[i])),
            sorted(with_meta, key=lambda i: (created[i], sids[i])))]
    except OverflowError:  # past int64 (a 64-bit unsigned inode): no index, every log is read
        log.warning("%s not written (a file key out of range)", path)
        return
    blob = b"".join(parts)
    body = b"".join([_COUNTS.pack(len(names), len(with_meta), len(text), len(odd_bytes), len(blob)),
                     *(column.tobytes() for column in columns), text, odd_bytes, blob])
    _replace(path, _packed_stamp(stamp), body)


def scrub(path: Path, names: set[str]) -> None:
    """Erasure: overwrite the recorded metas of the logs ``names`` (deleted sessions:
    their titles, metadata, drafts) with ``{}`` and spaces, same length, in place (as
    :func:`restamp`), then the checksum: nothing else in the file moves, so a delete
    costs a read and two small writes, not a rebuild. Such a row is never trusted
    again: its log is gone, and a new log of that name has another (inode, size,
    mtime, ctime). A crash between the writes leaves a checksum that fails: the
    next list reads the logs and rewrites the index, as for any damage."""
    recorded = read(path)
    if recorded is not None:
        _scrub(path, recorded, names)


def scrub_absent(path: Path, present: Collection[str]) -> None:
    """:func:`scrub` of every recorded log not among ``present`` (data_dir's entries, as an
    open listed them): the rows of sessions deleted by a process killed before its batch's
    scrub (:meth:`.Deleter.erasing`). One read of the index; a write only when some are gone."""
    recorded = read(path)
    if recorded is None:
        return
    known = set(present)
    gone = {name for name in recorded.names if name not in known}
    if gone:
        _scrub(path, recorded, gone)


def _scrub(path: Path, recorded: Recorded, names: set[str]) -> None:
    all_names = recorded.names
    hits = sorted(i for name in names if name in recorded.names_text
                  for i in _positions(all_names, name) if recorded.has_meta(i))
    if not hits:
        return
    if not isinstance(recorded.blob, memoryview):
        return
    raw = bytearray(recorded.blob.obj)  # the file's bytes as read (the blob is a view into them)
    blob_at = len(raw) - _TRAILER - len(recorded.blob)
    spans = []
    for i in hits:
        start, end = blob_at + (recorded.ends[i - 1] if i else 0), blob_at + recorded.ends[i]
        raw[start:end] = b"{}".ljust(end - start)
        spans.append((start, end))
    checksum = _checksum(memoryview(raw)[len(MAGIC) + _STAMP.size : -_TRAILER])
    fd = _open_regular(path, os.O_WRONLY)
    try:
        st = os.fstat(fd)
        if (st.st_ino, st.st_size) != recorded.file:
            return  # replaced since it was read: never write a stale view over a newer file
        for start, end in spans:
            os.pwrite(fd, raw[start:end], start)
        os.pwrite(fd, checksum, len(raw) - 9)
    finally:
        os.close(fd)


def _positions(names: list[str], name: str) -> list[int]:
    return [i for i, n in enumerate(names) if n == name] if names.count(name) > 1 else [names.index(name)]


def restamp(path: Path, recorded: Recorded, stamp: Stamp) -> None:
    """Write ``stamp`` over the stamp of the index ``recorded`` was read from
    (its names still data_dir's logs), in place: rewriting 3 MiB at 10k logs
    cost a first list ~10 ms. A torn write leaves a stamp equal to nothing;
    a file replaced since is left alone."""
    try:
        fd = _open_regular(path, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if (st.st_ino, st.st_size) == recorded.file:
            os.pwrite(fd, _packed_stamp(stamp), len(MAGIC))
    except OSError as e:
        log.warning("%s: not stamped (%s); the next open lists data_dir", path, e)
    finally:
        os.close(fd)


def _open_regular(path: Path, flags: int) -> int:
    """A descriptor of the index, a regular file only: a FIFO (or device) put in
    its place would block the open that reads its stamp, and every call after it."""
    nonblock = getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags | nonblock | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if nonblock:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _packed_stamp(stamp: Stamp | None) -> bytes:
    try:
        return _STAMP.pack(*(stamp or (0, 0, 0, 0)))
    except struct.error:  # a device or inode past 64 bits: no stamp (every open lists data_dir)
        return _STAMP.pack(0, 0, 0, 0)


def _replace(path: Path, stamp: bytes, body: bytes) -> None:
    data = b"".join([MAGIC, stamp, body, b"\n", _checksum(body), b"\n"])
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as e:
        log.warning("%s not written (%s); the next cold list reads the logs again", path, e)
        with contextlib.suppress(OSError):
            tmp.unlink()
