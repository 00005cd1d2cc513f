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

import operator
import stat
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import StoreError
from . import _sessions_index as index
from ._catalog import MetaCatalog, Picked, decode_many
from ._encoding import decode_id
from ._fileops import Ops, reason

Meta = dict[str, Any]
SUFFIX = ".jsonl"


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
    # One stat at a time into the flat keys (the stat results are never held together).
    keys: array[int] | list[int] = array("q")
    kept: list[str] = []
    for name, st in zip(names, stats, strict=True):
        if isinstance(st, OSError):
            warn(name, reason(st))
        elif not stat.S_ISREG(st.st_mode):
            warn(name, "not a regular file")
        else:
            kept.append(name)
            try:
                keys.extend(_KEY(st))
            except OverflowError:  # a key past int64 (none is recorded: every log is compared one by one)
                keys = [*keys, *_KEY(st)]
    return (names if len(kept) == len(names) else kept), keys


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
    (:mod:`._open_listing`); a rewritten index records it if every log in
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
        # The columns copied out of the index file's bytes (4 x 8 bytes a session), and its metas
        # in chunks (RawMetas): the file's bytes go now, each chunk once its metas are decoded.
        raw = RawMetas(rec, pending.values())
        return MetaCatalog.assemble({}, pending, raw.get, Picked(_owned(updated), sids, _owned(with_meta)),
                                    Picked(_owned(created), sids, _owned(rec.by_created)), raw.release)
    pending = {sids[i]: i for i in trusted}
    metas = cold.fresh
    by_updated = [(updated[i], sids[i]) for i in trusted] + [(m["updated_at"], s) for s, m in metas.items()]
    by_created = [(created[i], sids[i]) for i in trusted] + [(m["created_at"], s) for s, m in metas.items()]
    by_updated.sort()
    by_created.sort()
    raw = RawMetas(rec, pending.values())
    return MetaCatalog.assemble(metas, pending, raw.get, by_updated, by_created, raw.release)


class RawMetas:
    """The metas' JSON an index recorded, copied out of the file's bytes in chunks of
    :data:`CHUNK` metas; a chunk is dropped once every meta in it that the catalog still
    wants has been decoded. Holding the whole file until the last meta was decoded put the
    peak of a first list (every meta decoded, plus the file) above the stated bound (issue 25)."""

    CHUNK = 2048

    def __init__(self, rec: index.Recorded, wanted: Iterable[int]) -> None:
        ends, blob, step = _owned(rec.ends), rec.blob, self.CHUNK
        self._ends = ends
        self._chunks: list[bytes | None] = [
            bytes(blob[(ends[c - 1] if c else 0): ends[min(c + step, len(ends)) - 1]])
            for c in range(0, len(ends), step)]
        self._left = [0] * len(self._chunks)
        for i in wanted:
            self._left[i // step] += 1
        for c, left in enumerate(self._left):
            if not left:
                self._chunks[c] = None  # no meta in it is wanted

    def get(self, i: int) -> bytes:
        c = i // self.CHUNK
        chunk, ends = self._chunks[c], self._ends
        if chunk is None:
            raise KeyError(i)
        base = ends[c * self.CHUNK - 1] if c else 0
        return chunk[(ends[i - 1] if i else 0) - base: ends[i] - base]

    def release(self, i: int) -> None:
        c = i // self.CHUNK
        self._left[c] -= 1
        if not self._left[c]:
            self._chunks[c] = None


def _owned(column: Sequence[int]) -> Sequence[int]:
    """A column as an array of its own, not a view keeping the whole index file alive."""
    if isinstance(column, memoryview):
        owned = array("q")
        owned.frombytes(column.cast("B"))
        return owned
    return column


def metas(cold: ColdList) -> dict[str, Meta]:
    """Every meta of a scan, decoded (the trusted ones in one call)."""
    rec = cold.recorded
    positions = rec.by_updated if cold.trusted is None else cold.trusted
    out: dict[str, Meta] = {}
    if positions:
        out.update(zip([rec.sids[i] for i in positions], decode_many(rec.raw, positions), strict=True))
    out.update(cold.fresh)
    return out

