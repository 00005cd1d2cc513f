"""How :mod:`session_manager.adapters.langgraph` lays a LangGraph thread out in
one session, and the in-process index that finds things in it.

A thread's session holds custom entries only (nothing here is a chat message):

- ``langgraph.root`` (entry id ``langgraph-root``): the sentinel every
  namespace's first checkpoint hangs from;
- ``langgraph.checkpoint``: one per ``put``; its parent entry is the parent
  checkpoint's entry, so the session's branch tree is the checkpoint tree
  (time travel forks are branches). It holds the checkpoint without its
  channel values, the metadata, and the values of the channels ``put`` named
  in ``new_versions``: each channel version is stored once, in the entry that
  introduced it, and later checkpoints point at it through the index. A value
  whose serialized bytes continue (or cut back) those of the channel's newest
  value stored whole (a messages list a turn grew) is stored as a delta of it:
  its own first and last bytes and the span of the other it shares, named by
  entry id (:func:`delta`; one entry further to read, never a chain);
- ``langgraph.writes``: one per ``put_writes`` that changed something, child
  of its checkpoint's entry;
- ``langgraph.deleted``: checkpoints ``prune`` / ``delete_for_runs`` removed
  (tombstones: the entries stay, as everything in a session does; values they
  introduced stay readable to the checkpoints that kept them).

Values go through LangGraph's serializer: ``[type, data]``, its bytes as a
latin-1 string (one character per byte, U+0000..U+00FF; JSON escapes the
control bytes). Exact both ways, and for msgpack of chat messages (mostly
ASCII text) smaller than base64; base64 cost a put about 16 us per 7 KB of
state here, latin-1 0.1 us, which is the difference between slower and
faster than ``SqliteSaver``.
Metadata is stored as plain JSON (``{"json": ...}``) when JSON holds it
exactly (so filters, the data tool and the viewer read ``step``, ``source``,
``run_id``), a checkpoint's body (its fields but the channel values) as its
JSON text (``{"text": "..."}``: nothing but LangGraph reads it, and a put then
neither decodes a copy of it nor keeps one); either is serialized the same way
as values (``{"packed": ...}``) when JSON would not give it back exactly.
Bodies stored as plain JSON (``{"json": ...}``, before 2026-12) read back as before.

Every entry's data is built here, and only of exact JSON: strings this module
makes (the serializer's bytes as latin-1 text, a body's JSON) or checks (ids,
channel names, types), integers and finite floats it checks, and documents that
are orjson's own decoding of the value (never the caller's objects), nested
within what a request may hold. The saver hands such data to the store without the private
copy a caller's payload gets, through the host's typed append
(:meth:`SessionManager._append_owned
<session_manager._hosts.embedded.SessionManager._append_owned>`: no payload
admitted or parsed, the data's size measured); what this module cannot build
that way it refuses with ``session/invalid_request``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from .._service.admission import MAX_DEPTH
from ..errors import invalid_request

if TYPE_CHECKING:
    from ._memo import Memo

ROOT_ID = "langgraph-root"
ROOT = "langgraph.root"
CHECKPOINT = "langgraph.checkpoint"
WRITES = "langgraph.writes"
DELETED = "langgraph.deleted"

Key = tuple[str, str]  # (checkpoint_ns, checkpoint_id)
WriteKey = tuple[str, int]  # (task_id, write index)

# How deep a document's value may nest: an append's payload holds it at
# payload > custom > data > document > value, and MAX_DEPTH counts the payload as 1.
DOC_DEPTH = MAX_DEPTH - 4


def text(value: Any, field: str) -> str:
    """``value`` as an exact ``str`` (a subclass's own characters), else ``session/invalid_request``."""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    raise invalid_request(f"{field}: expected a string, got {type(value).__name__}")


def channel_version(value: Any, channel: str) -> str | int | float:
    """A channel version as LangGraph types it (``str | int | float``), exactly a JSON value."""
    kind = type(value)
    if kind is str or kind is int or (kind is float and math.isfinite(value)):
        return value  # type: ignore[no-any-return]
    raise invalid_request(f"new_versions.{channel}: a channel version is a string, an integer or a finite "
                          f"float, got {value!r}")


def pack(serde: Any, value: Any) -> list[str]:
    """``value`` through LangGraph's serializer, as JSON: ``[type, bytes as latin-1 text]``."""
    kind, data = serde.dumps_typed(value)
    return [text(kind, "serde type"), data.decode("latin-1")]


def pack_writes(serde: Any, writes: list[tuple[int, str, Any]]) -> tuple[list[list[Any]], list[list[Any]]]:
    """The ``writes`` of a writes entry: ``[idx, channel, type, data]`` per ``(idx, channel,
    value)``, and their twin to encode (:func:`data_json`): equal, each text another string."""
    packed: list[list[Any]] = []
    twin: list[list[Any]] = []
    for idx, channel, value in writes:
        kind, data = serde.dumps_typed(value)
        kind = text(kind, "serde type")
        packed.append([idx, channel, kind, data.decode("latin-1")])
        twin.append([idx, channel, kind, data.decode("latin-1")])
    return packed, twin


Serialized = list[tuple[str, "str | int | float", str, "bytes | None"]]  # (channel, version, type, bytes)


def serialize_values(serde: Any, channel_values: dict[str, Any], new_versions: dict[str, Any],
                     memo: Memo | None = None, thread_id: str = "", ns: str = "") -> Serialized:
    """The channels in ``new_versions``, each value through the serializer (``None``: no value);
    a list through ``memo`` when given (:mod:`._memo`: the same bytes, its items' reused)."""
    out: Serialized = []
    for channel, number in new_versions.items():  # (text() and channel_version() inline for what they
        # take as it is, a str name, type and version: every channel of every put)
        name = channel if type(channel) is str else text(channel, "new_versions")
        version = number if type(number) is str else channel_version(number, name)
        if channel in channel_values:
            value = channel_values[channel]
            if memo is not None and type(value) is list:
                kind, data = memo.dumps(serde, thread_id, ns, name, value)
            else:
                kind, data = serde.dumps_typed(value)
            out.append((name, version, kind if type(kind) is str else text(kind, "serde type"), data))
        else:
            out.append((name, version, "empty", None))
    return out


_BASE_OVERHEAD = 120  # what a Base holds beside its value (the object, its id, the slot of its line)


@dataclass(slots=True)
class Base:
    """A channel's newest value stored whole (in entry ``entry_id``, as ``text``): what a put's
    value is made a delta of (:func:`delta`). ``mid``: its bytes after their array header (at
    ``start``), made at the first delta against it and kept in the text's place, so each put
    compares bytes with bytes, without decoding its own value or copying the base's. (What a
    saver keeps for this: one value per thread, namespace and channel, of the threads whose
    index it keeps, at most ``_CACHED_THREADS``.)"""

    entry_id: str
    text: str
    start: int = 0
    mid: bytes | None = None

    def size(self) -> int:
        """The bytes it holds (its value's, as text or as bytes: one copy), and its slots."""
        return (len(self.mid) if self.mid is not None else len(self.text)) + _BASE_OVERHEAD

    def span(self) -> bytes:
        if self.mid is None:
            self.start = _array_head(ord(self.text[0]) if self.text else 0)
            self.mid = self.text[self.start:].encode("latin-1")
            self.text = ""  # (its bytes kept instead: one copy of the value per base, not two)
        return self.mid


Bases = dict[str, Base]  # channel -> its newest value stored whole on a namespace's line of checkpoints


def pack_values(serialized: Serialized,
                bases: Bases | None) -> tuple[dict[str, list[Any]], dict[str, list[Any]], int]:
    """The ``values`` of a checkpoint entry: ``[version, type, data]`` per serialized channel
    (``[version, "empty", ""]`` without a value), or, when its bytes continue or cut those of
    the channel's value in ``bases`` (:func:`delta`), ``[version, type, head, base entry id,
    start, end, tail]``; their twin to encode (:func:`data_json`): equal, each text another string;
    and the length of each one's last text, summed (what :func:`._kept.footprint` counts of them).
    Deltas of msgpack only (LangGraph's serializer): a release before them reads a delta's head as
    the value, which as msgpack is always incomplete (an error, never another value; raw ``bytes``
    would read back silently cut)."""
    values: dict[str, list[Any]] = {}
    twin: dict[str, list[Any]] = {}
    size = 0  # (the last texts' lengths: latin-1, one character per byte)
    for name, version, kind, data in serialized:
        if data is None:
            packed = twin[name] = [version, "empty", ""]
            values[name] = packed
            continue
        base = bases.get(name) if bases and kind == "msgpack" else None
        cut = delta(base, data) if base is not None else None
        if cut is None:
            values[name] = [version, kind, data.decode("latin-1")]
            twin[name] = [version, kind, data.decode("latin-1")]
            size += len(data)
        else:
            head, start, end, after = cut
            entry_id = base.entry_id  # type: ignore[union-attr]
            values[name] = [version, kind, data[:head].decode("latin-1"), entry_id, start, end,
                            data[after:].decode("latin-1")]
            twin[name] = [version, kind, data[:head].decode("latin-1"), entry_id, start, end,
                          data[after:].decode("latin-1")]
            size += len(data) - after
    return values, twin, size


_DELTA_MIN = 512  # bytes a delta must take from its base (below, the whole value is as cheap)


def is_base(packed: list[Any]) -> bool:
    """Is a stored ``[version, type, ...]`` a value a delta may be made of: whole, msgpack, and
    large enough to share ``_DELTA_MIN`` bytes (what :attr:`ThreadIndex.bases` keeps, and so what
    a delta read without its named entry looks for)."""
    return len(packed) == 3 and packed[1] == "msgpack" and len(packed[2]) > _DELTA_MIN


def _array_head(first: int) -> int:
    """The length of the msgpack array header a value whose first byte is ``first`` starts
    with (LangGraph's serializer writes a list so), 0 for anything else."""
    return 1 if 0x90 <= first <= 0x9F else 3 if first == 0xDC else 5 if first == 0xDD else 0


def delta(base: Base, value: bytes) -> tuple[int, int, int, int] | None:
    """``(head, start, end, after)`` with ``value == value[:head] + base[start:end] + value[after:]``
    (``base``'s bytes) when ``value``'s items after its array header continue ``base``'s (a list
    grown: LangGraph's messages) or are a prefix of them (a list cut back), sharing at least
    ``_DELTA_MIN`` bytes and two thirds of ``value``; else ``None`` (stored whole). Checked by
    comparison: a delta is exact whatever serializer made the bytes."""
    mid = base.mid or base.span()  # (inline: every put of a grown list)
    first = value[0] if value else 0
    head = 1 if 0x90 <= first <= 0x9F else 3 if first == 0xDC else 5 if first == 0xDD else 0  # (_array_head)
    shared = len(mid)
    if len(value) - head >= shared:  # grown, or as long
        if shared < _DELTA_MIN or 3 * shared < 2 * len(value) or not value.startswith(mid, head):
            return None
        return head, base.start, base.start + shared, head + shared
    shared = len(value) - head  # cut: every item of value's one of base's
    if shared < _DELTA_MIN or not mid.startswith(value[head:]):
        return None
    return head, base.start, base.start + shared, len(value)


def value_bytes(packed: list[Any], base: Base | str | None) -> bytes:
    """The serialized value's bytes of a stored ``[version, type, ...]``; a delta's with its
    base (:func:`pack_values`): the index's :class:`Base` when it is the one named, else the
    text of the value stored whole in the entry named."""
    if len(packed) == 3:
        return packed[2].encode("latin-1")  # type: ignore[no-any-return]
    head, start, end, tail = packed[2], packed[4], packed[5], packed[6]
    if isinstance(base, Base):
        mid = base.span()
        shared = mid if end - start == len(mid) else memoryview(mid)[:end - start]  # (joined: one copy)
        return b"".join((head.encode("latin-1"), shared, tail.encode("latin-1")))
    assert base is not None, "a delta is read with its base"
    return (head + base[start:end] + tail).encode("latin-1")  # type: ignore[no-any-return]


def data_json(data: dict[str, Any], key: str, twin: Any) -> bytes | None:
    """``orjson.dumps(data)``, byte for byte, made with ``twin`` (equal to ``data[key]``, its
    texts other strings) in ``data[key]``'s place; ``None`` when orjson refuses it (the
    host's own encoding then names why). orjson keeps the UTF-8 it makes of a non-ASCII
    string on that string, and the store keeps an entry's strings in memory with it:
    the serialized values' latin-1 text (~5 KB for 15 messages) would carry as much
    again, in fresh memory on every put (~1.5 page faults a put here); made on the
    twin, that UTF-8 goes with the twin."""
    try:
        return orjson.dumps({**data, key: twin})
    except TypeError:  # (orjson.JSONEncodeError too)
        return None


def unpack(serde: Any, packed: list[str]) -> Any:
    return serde.loads_typed((packed[0], packed[1].encode("latin-1")))


def encode_docs(serde: Any, fields: Any, metadata: Any) -> tuple[dict[str, Any], dict[str, Any], int]:
    """A put's documents, and the length of their texts (what :func:`._kept.footprint` counts of
    them: the body's text, the metadata's JSON, a packed document's text).

    The checkpoint's ``fields`` (its body: all but the channel values): ``{"text": its JSON}``
    when JSON gives them back equal and of the same types (:func:`plain`), else ``{"packed":
    [type, latin-1 text]}``. Kept as text, not decoded (no copy, depth bound or ~6 containers
    a put): a read decodes its own copy anyway, and nothing looks inside a body but LangGraph.

    The ``metadata`` (which filters and tools do read): ``{"json": copy}`` when JSON gives it
    back equal and of the same types (``copy`` is that decoding: exact JSON, nobody else's
    objects) and within :data:`DOC_DEPTH`, else ``{"packed": [type, latin-1 text]}``.
    (Both in one function: every put; ``orjson.dumps`` first, as it refuses what nests too
    deep for :func:`plain`'s recursion.)"""
    try:
        encoded: bytes | None = orjson.dumps(fields)
    except (TypeError, orjson.JSONEncodeError):
        encoded = None
    if encoded is not None and plain(fields):
        text = encoded.decode()
        body: dict[str, Any] = {"text": text}
        size = len(text)
    else:
        packed = pack(serde, fields)
        body = {"packed": packed}
        size = len(packed[1])
    try:
        encoded = orjson.dumps(metadata)
    except (TypeError, orjson.JSONEncodeError):
        encoded = None
    if encoded is not None and plain(metadata):
        copy = orjson.loads(encoded)
        if _within(copy, encoded):  # (the copy's JSON is ``encoded``, byte for byte: its length counted)
            return body, {"json": copy}, size + len(encoded)
    packed = pack(serde, metadata)
    return body, {"packed": packed}, size + len(packed[1])


_PLAIN = frozenset({str, int, bool, type(None)})  # (a float is plain when finite: JSON has no NaN)


def plain(value: Any) -> bool:
    """Is ``value`` made of JSON's own types only (no subclass: an ``IntEnum`` equals its int,
    and JSON would give back the int; no tuple: JSON gives back a list) and finite floats
    (JSON writes NaN as ``null``), so that JSON gives it back equal and of the same types?
    (Call it on what ``orjson.dumps`` took: that bounds the nesting, and so this recursion, and
    refused every dict key but an exact ``str``, a subclass too: the keys are not looked at.)"""
    kind = type(value)
    if kind is dict:  # (a loop, each scalar tested in place: no generator, no call per scalar; every
        # put's body and metadata pass here: ~0.5 us less than all() over a generator)
        for v in value.values():  # noqa: SIM110
            if type(v) not in _PLAIN and not plain(v):
                return False
        return True
    if kind is list:
        return all(map(plain, value))
    if kind is float:
        return math.isfinite(value)
    return kind in _PLAIN


def _within(copy: Any, body: bytes, limit: int = DOC_DEPTH) -> bool:
    """Does ``copy`` (encoded as ``body``) nest at most ``limit`` deep? A document
    with no more brackets than that does (brackets in strings count too: an upper
    bound, and the usual answer); any other is measured."""
    return body.count(b"{") + body.count(b"[") <= limit or _depth(copy) <= limit


def _depth(value: Any) -> int:
    """The nesting of a decoded JSON value (a scalar is 0, ``[]`` 1)."""
    if type(value) is dict:
        return 1 + max(map(_depth, value.values()), default=0)
    if type(value) is list:
        return 1 + max(map(_depth, value), default=0)
    return 0


def decode_doc(serde: Any, doc: dict[str, Any]) -> Any:
    """The value of an :func:`encode_docs` document: the caller's own copy (the
    store's entry must not change when LangGraph edits a checkpoint it read)."""
    if "json" in doc:
        return orjson.loads(orjson.dumps(doc["json"]))
    if "text" in doc:  # (a checkpoint body)
        return orjson.loads(doc["text"])
    return unpack(serde, doc["packed"])


@dataclass
class Write:
    entry_id: str
    position: int
    task_path: str


@dataclass
class ThreadIndex:
    """Where everything of one thread is: checkpoint entries by (ns, id), the
    entry holding each (ns, channel, version), the live pending writes per
    checkpoint. Derived from the entries alone; ``token`` is the session's
    ``(created_at, leaf, version)`` it was derived at (``SessionStore.session_token``:
    never the same after any write of the session), ``mine`` how many commits the
    saver's own writes made since that version (each moved ``token``'s leaf, not its version)."""

    token: tuple[Any, str | None, Hashable | None] | None = None
    mine: int = 0
    rooted: bool = False
    checkpoints: dict[Key, str] = field(default_factory=dict)
    blobs: dict[tuple[str, str, str | int | float], str] = field(default_factory=dict)
    writes: dict[Key, dict[WriteKey, Write]] = field(default_factory=dict)
    newest: dict[str, str] = field(default_factory=dict)  # ns -> its newest checkpoint id
    # What a put's values are made deltas of (pack_values): per ns, each channel's newest value stored
    # whole on the line of checkpoints ending at ``tips[ns]`` (its newest checkpoint's entry), each
    # one an ancestor of it: a checkpoint that does not continue the tip (a fork) starts the line
    # again, so a delta's base is always on its own checkpoint's path (what a path copy carries).
    bases: dict[str, Bases] = field(default_factory=dict)
    tips: dict[str, str] = field(default_factory=dict)
    # This index's own: the entries' data a saver keeps is served while it is the thread's (_kept.py).
    epoch: object = field(default_factory=object, compare=False, repr=False)
    # A delta's base by (its entry, channel) when the entry it names is not its line's base: in a path
    # copied by session::fork (new entry ids) that line's base is the one it was made of (the nearest
    # base above it, as it was when made), so a read takes it here instead of walking up to it.
    moved: dict[tuple[str, str], Base] = field(default_factory=dict)

    def add(self, entry: dict[str, Any]) -> None:
        """Take one stored entry (``kind``, ``custom_type``, ``data``) into the index, in append order."""
        if entry.get("kind") != "custom":
            return
        kind, data, entry_id = entry.get("custom_type"), entry.get("data"), entry["id"]
        if kind == ROOT and entry_id == ROOT_ID:
            self.rooted = True
        elif kind == CHECKPOINT and isinstance(data, dict):
            self.add_checkpoint(entry_id, data, entry.get("parent_id"))
            self.add_moved(entry_id, data)
        elif kind == WRITES and isinstance(data, dict):
            self.add_writes(entry_id, data)
        elif kind == DELETED and isinstance(data, dict):
            gone = {(ns, checkpoint_id) for ns, checkpoint_id in data.get("checkpoints", [])}
            for key in gone:
                self.checkpoints.pop(key, None)
                self.writes.pop(key, None)
            for ns in {ns for ns, _ in gone}:
                ids = [cid for (n, cid) in self.checkpoints if n == ns]
                if ids:
                    self.newest[ns] = max(ids)
                else:
                    self.newest.pop(ns, None)

    def add_checkpoint(self, entry_id: str, data: dict[str, Any], parent: str | None) -> None:
        """Take a checkpoint entry (``parent``: its parent entry) into the index, in append order."""
        ns = data["ns"]
        key = (ns, data["id"])
        self.checkpoints[key] = entry_id  # a checkpoint put again replaces the earlier one (its writes stay)
        if data["id"] > self.newest.get(ns, ""):
            self.newest[ns] = data["id"]
        tip = self.tips.get(ns)  # (:meth:`line`, inline: every put)
        line = self.bases.get(ns) if tip is not None and tip == parent else None
        if line is None:
            line = self.bases[ns] = {}
        self.tips[ns] = entry_id
        blobs = self.blobs
        for channel, packed in data.get("values", {}).items():  # ([version, ...]: indexed, not unpacked: every put)
            blobs[(ns, channel, packed[0])] = entry_id
            if len(packed) == 3 and packed[1] == "msgpack" and len(packed[2]) > _DELTA_MIN:  # (is_base, inline:
                line[channel] = Base(entry_id, packed[2])  # every channel of every put)

    def add_moved(self, entry_id: str, data: dict[str, Any]) -> None:
        """Keep, in :attr:`moved`, the base of each delta of a stored checkpoint entry (taken in
        by :meth:`add_checkpoint` just before) that names an entry other than its line's base.
        (Not on a put's path: a put's own deltas name their line's base.)"""
        line = self.bases.get(data["ns"], {})
        for channel, packed in data.get("values", {}).items():
            if len(packed) > 3:
                base = line.get(channel)
                if base is not None and base.entry_id != packed[3]:
                    self.moved[(entry_id, channel)] = base

    def bases_size(self) -> int:
        """The bytes its delta bases hold (:attr:`bases`, :attr:`moved`; one shared counted once):
        what the saver counts in its cache budget."""
        size = 0
        for line in self.bases.values():  # (Base.size inline: every put)
            for base in line.values():
                mid = base.mid
                size += (len(mid) if mid is not None else len(base.text)) + _BASE_OVERHEAD
        if self.moved:  # (a fork copy's index: rare)
            seen = {id(base) for line in self.bases.values() for base in line.values()}
            for base in self.moved.values():
                if id(base) not in seen:
                    seen.add(id(base))
                    size += base.size()
        return size

    def let_bases_go(self) -> None:
        """Drop every base (the saver's budget): a read of a delta then reads its base's entry,
        and a put of the channel stores its value whole (its line's new base). Rebound, not
        cleared: a put under way keeps the line it took (its delta names its base's entry)."""
        self.bases = {}
        self.moved = {}

    def line(self, ns: str, parent: str | None) -> Bases | None:
        """The bases a checkpoint of ``ns`` whose parent entry is ``parent`` may be a delta of:
        ``None`` unless it continues the namespace's newest checkpoint (:attr:`bases`)."""
        tip = self.tips.get(ns)
        return self.bases.get(ns) if tip is not None and tip == parent else None

    def add_writes(self, entry_id: str, data: dict[str, Any]) -> None:
        slot = self.writes.setdefault((data["ns"], data["checkpoint_id"]), {})
        task_id, task_path = data["task_id"], data["task_path"]
        for position, packed in enumerate(data["writes"]):  # ([idx, ...]: indexed, not unpacked)
            slot[(task_id, packed[0])] = Write(entry_id, position, task_path)

    def latest(self, ns: str) -> str | None:
        """The newest checkpoint id of ``ns`` (ids grow with time, as LangGraph's savers order them)."""
        return self.newest.get(ns)


def new_writes(index: ThreadIndex, key: Key, writes: list[tuple[int, str, Any]], task_id: str) -> list[Any]:
    """The ``(idx, channel, value)`` of ``writes`` that change the stored state:
    a regular write (idx >= 0) already stored for the task is kept as it was,
    a special one (error, interrupt, ...: idx < 0) replaces it, as LangGraph's
    savers do."""
    have = index.writes.get(key, {})
    return [w for w in writes if w[0] < 0 or (task_id, w[0]) not in have]
