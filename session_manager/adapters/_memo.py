"""A LangGraph saver's memo of the serializer's bytes of a list channel's items (issue 29), so a
put serializes only the messages it has not serialized before, its bytes still exactly
``serde.dumps_typed(value)``'s.

Without it every put serializes the whole messages list again (quadratic over a thread's life),
although the list grew by a message or two since the last put. LangGraph's serializer
(:class:`JsonPlusSerializer`) writes a list as msgpack: an array header, then each item as
``_msgpack_enc(item)`` would alone (msgpack is context-free: an item's bytes do not depend on
what is around them; a message goes through the serializer's ``default`` as an ``Ext``, a leaf,
so no nesting limit differs either). A list of messages is therefore its header and its items'
bytes joined, and an item's bytes can be reused while the item is provably the same.

An item's bytes are reused only when all of these hold:

- the serializer is exactly :class:`JsonPlusSerializer` with its own ``dumps_typed``, and
  jsonplus's msgpack options and ``_msgpack_default`` as at import (a custom
  ``serde=``, a subclass or a patched instance goes through ``dumps_typed`` whole, as before);
- the item is the same object (``is``; the memo holds it, so its id is not reused) as one of the
  previous put's items of the same thread, namespace and channel;
- its class is one of langchain_core's messages with pydantic's own ``model_dump``, no computed
  fields, no field or model serializers (:func:`_memoizable`): what the serializer writes of it is
  then the class's module and name and ``model_dump()``, a function of the class and the
  instance's ``__dict__`` and ``__pydantic_extra__``;
- those two are, by their *fingerprint*, as they were when its bytes were made: ``ormsgpack``'s
  encoding of them with every non-plain value refused (subclasses of str/int/float/dict/list,
  tuples, enums, dataclasses, datetimes, uuids, ints past 64 bits, non-str keys, lone surrogates,
  any other object: no fingerprint, so no reuse). msgpack keeps what JSON would merge (NaN vs
  None, 1 vs 1.0 vs True, -0.0 vs 0.0, key order), so an in-place edit of a message (its
  ``content``, a nested ``additional_kwargs`` dict, its ``id``, ``tool_calls``...) changes it.
  (``bytes``, ``bytearray`` and ``memoryview`` give one fingerprint for one content: the
  serializer writes them alike too.) The bytes are made of a private copy of the state the
  fingerprint holds (:func:`_copy`), so they are that fingerprint's even while another thread
  edits the item; and a put works on one snapshot of the list.

After two puts in a row that reused nothing, a list sharing no object with the previous put's
(its messages read back anew each put) goes through ``dumps_typed`` whole: the memo holds only
its objects, so a next put that shares them memoizes them again.

Anything else in the list (a dict, a string, another class) sends the whole value through
``dumps_typed``, as does any item the serializer refuses alone (its error, or its pickle fallback,
comes from the whole value, as before). As a safety net the first joined value per saver and
channel, the first that reused bytes, and then every :data:`_CHECK_EVERY`-th are compared with
``dumps_typed`` of the whole value; a difference turns the memo off for the saver (logged) and
stores the whole value's bytes.

The memo holds, per thread, namespace and channel, the previous put's items (each object, its
fingerprint and its bytes): counted in the saver's ``cache_bytes`` budget beside its delta bases
(:meth:`._kept.Kept.charge`), let go past it, with the thread's index, or when the thread is
deleted. What it holds never depends on what is stored (a pure function of the objects), so a
fork, time travel, prune or copy needs nothing of it; a restart starts empty (objects read back
are new objects, serialized once at their first put).
"""

from __future__ import annotations

import logging
import threading
from operator import attrgetter, is_
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde import jsonplus
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

log = logging.getLogger(__name__)

# The fingerprint's encoding: every value other than exact str, int (64 bits), float, bool, None,
# bytes-likes, and exact dicts (str keys) and lists of them, is refused (no default given).
_FP = (ormsgpack.OPT_PASSTHROUGH_SUBCLASS | ormsgpack.OPT_PASSTHROUGH_TUPLE | ormsgpack.OPT_PASSTHROUGH_DATACLASS
       | ormsgpack.OPT_PASSTHROUGH_DATETIME | ormsgpack.OPT_PASSTHROUGH_ENUM | ormsgpack.OPT_PASSTHROUGH_UUID
       | ormsgpack.OPT_PASSTHROUGH_BIG_INT)
