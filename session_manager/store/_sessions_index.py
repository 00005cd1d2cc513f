"""The sessions index: every log's last meta, so a cold ``list`` reads one file.

``<data_dir>/.index/sessions.list`` maps each log's file name to the
(inode, size, mtime_ns) it had and the last meta it held then. A cold scan
still lists data_dir and stats every log (a stat is cheap; reading 10k logs
is not) and trusts a recorded meta only while those three still match; any
other log is read (its last meta, from the tail) and recorded anew. Like the
per-session sidecar it is ``MAGIC`` + one JSON body + the body's CRC-32,
replaced by rename, never fsynced: damaged or missing means a full scan.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from ..errors import StoreError
from ._encoding import decode_id
from ._records import loads

log = logging.getLogger("session_manager.store.fs")

FILE = "sessions.list"
MAGIC = b"SMLST2\n"
_UNKNOWN: Any = object()  # no usable record for a log

Meta = dict[str, Any]
# file name -> [inode, size, mtime_ns, last meta or None]
Records = dict[str, list[Any]]


def _checksum(body: bytes) -> bytes:
    return b"%08x" % zlib.crc32(body)


def read(path: Path) -> Records:
    """The recorded logs, or nothing when the file is missing or damaged
    (records are checked where they are used: a CRC-32 guards the whole)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        log.warning("%s: unreadable (%s); listing reads every log", path, e)
        return {}
    body = raw[len(MAGIC) : -10]
    if not raw.startswith(MAGIC) or raw[-10:-9] != b"\n" or raw[-1:] != b"\n" or raw[-9:-1] != _checksum(body):
        log.warning("%s: damaged; listing reads every log", path)
        return {}
    try:
        obj = loads(body)
    except (ValueError, RecursionError):
        return {}
    return obj if isinstance(obj, dict) else {}


def write(path: Path, records: Records) -> None:
    try:
        body = orjson.dumps(records)
    except TypeError:  # integers past 64 bits in a meta
        body = json.dumps(records, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    data = MAGIC + body + b"\n" + _checksum(body) + b"\n"
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as e:
        log.warning("%s not written (%s); the next cold list reads the logs again", path, e)
        with contextlib.suppress(OSError):
            tmp.unlink()


def file_key(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def scan(
    names: list[str],
    index_file: Path,
    stat_log: Callable[[str], os.stat_result],
    loaded_meta: Callable[[str], tuple[bool, Meta | None]],
    peek: Callable[[str, str], Meta | None],
    warn: Callable[[str, str], None],
    *,
    write_back: bool,
) -> dict[str, Meta]:
    """Every session's last meta, for the log file ``names`` of data_dir: from
    the loaded state when there is one (``loaded_meta`` -> ``(True, meta)``),
    else from the record when its log is unchanged, else ``peek(name, id)``
    (a :class:`StoreError` from it skips that log, warned). Rewrites the
    index when anything changed and ``write_back``."""
    old = read(index_file)
    fresh: Records = {}
    metas: dict[str, Meta] = {}
    is_reg = stat.S_ISREG
    for name in names:
        try:
            st = stat_log(name)
        except OSError as e:
            warn(name, e.strerror or type(e).__name__)
            continue
        if not is_reg(st.st_mode):
            warn(name, "not a regular file")
            continue
        key = [st.st_ino, st.st_size, st.st_mtime_ns]
        rec = old.get(name)
        recorded = rec[3] if type(rec) is list and len(rec) == 4 and rec[:3] == key else _UNKNOWN
        sid = recorded.get("session_id") if type(recorded) is dict else None
        if type(sid) is not str:
            sid = decode_id(name[: -len(".jsonl")])
            if sid is None:
                warn(name, "not an encoded session id")
                continue
        session_id: str = sid
        have, meta = loaded_meta(session_id)
        if not have:
            if recorded is not _UNKNOWN:
                meta = recorded
            else:
                try:
                    meta = peek(name, session_id)
                except StoreError as e:
                    warn(name, str(e))
                    continue
        fresh[name] = [*key, meta]
        if meta is not None:
            metas[session_id] = meta
    if write_back and fresh != old:
        write(index_file, fresh)
    return metas
