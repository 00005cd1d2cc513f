"""The per-session index sidecar: what replaying a log found, kept beside it.

``<data_dir>/.index/<encoded_session_id>.idx`` (the reference lists only
``*.jsonl`` names in data_dir, so it never sees the folder) holds, for the
first ``covered`` bytes of the log: every live entry's id, parent and the
(offset, length) of its newest line, the leaf and the last meta, packed so
a load reads what the request needs and builds nothing per entry. The JSONL
log stays the only source of truth; the index is a cache of its replay:

* **Integrity.** The file is a magic line, a body (see :mod:`._sidecar_format`)
  and the CRC-32 of that body. The body names its log by (inode, ``covered``, blake2b of the
  last :data:`TAIL` bytes before ``covered``). Any mismatch (checksum,
  inode, a log shorter than ``covered``, a different tail) and the index is
  ignored: the log is replayed whole and a new index written. A read-only
  open checks the same way and never writes one.
* **Resumable.** ``covered`` always falls on a clean boundary of the replay
  rule (no commit open across it, see :class:`._records.Replay`),
  so bytes appended after it (by a crash before the index was rewritten,
  or by another writer) are replayed on top: the result is the replay of
  the whole log, exactly.
* **Atomic.** Written to a temp file and renamed over, never fsynced: a
  torn or lost index only costs a rebuild.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import Literal

from .._core.state import SessionState
from . import _sidecar_format as _format
from ._fileops import ReadAt
from ._lazy import LazyEntries
from ._records import Replay, decode_record
from ._sidecar_format import IndexBody

log = logging.getLogger("session_manager.store.fs")

INDEX_DIR = ".index"
TAIL = 4096
_DIGEST = 16  # blake2b bytes: 32 hex characters
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

# What the next write must do about the log's last line before appending:
# "newline" terminates a valid unterminated record, an int truncates a torn
# one to that length (the same contract :mod:`.fs` keeps).
TailFix = int | Literal["newline"] | None


def index_path(data_dir: str | os.PathLike[str], encoded_id: str) -> str:
    """Where the sidecar of the session with file stem ``encoded_id`` lives (a
    string: pathlib would intern every id's name for the life of the process)."""
    return os.path.join(data_dir, INDEX_DIR, encoded_id + ".idx")


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=_DIGEST).hexdigest()


def tail_digest(fd: int, covered: int) -> str:
    """The blake2b of the ``TAIL`` log bytes before ``covered`` (and of ``covered``)."""
    start = max(0, covered - TAIL)
    chunk = os.pread(fd, covered - start, start)
    return _digest(chunk + covered.to_bytes(8, "little"))


@dataclass
class Loaded:
    """A session read from its log (through its index when that matched)."""

    state: SessionState
    entries: LazyEntries
    ino: int | None  # None: no log file
    covered: int  # the log prefix the state replays, up to a clean boundary
    size: int  # the log's size when read
    tail_fix: TailFix
    from_index: bool  # the index matched (only the bytes after it were replayed)
    index_current: bool  # the sidecar on disk describes exactly ``covered``


# -- encoding (the layout: :mod:`._sidecar_format`) -----------------------------------


def encode_index(session_id: str, ino: int, covered: int, tail: str, state: SessionState,
                 entries: LazyEntries) -> bytes:
    """The sidecar bytes of a session whose entries are all located."""
    ids, parents, orphans, offsets, lengths = entries.arrays()
    header = {"session_id": session_id, "ino": ino, "covered": covered, "tail": tail, "leaf": state.leaf,
              "meta": state.meta, "orphans": {str(k): v for k, v in orphans.items()}, "live": entries.live_bytes()}
    return _format.encode(header, ids, parents, offsets, lengths)


def decode_index(raw: bytes, session_id: str) -> IndexBody | None:
    """The body of a sidecar, or ``None`` when it is not a whole, self-consistent one."""
    return _format.decode(raw, session_id)


