"""How the fs store names and opens its logs: the checked file stem of a
session id, and the openers its kept descriptors and readers use (regular
files only, symlinks never followed)."""

from __future__ import annotations

import os

from ...errors import StoreError, UnstorableValue
from ._encoding import encode_id
from ._fileops import APPEND_FLAGS, NotRegular, Ops, open_regular

LOG_SUFFIX = ".jsonl"  # a session's log is <data_dir>/<encoded id>.jsonl, as the reference names it


def checked_stem(limit: int, session_id: str) -> str:
    stem = encode_id(session_id)
    if len(stem) > limit:
        raise UnstorableValue(
            f"session_id is too long: it takes {len(stem)} bytes as a file name and this data_dir "
            f"allows {limit} (the file system's name limit less the store's longest suffix)")
    return stem


def log_exists(ops: Ops, path: str) -> bool:
    try:
        ops.lstat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # let the read report it
    return True


def open_append(ops: Ops, path: str, create: bool) -> tuple[int, bool]:
    """The kept descriptor's opener: a regular file only, created if asked."""
    created = create and not log_exists(ops, path)
    fd = open_regular(ops, path, APPEND_FLAGS if create else APPEND_FLAGS & ~os.O_CREAT)
    if fd is None:
        raise FileNotFoundError(path)
    return fd, created


def open_read(ops: Ops, path: str) -> int | None:
    try:
        return open_regular(ops, path)
    except NotRegular:
        raise StoreError(f"the log of session {os.path.basename(path)} is not a regular file") from None
