"""A writable fs store's first ``list``: one pass over data_dir against the
sessions index (:mod:`._sessions_index`).

Every log is stat'ed (through one directory scan, relative to the open
directory), because another writer may have appended to it while no store
owned the directory; nothing else is read for a log whose (inode, size,
mtime_ns, ctime_ns) matches its record. A log without a matching record is
read (its last meta, from the tail): the JSONL logs stay the only truth. The
result feeds the list catalog without decoding the trusted metas.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import os
import stat
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import StoreError
from . import _sessions_index as index
from ._catalog import MetaCatalog, Picked
from ._encoding import decode_id
from ._fsio import Ops, reason
from ._records import loads

Meta = dict[str, Any]
SUFFIX = ".jsonl"


_MODE = operator.attrgetter("st_mode")
_KEY = operator.attrgetter("st_ino", "st_size", "st_mtime_ns", "st_ctime_ns")


@dataclass
class ColdList:
    """Each listed log's meta: a position in ``recorded`` (``trusted``; all of
    them when ``None``), its meta still JSON there, or decoded in ``fresh``
    (read from its log, or the loaded state's)."""

    recorded: index.Recorded
    trusted: list[int] | None = None
    fresh: dict[str, Meta] = field(default_factory=dict)


def log_stats(ops: Ops, data_dir: str, warn: Callable[[str, str], None],
              listed: list[str] | None = None) -> tuple[list[str], Sequence[int]]:
    """The regular ``*.jsonl`` files of data_dir, in directory order, and their
    ``lstat`` keys (inode, size, mtime_ns, ctime_ns), flat, four per log: an
    ``array`` (a list if one is past int64). Anything else named so is warned
    about and left out. The stat results themselves are not kept: at 100k logs
    they would hold ~70 MiB for the whole of a first list. ``listed``: the
    ``*.jsonl`` names, when the caller knows them still current (no listing then)."""
    try:
        names, stats = ops.scandir_logs(data_dir, SUFFIX, listed)
    except OSError as e:
        raise StoreError(f"read data_dir: {reason(e)}") from None
    with contextlib.suppress(AttributeError):  # an OSError among them
        if all(map(stat.S_ISREG, map(_MODE, stats))):
            return names, _flat_keys(stats)  # type: ignore[arg-type]  # (every one a stat result)
    kept_names: list[str] = []
    kept: list[os.stat_result] = []
    for name, st in zip(names, stats, strict=True):
        if isinstance(st, OSError):
            warn(name, reason(st))
        elif not stat.S_ISREG(st.st_mode):
            warn(name, "not a regular file")
        else:
            kept_names.append(name)
            kept.append(st)
    return kept_names, _flat_keys(kept)


def _flat_keys(stats: list[os.stat_result]) -> Sequence[int]:
    try:
        return array("q", itertools.chain.from_iterable(map(_KEY, stats)))
    except OverflowError:  # a key past int64 (none is recorded: every log is compared one by one)
        return list(itertools.chain.from_iterable(map(_KEY, stats)))


def scan(
    logs: tuple[list[str], Sequence[int]],
    index_file: Path,
    loaded_meta: Callable[[str], tuple[bool, Meta | None]],
    peek: Callable[[str, str], Meta | None],
    warn: Callable[[str, str], None],
    *,
    write_back: bool,
) -> ColdList:
    """Match ``logs`` (from :func:`log_stats`) against the index; re-read the
    rest (``loaded_meta(id)`` -> ``(True, meta)`` when a loaded state knows it,
    else ``peek(name, id)``; a :class:`StoreError` skips that log, warned).
    Rewrites the index when it differed and ``write_back``."""
    return match(logs, index.read(index_file), index_file, loaded_meta, peek, warn, write_back=write_back)


def match(
    logs: tuple[list[str], Sequence[int]],
    recorded: index.Recorded | None,
    index_file: Path,
    loaded_meta: Callable[[str], tuple[bool, Meta | None]],
    peek: Callable[[str, str], Meta | None],
    warn: Callable[[str, str], None],
    *,
    write_back: bool,
    stamp: index.Stamp | None = None,
) -> ColdList:
    """:func:`scan` against the index already read (``recorded``). ``stamp``:
    data_dir's when it held exactly ``logs`` and nothing half done
    (:mod:`._opened_listing`); a rewritten index records it if every log in
    ``logs`` is recorded, so the next open need not list data_dir."""
    names, keys = logs
    if recorded is not None and index.joined(names) == recorded.names_text and keys == recorded.keys:
        if write_back and stamp is not None and recorded.stamp != stamp:
            index.restamp(index_file, recorded, stamp)
        return ColdList(recorded)  # the common case: nothing changed, compared at C speed
    rec = recorded or index.Recorded()
    out = ColdList(rec, [])
    assert out.trusted is not None
    position = dict(zip(rec.names, range(len(rec.names)), strict=True))
    trusted, fresh = out.trusted, out.fresh
    rows: list[tuple[str, index.Row]] = []
    for n, name in enumerate(names):
        key: index.Key = tuple(keys[index.KEY_LEN * n : index.KEY_LEN * (n + 1)])  # type: ignore[assignment]
        i = position.get(name)
        if i is not None and rec.key(i) == key:
            if rec.has_meta(i):
                trusted.append(i)
            rows.append((name, rec.row(i)))
            continue
        session_id = decode_id(name[: -len(SUFFIX)])
        if session_id is None:
            warn(name, "not an encoded session id")
            continue
        have, meta = loaded_meta(session_id)
        if not have:
            try:
                meta = peek(name, session_id)
            except StoreError as e:
                warn(name, str(e))
                continue
        if meta is not None:
            fresh[session_id] = meta
        rows.append((name, index.row(session_id, key, meta)))
    if write_back and (rows or recorded is not None or stamp is not None):
        # In this listing's order: the next cold list compares at C speed. Stamped only if no log
        # was skipped (an unreadable one must be listed, and read, again).
        index.write(index_file, rows, stamp if len(rows) == len(names) else None)
    return out


def update(index_file: Path, changed: dict[str, tuple[str, index.Key, Meta | None] | None],
           listed: list[str] | None, stamp: index.Stamp | None = None) -> None:
    """Rewrite the index with ``changed`` (log name -> its session id, key and
    meta, or ``None``: no such log now) over what it recorded, in the order
    ``listed`` (data_dir's names now, so the next cold list compares at C
    speed; names not in it have no log and are dropped). ``stamp``: data_dir's
    when it held ``listed`` and nothing half done, recorded if every log in
    ``listed`` has a row."""
    rec = index.read(index_file)
    rows = {name: rec.row(i) for i, name in enumerate(rec.names)} if rec is not None else {}
    for name, what in changed.items():
        if what is None:
            rows.pop(name, None)
        else:
            rows[name] = index.row(*what)
    complete = False
    if listed is not None:
        rows = {name: rows[name] for name in listed if name in rows}
        complete = len(rows) == sum(1 for name in listed if name.endswith(SUFFIX))
    index.write(index_file, list(rows.items()), stamp if complete else None)


def catalog(cold: ColdList) -> MetaCatalog:
    """The list catalog of a scan; the trusted metas stay JSON until a page returns them."""
    rec, trusted = cold.recorded, cold.trusted
    sids, updated, created = rec.sids, rec.updated, rec.created
    if trusted is None:  # the recorded list orders are this listing's: no sort, no keys made yet
        with_meta = rec.by_updated
        if len(with_meta) == len(sids):
            pending = dict(zip(sids, range(len(sids)), strict=True))
        else:
            pending = {sids[i]: i for i in with_meta}
        return MetaCatalog.assemble({}, pending, rec.raw, Picked(updated, sids, with_meta),
                                    Picked(created, sids, rec.by_created))
    pending = {sids[i]: i for i in trusted}
    metas = cold.fresh
    by_updated = [(updated[i], sids[i]) for i in trusted] + [(m["updated_at"], s) for s, m in metas.items()]
    by_created = [(created[i], sids[i]) for i in trusted] + [(m["created_at"], s) for s, m in metas.items()]
    by_updated.sort()
    by_created.sort()
    return MetaCatalog.assemble(metas, pending, rec.raw, by_updated, by_created)


def metas(cold: ColdList) -> dict[str, Meta]:
    """Every meta of a scan, decoded (the trusted ones in one call)."""
    rec = cold.recorded
    positions = rec.by_updated if cold.trusted is None else cold.trusted
    out: dict[str, Meta] = {}
    if positions:
        decoded = loads(b"[" + b",".join(map(rec.raw, positions)) + b"]")
        out.update(zip([rec.sids[i] for i in positions], decoded, strict=True))
    out.update(cold.fresh)
    return out

