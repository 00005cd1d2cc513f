"""The JSONL record format shared with the reference worker.

One record per line, discriminated by ``type``::

    {"type":"meta","meta":{...SessionMeta}}
    {"type":"entry","entry":{...SessionEntry}}
    {"type":"leaf","entry_id":"e_..."}
    {"type":"append","entry":{...},"meta":{...}}   # entry + leaf + meta in one line
    {"type":"commit","entry_id":"e_..."}           # read and ignored (reference bookkeeping)

Lines that only mean something together (an update's entry and meta, a leaf
move and its meta) carry a shared ``"tx"`` id and the last of them a
``"tx_n"`` count; replay applies such a group whole or not at all. The
reference ignores both fields, so files stay readable in both directions.

Decoding is defensive: anything that is not a well-formed record of a known
type is rejected here so replay can skip it and carry on.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..._wire.models import ROLES, STATUSES
from .._core.codec import encode_line as _line
from .._core.codec import loads as loads
from ..base import Commit

_KINDS = ("meta", "entry", "leaf", "append", "commit")


def _is_int(v: Any) -> bool:
    return type(v) is int  # JSON numbers decode to int exactly; bool is not a number here


def valid_entry(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return False
    # (``type(v) is int`` inline, not :func:`_is_int`: this runs on every line a replay reads.)
    if not isinstance(entry.get("id"), str) or type(entry.get("timestamp")) is not int:
        return False
    parent = entry.get("parent_id")
    if parent is not None and not isinstance(parent, str):
        return False
    revision = entry.get("revision", 0)
    if type(revision) is not int or revision < 0:
        return False
    origin = entry.get("origin")
    if origin is not None and not isinstance(origin, dict):
        return False
    kind = entry.get("kind")
    if kind == "message":
        message = entry.get("message")
        return (
            isinstance(message, dict)
            and message.get("role") in ROLES
            and isinstance(message.get("content"), list)
        )
    if kind == "custom":
        return isinstance(entry.get("custom_type"), str)
    return False


_META_TEXT = ("session_id", "title", "description")
_META_INTS = ("created_at", "updated_at", "message_count")
_META_OPTIONAL_TEXT = ("status_reason", "forked_from", "draft")


def valid_meta(meta: Any, session_id: str | None = None) -> bool:
    """Structural check of a stored SessionMeta, by hand: replay runs it on
    every append line, where a full model validation doubled the cost."""
    if not isinstance(meta, dict) or meta.get("status") not in STATUSES:
        return False
    if not all(isinstance(meta.get(k), str) for k in _META_TEXT):
        return False
    if not all(_is_int(meta.get(k)) for k in _META_INTS) or meta["message_count"] < 0:
        return False
    for key in _META_OPTIONAL_TEXT:
        value = meta.get(key)
        if value is not None and not isinstance(value, str):
            return False
    metadata = meta.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        return False
    parked = meta.get("draft_attachments")
    if parked is not None and not (
        isinstance(parked, list)
        and all(isinstance(a, dict) and isinstance(a.get("attachment_id"), str) for a in parked)
    ):
        return False
    return session_id is None or meta["session_id"] == session_id


def decode_record(line: bytes, session_id: str | None = None) -> dict[str, Any] | None:
    """The record a line holds, or ``None`` when the line is not a valid record."""
    try:
        record = loads(line)
    except (ValueError, RecursionError):  # UnicodeDecodeError too: a line must be strict UTF-8
        return None
    if not isinstance(record, dict):
        return None
    kind = record.get("type")
    if kind not in _KINDS:
        return None
    tx, tx_n = record.get("tx"), record.get("tx_n")
    if (tx is not None and not isinstance(tx, str)) or (tx_n is not None and (not _is_int(tx_n) or tx is None)):
        return None
    if kind == "meta":
        ok = valid_meta(record.get("meta"), session_id)
    elif kind == "entry":
        ok = valid_entry(record.get("entry"))
    elif kind == "leaf":
        leaf = record.get("entry_id")
        ok = leaf is None or isinstance(leaf, str)
    elif kind == "append":
        ok = valid_entry(record.get("entry")) and valid_meta(record.get("meta"), session_id)
    else:
        ok = isinstance(record.get("entry_id"), str)
    return record if ok else None


class Replay:
    """The replay rule, the one definition every reader uses (load, list,
    read-only refresh): valid records in order, a commit group applied whole
    or not at all, any line that is not a valid record skipped on its own.

    A group is complete when its ``tx_n`` line arrives and as many records of
    its ``tx`` have been seen since the group began; a malformed line between
    members is skipped without breaking the group (if it was a member, the
    count comes up short and the group is left out). Feeding may be split at
    any line boundary: a group still open stays pending for the next feed.
    """

    __slots__ = ("number", "pending", "pending_tx")

    def __init__(self) -> None:
        self.pending: list[tuple[int, dict[str, Any]]] = []  # (line number, record)
        self.pending_tx: str | None = None
        self.number = 0

    def feed(
        self, lines: Iterable[bytes], session_id: str, skip: Callable[[int, str], None]
    ) -> Iterator[dict[str, Any]]:
        for _, record in self.feed_numbered(lines, session_id, skip):
            yield record

    def feed_numbered(
        self, lines: Iterable[bytes], session_id: str, skip: Callable[[int, str], None]
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """:meth:`feed` with the (1-based, counted across feeds) number of the
        line each record came from: the index sidecar keeps where each entry's
        newest line is."""
        for line in lines:
            self.number += 1
            if not line.strip():
                continue
            record = decode_record(line, session_id)
            if record is None:
                skip(self.number, "malformed record (possibly a torn tail)")
                continue
            tx = record.get("tx")
            if tx != self.pending_tx and self.pending:
                skip(self.number, "the commit before this line is incomplete and was left out")
                self.pending, self.pending_tx = [], None
            if tx is None:
                yield self.number, record
                continue
            self.pending_tx = tx
            self.pending.append((self.number, record))
            count = record.get("tx_n")
            if count is not None:
                if count == len(self.pending):
                    yield from self.pending
                else:
                    skip(self.number, "an incomplete commit was left out")
                self.pending, self.pending_tx = [], None

    @property
    def open_since(self) -> int | None:
        """The number of the first line of the group still open, if any: a
        replay resumed at that line reads exactly what a whole one would."""
        return self.pending[0][0] if self.pending else None

    @property
    def idle(self) -> bool:
        """No group is open: the next line starts afresh."""
        return not self.pending


def committed_records(
    lines: Iterable[bytes], session_id: str, skip: Callable[[int, str], None]
) -> Iterator[dict[str, Any]]:
    """The valid records of a whole log, in order (see :class:`Replay`).
    ``skip(line_number, why)`` hears of every line left out."""
    replay = Replay()
    yield from replay.feed(lines, session_id, skip)
    if not replay.idle:
        skip(replay.number, "a commit cut short at the end of the log was left out")


def _ignore(number: int, why: str) -> None:
    pass


def last_meta(lines: list[bytes], session_id: str, *, whole: bool = True) -> tuple[dict[str, Any] | None, bool]:
    """The newest committed meta among ``lines``, by the same rule as replay.

    ``whole=False`` means ``lines`` is a tail window of the log (its first
    line possibly cut): replay then starts at the first line after which the
    rule's state cannot depend on what came before (a record outside any
    group, or the line that closes a group). Returns ``(meta, certain)``;
    not certain means the window was too short to tell, read a longer one.
    """
    start = 0
    if not whole:
        start = -1
        for i in range(1, len(lines)):
            record = decode_record(lines[i], session_id)
            if record is None:
                continue
            if record.get("tx") is None:
                start = i
                break
            if record.get("tx_n") is not None:
                start = i + 1
                break
        if start < 0:
            return None, False
    meta: dict[str, Any] | None = None
    for record in committed_records(lines[start:], session_id, _ignore):
        if record["type"] in ("meta", "append"):
            meta = record["meta"]
    return meta, meta is not None or whole


def snapshot_size(entry: dict[str, Any]) -> int:
    """The bytes an entry takes in a compacted log (its line and its commit marker)."""
    return len(_line({"type": "entry", "entry": entry})) + len(entry["id"]) + 34


def meta_size(meta: dict[str, Any]) -> int:
    """The bytes a meta takes in a compacted log (written twice there)."""
    return 2 * (len(_line({"type": "meta", "meta": meta})) + 1)


def encode_commit(commit: Commit) -> bytes:
    """The bytes of one mutation: whole lines, written with a single append.

    When the last entry becomes the leaf and the meta changes (append,
    append-many, fork), the earlier entries go as ``entry`` lines and the last
    one as an ``append`` line carrying leaf and meta: a crash that cuts the
    write short leaves only entries no leaf or meta points at yet, so the
    mutation reads back as not having happened. Anything else is entry
    lines, then the leaf, then the meta.
    """
    entries, leaf, meta = commit.entries, commit.leaf, commit.meta
    records: list[dict[str, Any]] = []
    if entries and meta is not None and leaf == entries[-1]["id"]:
        records.extend({"type": "entry", "entry": e} for e in entries[:-1])
        records.append({"type": "append", "entry": entries[-1], "meta": meta})
    else:
        records.extend({"type": "entry", "entry": e} for e in entries)
        if leaf is not None:
            records.append({"type": "leaf", "entry_id": leaf})
        if meta is not None:
            records.append({"type": "meta", "meta": meta})
        if len(records) > 1:
            # Lines that only mean something together (an update's entry and
            # meta, a leaf move and its meta) share a commit id; the last one
            # also counts them, so replay applies all of them or none.
            tx = tx_id(commit)
            for record in records:
                record["tx"] = tx
            records[-1]["tx_n"] = len(records)
    return b"\n".join(_line(r) for r in records) + b"\n"


def tx_id(commit: Commit) -> str:
    """The commit id shared by the lines of a multi-line commit (drawn once)."""
    return commit.tx() if commit.tx is not None else uuid.uuid4().hex[:16]


def entry_line_spans(data: bytes, start: int) -> Iterator[tuple[int, int]]:
    """(offset, length) of each line of ``data`` written at log offset
    ``start``: :func:`encode_commit` puts a commit's entries first, in order,
    one per line, so the first ``len(commit.entries)`` spans are theirs."""
    pos = 0
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            return
        yield start + pos, end - pos
        pos = end + 1


def written_spans(entries: int, data: bytes, start: int) -> Iterable[tuple[int, int]]:
    """The (offset, length) of the lines of a commit's ``entries`` (how many) in
    ``data`` written at ``start``: :func:`entry_line_spans`, and one entry (an
    append) is the first line, with no generator."""
    if entries == 1:
        return ((start, data.find(b"\n")),)
    return entry_line_spans(data, start)


def encode_snapshot(meta: dict[str, Any] | None, entries: Iterable[dict[str, Any]], leaf: str | None) -> bytes:
    """A whole log rewritten as its live state: the meta, every entry (on any
    branch), a ``commit`` marker per entry (what the reference's own
    snapshots carry, so its idempotent append treats them as committed), the
    leaf, and the meta once more."""
    records: list[dict[str, Any]] = []
    if meta is not None:
        records.append({"type": "meta", "meta": meta})
    kept = list(entries)
    records.extend({"type": "entry", "entry": e} for e in kept)
    records.extend({"type": "commit", "entry_id": e["id"]} for e in kept)
    if leaf is not None:
        records.append({"type": "leaf", "entry_id": leaf})
    if meta is not None and kept:
        # Again at the end (replay is last-wins): a cold list reads the meta
        # from the tail instead of the whole file.
        records.append({"type": "meta", "meta": meta})
    return b"".join(_line(r) + b"\n" for r in records)
