"""The data of the entries a LangGraph saver wrote or read lately, kept decoded so a read of
them asks the store only whether the thread moved on (the read of its ``(created_at, leaf)``
every read makes anyway), least recently used dropped past a byte budget.

A saver's entries are custom entries, and a custom entry never changes once written (only a
message is revised: ``session::update-message``), so an entry id of one thread names the same
data for as long as the thread is the one the saver's index was derived from. Each kept data
therefore carries the index it was kept with (its ``epoch``): it is served only while that
index is the thread's current one, which every read checks first (a thread another writer
moved on, deleted or recreated gets a new index, and its entries are read again)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from ._checkpoints import CHECKPOINT, WRITES

_SEEDED = (CHECKPOINT, WRITES)  # the entries a read takes data from
BASES = "\x00bases"  # the key (beside entry ids, which are never this) of a thread's delta bases
MEMO = "\x00memo"  # and of its serializer memo (:mod:`._memo`)
_CHARGED = (BASES, MEMO)
OVERHEAD = 512  # what a kept data holds beside its texts (its dicts and lists, the slot here)


def _doc_size(doc: Any) -> int:
    """A stored document's size (:func:`._checkpoints.encode_docs`): its text,
    its packed text, or its JSON's (a caller's metadata may be any size: counted, not guessed)."""
    if type(doc) is not dict:
        return 0
    text = doc.get("text")
    if type(text) is str:
        return len(text)
    packed = doc.get("packed")
    if type(packed) is list and packed and type(packed[-1]) is str:
        return len(packed[-1])
    try:
        return len(orjson.dumps(doc.get("json")))
    except (TypeError, orjson.JSONEncodeError):
        return 1024


def footprint(data: Any, encoded: bytes | None = None) -> int:
    """An estimate of the memory a checkpoint's or writes' data holds: its texts (serialized
    values, the checkpoint's body and metadata) and a fixed overhead. ``encoded``: the data's
    JSON, when the caller has it (a put's): its length stands for the texts (their JSON, so a
    little more: keys, quotes, escapes), measured without a walk of the data (issue 29: the walk,
    with the metadata encoded again, was ~180 bytecodes of every put)."""
    if encoded is not None:
        return OVERHEAD + len(encoded)
    size = OVERHEAD
    if type(data) is not dict:
        return size
    for packed in (data.get("values") or {}).values():
        size += len(packed[-1]) if type(packed) is list and packed and type(packed[-1]) is str else 64
    for packed in data.get("writes") or ():
        size += len(packed[-1]) if type(packed) is list and packed and type(packed[-1]) is str else 64
    return size + _doc_size(data.get("checkpoint")) + _doc_size(data.get("metadata"))


class Kept:
    """``(thread id, entry id) -> (epoch, data, size)``, least recently used first, within ``budget`` bytes."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.total = 0
        self._kept: OrderedDict[tuple[str, str], tuple[object, Any, int]] = OrderedDict()
        self._guard = threading.Lock()

    def get(self, thread_id: str, epoch: object, entry_id: str) -> Any | None:
        """The data kept for the entry with ``epoch``, else ``None`` (kept with another epoch: dropped)."""
        key = (thread_id, entry_id)
        with self._guard:
            kept = self._kept.get(key)
            if kept is None:
                return None
            if kept[0] is not epoch:
                del self._kept[key]
                self.total -= kept[2]
                return None
            self._kept.move_to_end(key)
            return kept[1]

    def keep(self, thread_id: str, epoch: object, entry_id: str, data: Any, size: int) -> None:
        """Keep ``data`` (never changed after: the saver built it, or decoded it for itself)."""
        if size > self.budget:
            return
        key = (thread_id, entry_id)
        with self._guard:
            old = self._kept.pop(key, None)
            if old is not None:
                self.total -= old[2]
            self._kept[key] = (epoch, data, size)
            self.total += size
            released = self._within() if self.total > self.budget else None
        if released:
            for release in released:
                release()

    def charge(self, thread_id: str, size: int, release: Callable[[], None], what: str = BASES) -> None:
        """Count a thread's delta bases (``size`` bytes, held by its index, not here) in the
        budget, as the most recently used: when they are the least recently used past it,
        ``release()`` lets them go (called outside the lock; a base gone is read from its entry,
        and the next put of the channel stores its value whole: a new base). ``what``: ``MEMO``
        for its serializer memo instead (:mod:`._memo`; gone, the next put serializes whole)."""
        key = (thread_id, what)
        with self._guard:
            old = self._kept.get(key)
            if old is not None and old[2] == size and old[1] == release:  # (most puts: the same bases)
                self._kept.move_to_end(key)
                return
            old = self._kept.pop(key, None)
            if old is not None:
                self.total -= old[2]
            if size > self.budget:
                released = [release]
            else:
                self._kept[key] = (None, release, size)
                self.total += size
                released = self._within() if self.total > self.budget else []
        for gone in released:
            gone()

    def uncharge(self, thread_id: str) -> None:
        """The thread's index (and its bases) was dropped, and its memo: they count no more."""
        with self._guard:
            for what in _CHARGED:
                old = self._kept.pop((thread_id, what), None)
                if old is not None:
                    self.total -= old[2]

    def _within(self) -> list[Callable[[], None]]:
        """Drop the least recently used past the budget (under the lock): the bases' and memos' releases."""
        released = []
        while self.total > self.budget:
            (_, entry_id), dropped = self._kept.popitem(last=False)
            self.total -= dropped[2]
            if entry_id in _CHARGED:
                released.append(dropped[1])
        return released

    def seed(self, thread_id: str, epoch: object, entries: Iterable[dict[str, Any]]) -> None:
        """Keep the data of the checkpoints and writes among a thread's ``entries`` (in append
        order: the newest are the last dropped), as an index derivation just decoded them."""
        for entry in entries:
            data = entry.get("data")
            if type(data) is dict and entry.get("kind") == "custom" and entry.get("custom_type") in _SEEDED:
                self.keep(thread_id, epoch, entry["id"], data, footprint(data))