_DUMPS_TYPED = JsonPlusSerializer.dumps_typed
# The serializer's private parts the memo reproduces; a langgraph-checkpoint without them (another
# release of the pinned range) gets no memo: every value through dumps_typed whole, as before.
try:
    from langgraph.checkpoint.serde.types import _DeltaSnapshot as _Snapshot
    _DELTA: type = _Snapshot
    _OPTION: Any = jsonplus._option
    _DEFAULT: Any = jsonplus._msgpack_default
    _AVAILABLE = callable(jsonplus._msgpack_enc)
except (ImportError, AttributeError):  # pragma: no cover (langgraph-checkpoint 4.3.2 has them)
    _DELTA = type("_NoDeltaSnapshot", (), {})
    _OPTION = _DEFAULT = None
    _AVAILABLE = False
_CHECK_EVERY = 256  # a joined value compared with dumps_typed's at least this often (per saver)
ITEM_OVERHEAD = 200  # what a memoized item holds beside its bytes (its list slots, offsets)
_KINDS_MAX = 4096  # classes whose verdict is kept (dynamically made classes: judged again each time)

_kinds: dict[type, bool] = {}  # class -> memoizable (:func:`_memoizable`)
_dict = attrgetter("__dict__")
_extra = attrgetter("__pydantic_extra__")


def _memoizable(cls: type) -> bool:
    """Whether what the serializer writes of an instance of ``cls`` is a function of the class
    and the instance's ``__dict__`` and ``__pydantic_extra__``: one of langchain_core's message
    classes, with pydantic's own ``model_dump``, no computed fields, no serializers of its own."""
    try:
        from langchain_core.messages import BaseMessage
        from pydantic import BaseModel
        from pydantic.functional_serializers import PlainSerializer, WrapSerializer
    except ImportError:  # pragma: no cover (langgraph depends on both)
        return False
    if not (isinstance(cls, type) and issubclass(cls, BaseMessage)
            and cls.__module__.startswith("langchain_core.messages.")):
        return False
    decorators = getattr(cls, "__pydantic_decorators__", None)
    return bool(
        not issubclass(cls, _DELTA)
        and cls.model_dump is BaseModel.model_dump
        and cls.__getattribute__ is object.__getattribute__
        and not any("__class__" in vars(k) for k in cls.__mro__ if k is not object)
        and not cls.model_computed_fields
        and decorators is not None and not decorators.field_serializers and not decorators.model_serializers
        and not any(isinstance(m, (PlainSerializer, WrapSerializer))
                    for f in cls.model_fields.values() for m in f.metadata))


def memoizable(cls: type) -> bool:
    verdict = _kinds.get(cls)
    if verdict is None:
        verdict = _memoizable(cls)
        if len(_kinds) < _KINDS_MAX:
            _kinds[cls] = verdict
    return verdict


def fingerprint(item: Any) -> bytes | None:
    """The fingerprint of a memoizable item's state, ``None`` when it holds a non-plain value."""
    state = item.__dict__
    extra = item.__pydantic_extra__
    try:
        return ormsgpack.packb(state if not extra else [state, extra], option=_FP)
    except (TypeError, ormsgpack.MsgpackEncodeError):
        return None


_SHORT = tuple(bytes((0x90 | n,)) for n in range(16))


def array_header(n: int) -> bytes:
    """msgpack's array header for ``n`` items (as ormsgpack writes it: the shortest)."""
    if n < 16:
        return _SHORT[n]
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def usable(serde: Any) -> bool:
    """Is ``serde`` the serializer whose writing of a list this module reproduces (its msgpack
    options and default as at import: bytes memoized under them are not reused while patched)."""
    return _AVAILABLE and type(serde) is JsonPlusSerializer and "dumps_typed" not in vars(serde) \
        and JsonPlusSerializer.dumps_typed is _DUMPS_TYPED \
        and jsonplus._option == _OPTION and jsonplus._msgpack_default is _DEFAULT


class Held:
    """A list's previous put, as the memo holds it (never changed once made: a put racing
    another reads one whole). Per position ``j`` of its ``n`` items: the item (``objs``), its
    class (``types``), its fingerprint ``fpj[fpoff[j]:fpoff[j+1]]`` (empty: none, no reuse)
    and its bytes ``out[head + doff[j]:head + doff[j+1]]``; ``out`` is the value's bytes (its
    array header, ``head`` long, then the items'). ``run``: how many leading items have one.
    ``cold``: its put reused nothing (or serialized the value whole, holding only its objects)."""

    __slots__ = ("cold", "doff", "fpj", "fpoff", "head", "objs", "out", "run", "size", "types")

    def __init__(self, objs: list[Any], types: list[type], fpj: bytes, fpoff: list[int], out: bytes,
                 head: int, doff: list[int], run: int, cold: bool) -> None:
        self.objs, self.types, self.fpj, self.fpoff = objs, types, fpj, fpoff
        self.out, self.head, self.doff, self.run, self.cold = out, head, doff, run, cold
        # (the objects it keeps alive counted as much as their bytes again)
        self.size = 2 * len(out) + len(fpj) + ITEM_OVERHEAD * len(objs)