def write_index(path: str, data: bytes, tmp_suffix: str = ".tmp") -> None:
    """Replace the sidecar at ``path`` atomically (temp file, rename); a second
    writer of the same sidecar (the background compactor) uses its own ``tmp_suffix``."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + tmp_suffix
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove_index(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


# -- loading -------------------------------------------------------------------------


def _read_all(fd: int, start: int, end: int) -> bytes:
    chunks: list[bytes] = []
    pos = start
    while pos < end:
        chunk = os.pread(fd, end - pos, pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks)


def replay_into(state: SessionState, entries: LazyEntries, data: bytes, base: int, session_id: str,
                skip: Callable[[int, str], None]) -> tuple[int, TailFix]:
    """Apply the bytes ``data`` (starting at log offset ``base``, a clean
    boundary) to ``state``, noting each entry's line. Returns the new clean
    boundary and what the next write must fix about the last line."""
    lines = data.split(b"\n")
    starts = list(accumulate((len(line) + 1 for line in lines), initial=base))
    replay = Replay()
    apply = state.apply_record
    for number, record in replay.feed_numbered(lines, session_id, skip):
        apply(record, (starts[number - 1], len(lines[number - 1])))
    if replay.open_since is not None:
        skip(replay.number, "a commit cut short at the end of the log was left out")
    covered = base + len(data)
    fix: TailFix = None
    if data and not data.endswith(b"\n"):
        if decode_record(lines[-1], session_id) is not None:
            fix = "newline"  # applied, and its bytes stay: the boundary is past it
        else:
            fix = covered = starts[-2]  # a torn line: truncated by the next write
    if replay.open_since is not None:
        covered = min(covered, starts[replay.open_since - 1])
    return covered, fix


def adopt(obj: IndexBody, state: SessionState, entries: LazyEntries) -> None:
    """Start ``state`` (its entries held by ``entries``) from a matching index."""
    entries.load_index(obj)
    state.meta = obj["meta"]
    state.leaf = obj["leaf"]


def matching_index(idx_path: str, session_id: str, fd: int, ino: int, size: int) -> IndexBody | None:
    """The sidecar at ``idx_path`` if it is whole and describes a prefix of
    the log open at ``fd`` (inode ``ino``, ``size`` bytes); never writes."""
    obj = _read_index(idx_path, session_id)
    return obj if obj is not None and _matches(obj, fd, ino, size) else None


def _matches(obj: IndexBody, fd: int, ino: int, size: int) -> bool:
    covered = obj["covered"]
    return bool(obj["ino"] == ino and 0 <= covered <= size and obj["tail"] == tail_digest(fd, covered))


def _open_log(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | _O_CLOEXEC)
    except FileNotFoundError:
        return None


def load(log_path: str, idx_path: str, session_id: str, read: ReadAt, *, use_index: bool = True,
         open_log: Callable[[str], int | None] = _open_log) -> Loaded:
    """Read a session from ``log_path`` (opened by ``open_log``: a descriptor,
    or ``None`` when there is no log), through its sidecar when that still
    describes a prefix of the log. Never writes anything."""
    entries = LazyEntries(session_id, read)
    state = SessionState()
    state.entries = entries

    def skip(number: int, why: str) -> None:
        if base:
            log.warning("%s line %d after byte %d (the indexed part): %s", log_path, number, base, why)
        else:
            log.warning("%s line %d: %s", log_path, number, why)

    fd = open_log(log_path)
    if fd is None:
        return Loaded(state, entries, None, 0, 0, None, False, False)
    try:
        st = os.fstat(fd)
        ino, size = st.st_ino, st.st_size
        obj = _read_index(idx_path, session_id) if use_index else None
        base, suffix, boundary_open = 0, b"", False
        if obj is not None and _matches(obj, fd, ino, size):
            base = obj["covered"]
            suffix = _read_all(fd, base, size)
            boundary_open = base > 0 and os.pread(fd, 1, base - 1) != b"\n"
            # An unterminated line at the boundary must still be terminated
            # by what follows, or a whole replay would read the two as one.
            if boundary_open and suffix and not suffix.startswith(b"\n"):
                obj = None
        else:
            obj = None
        if obj is None:
            base, suffix, boundary_open = 0, _read_all(fd, 0, size), False
    finally:
        os.close(fd)
    if obj is not None:
        adopt(obj, state, entries)
    covered, fix = replay_into(state, entries, suffix, base, session_id, skip)
    if boundary_open and not suffix:
        fix = "newline"  # the index ends on a valid unterminated line
    entries.drop_bodies()  # bodies are read on demand from here on
    state.path_ids = None
    state.path_pos = None
    return Loaded(state, entries, ino, covered, size, fix, obj is not None,
                  obj is not None and covered == obj["covered"])


def _read_index(path: str, session_id: str) -> IndexBody | None:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("%s: unreadable index (%s); replaying the log", path, e)
        return None
    obj = decode_index(raw, session_id)
    if obj is None:
        log.warning("%s: damaged index; replaying the log", path)
    return obj


def save(log_path: str, idx_path: str, session_id: str, state: SessionState, entries: LazyEntries,
         covered: int) -> bool:
    """Write the sidecar for the first ``covered`` bytes of the log (a clean
    boundary the state reflects). ``False`` when it could not be written
    (entries without a known line, or an OS error): the log stays the truth."""
    if not entries.fully_located():
        return False
    try:
        try:
            fd = os.open(log_path, os.O_RDONLY | _O_CLOEXEC)
        except FileNotFoundError:
            return False  # no log (yet, or any more): nothing to index, and nothing to warn about
        try:
            st = os.fstat(fd)
            if st.st_size < covered:
                return False
            tail = tail_digest(fd, covered)
        finally:
            os.close(fd)
        write_index(idx_path, encode_index(session_id, st.st_ino, covered, tail, state, entries))
    except (OSError, OverflowError) as e:  # OverflowError: more than 2 GiB of ids
        log.warning("%s: index not written (%s); the next open replays the log", idx_path, e)
        return False
    return True
