"""The bytes of an index sidecar (version 3): a packed layout that loads in
O(what the read needs).

    MAGIC
    header          one JSON line: session, log identity, leaf, meta, counts
    parents         int32[n]   position of each entry's parent (-1 none, -2 orphan)
    offsets         int64[n]   where each entry's newest line starts in the log
    lengths         int32[n]   and its length
    bounds          int32[n+1] where, in the id blob, the "\\n" before each id is
    ids             the id blob: "\\n" + "\\n".join(ids) + "\\n" (UTF-8, surrogates
                    passed; just "\\n" when there are none)
    "\\n" CRC-32 of everything between MAGIC and it (8 hex digits) "\\n"

The arrays are in this machine's byte order (``order`` in the header; an
index from a machine of the other order is rebuilt). Each array loads with
one ``frombytes``; ids stay in their blob (:class:`PackedIds`) until one is
asked for, so opening a 100k-entry session never builds 100k strings or a
100k-key dict. Version 2 (ids as one JSON list) has another ``MAGIC``: it
is rebuilt, never misread.
"""

from __future__ import annotations

import json
import sys
import zlib
from array import array
from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import orjson

from ._records import loads

MAGIC = b"SMIDX3\n"
_INT32_MAX = 2**31 - 1
_TRAILER = 10  # "\n" + 8 hex digits + "\n"
# A by-id lookup without the position map scans the blob (C speed); after
# this many such scans the map is built once instead.
SCANS_BEFORE_MAP = 8


def checksum(body: bytes | memoryview) -> bytes:
    """The sidecar's own checksum: CRC-32 catches every torn, truncated and
    single-byte-flipped file it guards against at a fraction of a
    cryptographic hash's cost (the index is a cache, never a security boundary)."""
    return b"%08x" % zlib.crc32(body)


class PackedIds:
    """The ids of an index, decoded one at a time from their blob.

    ``plain``: no id contains ``"\\n"``, so the blob splits in one call and an
    id is found by a substring search for ``"\\n" + id + "\\n"``.
    """

    __slots__ = ("_base", "_blob", "_bounds", "n", "plain")

    def __init__(self, blob: bytes, bounds: array[int], plain: bool, base: int = 0) -> None:
        # The blob starts at ``base`` of ``blob`` (a whole sidecar file: no copy of its ids).
        self._blob = blob
        self._base = base
        self._bounds = bounds
        self.n = len(bounds) - 1
        self.plain = plain

    def at(self, i: int) -> str:
        bounds, base = self._bounds, self._base
        return self._blob[base + bounds[i] + 1 : base + bounds[i + 1]].decode("utf-8", "surrogatepass")

    def find(self, entry_id: str) -> int | None:
        """The position of ``entry_id``, by a scan of the blob (``plain`` only)."""
        try:
            needle = b"\n" + entry_id.encode("utf-8", "surrogatepass") + b"\n"
        except UnicodeEncodeError:
            return None
        base = self._base
        at = self._blob.find(needle, base, base + self._bounds[-1] + 1) - base
        if at < 0:
            return None
        i = bisect_left(self._bounds, at)
        return i if i < self.n and self._bounds[i] == at else None

    def all(self) -> list[str]:
        if not self.n:
            return []
        if self.plain:
            base = self._base
            return self._blob[base + 1 : base + self._bounds[-1]].decode("utf-8", "surrogatepass").split("\n")
        return [self.at(i) for i in range(self.n)]

    def raw(self) -> tuple[bytes, array[int]]:
        base = self._base
        blob = self._blob if not base else self._blob[base : base + self._bounds[-1] + 1]
        return blob, self._bounds