class ThreadMemo:
    """One thread's memo: per (namespace, channel), the previous put's list (:class:`Held`)."""

    __slots__ = ("lists", "owner", "thread_id")

    def __init__(self, owner: Memo, thread_id: str) -> None:
        self.owner = owner
        self.thread_id = thread_id
        self.lists: dict[tuple[str, str], Held] = {}

    def size(self) -> int:
        return sum(held.size for held in list(self.lists.values()))

    def release(self) -> None:
        """Let it go (the saver's budget, or its index dropped)."""
        self.owner.drop(self.thread_id, self)


class Memo:
    """A saver's memo (see the module's docstring); ``on`` until a safety check disagrees."""

    def __init__(self) -> None:
        self.on = True
        self.joined = 0  # values joined (the checks' clock)
        self.checked: set[tuple[str, bool]] = set()  # (channel, reused any) checked once
        self.threads: dict[str, ThreadMemo] = {}
        self._guard = threading.Lock()

    def thread(self, thread_id: str) -> ThreadMemo:
        memo = self.threads.get(thread_id)
        if memo is None:
            with self._guard:
                memo = self.threads.setdefault(thread_id, ThreadMemo(self, thread_id))
        return memo

    def drop(self, thread_id: str, memo: ThreadMemo | None = None) -> None:
        """Forget a thread's memo (only ``memo``, when given: not one made after it)."""
        with self._guard:
            if memo is None or self.threads.get(thread_id) is memo:
                self.threads.pop(thread_id, None)

    def off(self, why: str) -> None:
        self.on = False
        with self._guard:
            self.threads = {}
        log.warning("session_manager LangGraph saver: serializer memo turned off: %s", why)

    def dumps(self, serde: Any, thread_id: str, ns: str, channel: str, value: list[Any]) -> tuple[str, bytes]:
        """``serde.dumps_typed(value)`` of a list, made of the items' memoized bytes where each is
        provably the same, the others serialized alone (and memoized for the next put).

        The previous put's leading items that are the same objects, of the same classes, are
        checked at once: ``ormsgpack`` of their states as one list must be their fingerprints
        joined (msgpack is self-delimiting: equal joined, each equal), and their bytes are then
        one slice of the previous value's. Any other item is looked at alone."""
        # One snapshot of the list (one C call): another thread changing it meanwhile cannot make
        # what is held (its objects, their classes) differ from what was joined.
        value = list(value)
        memo = self.thread(thread_id)
        key = (ns, channel)
        prev = memo.lists.get(key)
        n = len(value)
        if prev is not None and prev.cold and set(map(id, prev.objs)).isdisjoint(map(id, value)):
            # Two puts in a row of objects the one before did not hold (new each put: read back by
            # get_tuple, say): nothing to reuse, the memo's work for nothing; whole, holding only
            # the objects (no fingerprints: nothing reused of them) to see if the next put shares them.
            if self.threads.get(thread_id) is memo:
                zeros = [0] * (n + 1)
                memo.lists[key] = Held(value, list(map(type, value)), b"", zeros, b"", 0, zeros, 0, True)
            return serde.dumps_typed(value)  # type: ignore[no-any-return]
        m = 0  # leading items reused at once
        if prev is not None:
            m = min(n, prev.run)
            head = value[:m]
            if m and not (all(map(is_, head, prev.objs)) and all(map(is_, map(type, head), prev.types))):
                m = 0
                for a, b in zip(head, prev.objs, strict=False):
                    if a is not b or type(a) is not type(b) or type(a) is not prev.types[m]:
                        break
                    m += 1
                head = value[:m]
            if m and (any(map(_extra, head)) or not _same(head, prev.fpj, prev.fpoff[m])):
                m = 0
        datas: list[Any] = []  # the bytes of value[m:]
        fps: list[bytes] = []  # and their fingerprints (b"": none)
        kinds: list[type] = []  # and their classes (as read when they were encoded)
        reused = m > 0
        where: dict[int, int] | None = None
        enc = jsonplus._msgpack_enc  # (looked up now, as dumps_typed does)
        for i in range(m, n):
            item = value[i]
            cls = type(item)
            if not (_kinds.get(cls) or memoizable(cls)):
                memo.lists.pop(key, None)
                return serde.dumps_typed(value)  # type: ignore[no-any-return]
            fp = fingerprint(item)
            j: int | None = None
            if prev is not None and fp is not None and i < len(prev.objs):  # (past them: a new item, taken
                # as new even if moved from before: no reuse, the same bytes; a grown list builds no map)
                if prev.objs[i] is item:
                    j = i
                else:
                    if where is None:
                        where = {id(o): k for k, o in enumerate(prev.objs)}
                    j = where.get(id(item))
            if j is not None and prev is not None and prev.objs[j] is item and prev.types[j] is cls \
                    and prev.fpoff[j] < prev.fpoff[j + 1] \
                    and prev.fpj[prev.fpoff[j]:prev.fpoff[j + 1]] == fp:
                datas.append(memoryview(prev.out)[prev.head + prev.doff[j]:prev.head + prev.doff[j + 1]])
                fps.append(fp)
                kinds.append(cls)
                reused = True
                continue
            try:  # (with a fingerprint: its bytes made of a private copy of the state it holds)
                data = enc(item if fp is None else _copy(cls, fp))
            except Exception:  # (its error, or pickle fallback, from the whole value: as before)
                memo.lists.pop(key, None)
                return serde.dumps_typed(value)  # type: ignore[no-any-return]
            datas.append(data)
            fps.append(fp or b"")
            kinds.append(cls)
        header = array_header(n)
        if prev is not None and m:
            out = b"".join([header, memoryview(prev.out)[prev.head:prev.head + prev.doff[m]], *datas])
            fpj = b"".join([memoryview(prev.fpj)[:prev.fpoff[m]], *fps])
            doff, fpoff = prev.doff[:m + 1], prev.fpoff[:m + 1]
            types = prev.types[:m]
        else:
            out = b"".join([header, *datas])
            fpj = b"".join(fps)
            doff, fpoff, types = [0], [0], []
        run = m
        for data, fp in zip(datas, fps, strict=True):
            doff.append(doff[-1] + len(data))
            fpoff.append(fpoff[-1] + len(fp))
            if run == len(fpoff) - 2 and fp:
                run += 1
        types.extend(kinds)
        self.joined += 1
        if (channel, reused) not in self.checked or self.joined % _CHECK_EVERY == 0:
            kind, whole = serde.dumps_typed(value)
            if kind != "msgpack" or whole != out:
                self.off(f"channel {channel!r}: a joined value differs from dumps_typed's")
                return kind, whole
            self.checked.add((channel, reused))
        if self.threads.get(thread_id) is memo:  # (not let go meanwhile)
            memo.lists[key] = Held(value, types, fpj, fpoff, out, len(header), doff, run, not reused)
        return "msgpack", out


def _copy(cls: type, fp: bytes) -> Any:
    """An instance of ``cls`` whose state is what the fingerprint ``fp`` holds (as
    ``model_construct`` makes one), seen by no other thread: the bytes made of it are that
    fingerprint's. (Made of the item itself, an edit by another thread undone before the
    fingerprint was taken again, A -> B -> A, left B's bytes under A's fingerprint.) The state
    comes back as it went in: the fingerprint holds only plain values, bytes-likes as bytes,
    which the serializer writes alike. Only what ``model_dump()`` reads is set (its fields set and
    private attributes are not: were they read, the error sends the value through ``dumps_typed``
    whole, the same bytes)."""
    state = ormsgpack.unpackb(fp)
    extra = None
    if type(state) is list:  # ([state, extra]: see fingerprint())
        state, extra = state
    copy: Any = object.__new__(cls)  # (as pydantic does: BaseModel has no __new__ of its own)
    _set(copy, "__dict__", state)
    _set(copy, "__pydantic_extra__", extra)
    return copy


_set = object.__setattr__


def _same(head: list[Any], fpj: bytes, end: int) -> bool:
    """Are the states of ``head`` (memoizable items, no extras) those whose fingerprints are
    ``fpj[:end]`` joined: one ``ormsgpack`` call for them all (its array header left out)."""
    try:
        batch = ormsgpack.packb(list(map(_dict, head)), option=_FP)
    except (TypeError, ormsgpack.MsgpackEncodeError):
        return False
    # (bytes, not memoryviews: CPython compares memoryviews item by item, ~20x slower than memcmp)
    return batch[len(array_header(len(head))):] == fpj[:end]