def pack_ids(ids: list[str]) -> PackedIds:
    """The blob and bounds of ``ids`` (raises ``OverflowError`` past 2 GiB of ids)."""
    joined = "\n".join(ids)
    blob = b"\n" + joined.encode("utf-8", "surrogatepass") + b"\n" if ids else b"\n"
    plain = joined.count("\n") == max(0, len(ids) - 1)
    ascii_only = len(blob) == len(joined) + 2  # characters are bytes
    sizes = map(len, ids) if ascii_only else (len(i.encode("utf-8", "surrogatepass")) for i in ids)
    if len(blob) > _INT32_MAX:
        raise OverflowError("ids too large for an index")
    bounds = array("i", accumulate((s + 1 for s in sizes), initial=0))
    return PackedIds(blob, bounds, plain)


def _json(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # integers past 64 bits in the meta: let json write them exactly
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


@dataclass
class IndexBody:
    header: dict[str, Any]
    ids: PackedIds
    parents: array[int]
    orphans: dict[int, str]
    offsets: array[int]
    lengths: array[int]

    def __getitem__(self, key: str) -> Any:
        return self.header[key]


def encode(header: dict[str, Any], ids: PackedIds, parents: array[int], offsets: array[int],
           lengths: array[int]) -> bytes:
    """The sidecar bytes; ``header`` gains the counts and flags that describe the arrays."""
    blob, bounds = ids.raw()
    n = ids.n
    if not len(parents) == len(offsets) == len(lengths) == n:
        raise ValueError("index arrays of different lengths")
    header = {**header, "n": n, "blob": len(blob), "plain": ids.plain, "order": sys.byteorder,
              "linear": parents == array("i", range(-1, n - 1))}
    body = b"".join((_json(header), b"\n", parents.tobytes(), offsets.tobytes(), lengths.tobytes(),
                     bounds.tobytes(), blob))
    return MAGIC + body + b"\n" + checksum(body) + b"\n"


def decode(raw: bytes, session_id: str) -> IndexBody | None:
    """The body of a sidecar, or ``None`` when it is not a whole, self-consistent one."""
    if (not raw.startswith(MAGIC) or len(raw) < len(MAGIC) + _TRAILER or raw[-_TRAILER:-9] != b"\n"
            or raw[-1:] != b"\n"):
        return None
    view = memoryview(raw)
    body = view[len(MAGIC) : -_TRAILER]
    if raw[-9:-1] != checksum(body):
        return None
    first = raw.find(b"\n", len(MAGIC), len(raw) - _TRAILER)
    if first < 0:
        return None
    try:
        header = loads(raw[len(MAGIC) : first])
    except (ValueError, RecursionError):
        return None
    if not isinstance(header, dict) or header.get("session_id") != session_id or header.get("order") != sys.byteorder:
        return None
    n, size = header.get("n"), header.get("blob")
    if (type(n) is not int or type(size) is not int or n < 0 or size < 1
            or not all(type(header.get(k)) is int for k in ("ino", "covered"))
            or not isinstance(header.get("tail"), str) or not isinstance(header.get("orphans"), dict)
            or type(header.get("plain")) is not bool or type(header.get("linear")) is not bool):
        return None
    rest = view[first + 1 : len(raw) - _TRAILER]
    if len(rest) != 20 * n + 4 + size:
        return None
    parents, offsets, lengths, bounds = array("i"), array("q"), array("i"), array("i")
    parents.frombytes(rest[: 4 * n])
    offsets.frombytes(rest[4 * n : 12 * n])
    lengths.frombytes(rest[12 * n : 16 * n])
    bounds.frombytes(rest[16 * n : 20 * n + 4])
    base = first + 1 + 20 * n + 4  # where the id blob starts in ``raw``
    if bounds[0] != 0 or bounds[n] != size - 1 or raw[base] != 0x0A or raw[base + size - 1] != 0x0A:
        return None
    try:
        orphans = {int(k): v for k, v in header["orphans"].items()}
    except ValueError:
        return None
    return IndexBody(header, PackedIds(raw, bounds, header["plain"], base), parents, orphans, offsets, lengths)
