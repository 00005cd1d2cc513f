"""Every session's last meta, kept in list order, with an equality index on
status and on each top-level metadata key.

``session::list`` pages through it without sorting the store: a page is a
bisect to the cursor and a walk of ``limit`` items (or, under a selective
filter, a sort of the candidates only). The index only narrows: the
caller's own predicate (the service's equality rule) decides every item.
Updates keep the newest sessions at the end of the ``updated_at`` order, so
the common update (the session just written) moves few pointers.

A catalog built from the sessions index holds most metas as their recorded
JSON (``pending``) and decodes one when it is first returned or changed: a
cold page of 50 decodes 50, whatever the store holds.
"""

from __future__ import annotations

import bisect
import operator
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, overload

from ._records import loads
from ._shared_keys import shared_keys

Meta = dict[str, Any]
Key = tuple[int, str]
ORDERS = {"updated_desc": ("updated_at", True), "created_desc": ("created_at", True),
          "created_asc": ("created_at", False)}


def bucket(value: Any) -> tuple[Any, ...]:
    """A hashable stand-in equal for values JSON equality may call equal:
    numbers by value (1 and 1.0 together, true apart), containers by shape."""
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("num", value)
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, list):
        return ("list", len(value))
    if isinstance(value, dict):
        return ("obj", tuple(sorted(value)))
    return ("other", type(value).__name__)


class MetaCatalog:
    """Not thread-safe on its own: the store calls it under its lock."""

    def __init__(self, metas: Iterable[Meta] = ()) -> None:
        self._metas: dict[str, Meta] = {m["session_id"]: m for m in metas}
        self._sorted: dict[str, list[Key] | Picked] = {
            field: sorted((m[field], sid) for sid, m in self._metas.items()) for field in ("updated_at", "created_at")}
        # The equality indexes are built by the first filtered page, then kept up to date.
        self._status: dict[Any, set[str]] | None = None
        self._keys: dict[str, dict[tuple[Any, ...], set[str]]] | None = None
        # Metas not decoded yet: session id -> its JSON. Pages decode outside the
        # store's lock, so decoding (and anything taking from pending) holds this one.
        self._pending: dict[str, int] = {}
        self._raw: Callable[[int], bytes] = _no_raw
        self._release: Callable[[int], None] = _keep  # raw(i) will not be asked again: its bytes may go
        self._rest_at = 0  # pending this small after single decodes: decode the rest at once
        self._decoding = threading.Lock()

    @classmethod
    def assemble(cls, metas: dict[str, Meta], pending: dict[str, int], raw: Callable[[int], bytes],
                 by_updated: list[Key] | Picked, by_created: list[Key] | Picked,
                 release: Callable[[int], None] | None = None) -> MetaCatalog:
        """``metas`` decoded, plus the sessions of ``pending`` (id -> ``i``), whose
        meta is the JSON ``raw(i)``; ``by_updated``/``by_created`` are every one's
        sort keys, sorted (the caller vouches they agree with the metas). ``release(i)``
        is called once ``raw(i)`` has been decoded for good."""
        catalog = cls()
        catalog._metas, catalog._pending, catalog._raw = dict(metas), pending, raw
        catalog._release = release or _keep
        # (a small catalog stays lazy to the last meta: its bytes cost nothing worth a decode)
        catalog._rest_at = len(pending) // 2 if len(pending) >= 2 * DECODE_CHUNK else 0
        catalog._sorted = {"updated_at": by_updated, "created_at": by_created}
        return catalog

    def _writable_keys(self, field: str) -> list[Key]:
        keys = self._sorted[field]
        if not isinstance(keys, list):
            keys = self._sorted[field] = keys.materialize()
        return keys

    def _decoded(self, session_id: str) -> Meta | None:
        """A meta, decoded now if it was pending (safe without the store's lock).

        A miss always takes the decoding lock: a decode on another thread may
        have taken the meta out of ``pending`` without having put it into
        ``_metas`` yet, and a writer that then saw it nowhere would put its
        new meta only to have the decode write the old one over it."""
        meta = self._metas.get(session_id)
        if meta is None:
            with self._decoding:
                meta = self._metas.get(session_id)
                i = self._pending.get(session_id) if meta is None else None
                if i is not None:
                    meta = self._metas[session_id] = shared_keys(loads(self._raw(i)))  # kept for good: keys shared
                    del self._pending[session_id]  # after it is in _metas: a reader always finds it in one
                    self._release(i)
                    if not self._pending:
                        self._raw = _no_raw  # the last one: the index's bytes are no longer needed
                    elif len(self._pending) <= self._rest_at:
                        # Half decoded one at a time (a walk of every page): the rest at once, so the
                        # index's bytes go now instead of all of them beside every decoded meta.
                        self._decode_pending()
        return meta

    def _decode_all(self) -> None:
        """Every pending meta, a chunk per decode (:func:`decode_many`)."""
        if self._pending:
            with self._decoding:
                self._decode_pending()

    def _decode_pending(self) -> None:
        """:meth:`_decode_all`, the decoding lock held."""
        pending = self._pending
        if pending:
            decoded = map(shared_keys, decode_many(self._raw, pending.values(), self._release))  # kept: keys shared
            self._metas.update(zip(pending, decoded, strict=True))
            self._pending = {}  # emptied only once they are in _metas (see _decoded)
            self._raw = _no_raw  # the index's bytes are no longer needed

    # -- the mapping ---------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._metas) + len(self._pending)

    def __contains__(self, session_id: object) -> bool:
        # pending first: a decode puts a meta into _metas before taking it out of pending
        return session_id in self._pending or session_id in self._metas

    def get(self, session_id: str) -> Meta | None:
        return self._decoded(session_id)

    def values(self) -> list[Meta]:
        self._decode_all()
        return list(self._metas.values())

    def put(self, meta: Meta) -> None:
        sid = meta["session_id"]
        old = self._decoded(sid)
        if old is meta:
            return
        self._metas[sid] = meta
        for field in self._sorted:
            keys = self._writable_keys(field)
            new_key = (meta[field], sid)
            if old is not None:
                old_key = (old[field], sid)
                if old_key == new_key:
                    continue
                if keys and keys[-1] == old_key and (len(keys) == 1 or keys[-2] < new_key):
                    keys[-1] = new_key  # the session written last, written again: it stays last
                    continue
                _remove(keys, old_key)
            if not keys or keys[-1] < new_key:
                keys.append(new_key)
            else:
                bisect.insort(keys, new_key)
        if self._status is not None and (old is None or old.get("status") != meta.get("status")):
            if old is not None:
                self._status[old.get("status")].discard(sid)
            self._status.setdefault(meta.get("status"), set()).add(sid)
        if self._keys is not None:
            old_md, new_md = (old or {}).get("metadata"), meta.get("metadata")
            if old is None or (old_md is not new_md and old_md != new_md):
                if old is not None:
                    self._unindex_metadata(sid, old_md)
                self._index_metadata(sid, new_md)

    def remove(self, session_id: str) -> None:
        self._decoded(session_id)
        old = self._metas.pop(session_id, None)
        if old is None:
            return
        for field in self._sorted:
            _remove(self._writable_keys(field), (old[field], session_id))
        if self._status is not None:
            self._status[old.get("status")].discard(session_id)
        if self._keys is not None:
            self._unindex_metadata(session_id, old.get("metadata"))

    # -- pages -------------------------------------------------------------------

    def ordered(self, order: str, after: Key | None, status: str | None = None,
                metadata: dict[str, Any] | None = None) -> Iterator[Meta]:
        """Metas in ``order`` strictly after the cursor key ``after``: every
        one matching ``status`` and ``metadata`` (and maybe others: the
        caller applies its rule). The keys are snapshot here (call it under
        the store's lock); the caller may consume the iterator without it."""
        field, descending = ORDERS[order]
        candidates = self._candidates(status, metadata)
        keys: Sequence[Key]
        if candidates is not None and len(candidates) * 8 < len(self):
            keys = sorted((m[field], sid) for sid in candidates if (m := self._metas.get(sid)) is not None)
            candidates = None  # already narrowed
        else:
            sorted_keys = self._sorted[field]
            # A snapshot: a C-level copy (cheap next to a page), or the recorded order itself (immutable)
            keys = list(sorted_keys) if isinstance(sorted_keys, list) else sorted_keys
        if descending:
            end = bisect.bisect_left(keys, after) if after is not None else len(keys)
            positions: range = range(end - 1, -1, -1)
        else:
            start = bisect.bisect_right(keys, after) if after is not None else 0
            positions = range(start, len(keys))
        return self._walk(keys, positions, candidates)

    def _walk(self, keys: Sequence[Key], positions: range, candidates: set[str] | None) -> Iterator[Meta]:
        metas, decoded = self._metas, self._decoded
        for i in positions:
            sid = keys[i][1]
            if candidates is not None and sid not in candidates:
                continue
            meta = metas.get(sid) or decoded(sid)
            if meta is not None:
                yield meta

    def page(self, order: str, after: Key | None, limit: int, match: Callable[[Meta], bool], *,
             status: str | None = None, metadata: dict[str, Any] | None = None) -> tuple[list[Meta], bool]:
        """Up to ``limit`` metas that ``match`` from :meth:`ordered`, and whether another follows."""
        out: list[Meta] = []
        for meta in self.ordered(order, after, status, metadata):
            if match(meta):
                if len(out) == limit:
                    return out, True
                out.append(meta)
        return out, False

    def _candidates(self, status: str | None, metadata: dict[str, Any] | None) -> set[str] | None:
        sets: list[set[str]] = []
        if status is not None or metadata:
            self._decode_all()  # the equality indexes see every meta
        if status is not None:
            if self._status is None:
                self._status = {}
                for sid, m in self._metas.items():
                    self._status.setdefault(m.get("status"), set()).add(sid)
            sets.append(self._status.get(status, set()))
        if metadata and self._keys is None:
            self._keys = {}
            for sid, m in self._metas.items():
                self._index_metadata(sid, m.get("metadata"))
        for key, value in (metadata or {}).items():
            assert self._keys is not None
            sets.append(self._keys.get(key, {}).get(bucket(value), set()))
        if not sets:
            return None
        sets.sort(key=len)
        out = set(sets[0])
        for other in sets[1:]:
            out &= other
        return out

    # -- indexing ------------------------------------------------------------------

    def _index_metadata(self, sid: str, metadata: Any) -> None:
        if isinstance(metadata, dict) and self._keys is not None:
            for key, value in metadata.items():
                self._keys.setdefault(key, {}).setdefault(bucket(value), set()).add(sid)

    def _unindex_metadata(self, sid: str, metadata: Any) -> None:
        if isinstance(metadata, dict) and self._keys is not None:
            for key, value in metadata.items():
                by_value = self._keys.get(key)
                if by_value is not None:
                    holders = by_value.get(bucket(value))
                    if holders is not None:
                        holders.discard(sid)
                        if not holders:
                            del by_value[bucket(value)]


class Picked(Sequence[Key]):
    """The sort keys ``(column[i], ids[i])`` for ``i`` in ``positions``, made
    one at a time as a bisect or a page reads them (a cold page reads a few
    dozen of them); :meth:`materialize` lists them all, for a write."""

    def __init__(self, column: Sequence[int], ids: Sequence[str], positions: Sequence[int]) -> None:
        self._column, self._ids, self._positions = column, ids, positions

    def __len__(self) -> int:
        return len(self._positions)

    @overload
    def __getitem__(self, i: int) -> Key: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Key]: ...
    def __getitem__(self, i: int | slice) -> Key | Sequence[Key]:
        if isinstance(i, slice):
            return self.materialize()[i]
        p = self._positions[i]
        return self._column[p], self._ids[p]

    def materialize(self) -> list[Key]:
        positions = self._positions
        if len(positions) < 2:  # itemgetter of one position returns the item, not a tuple
            return [(self._column[p], self._ids[p]) for p in positions]
        pick = operator.itemgetter(*positions)
        return list(zip(pick(self._column), pick(self._ids), strict=True))


# Metas per decode of many: one JSON array of all of them (100k: ~30 MiB of JSON, copied twice to
# frame it, beside the index's own bytes and the decoded metas) made the first filtered list's peak
# exceed the stated memory bound (issue 25); a chunk keeps that copy small and C-speed still. Small:
# orjson's parser takes a working arena of several times its input while it decodes.
DECODE_CHUNK = 256


def decode_many(raw: Callable[[int], bytes], positions: Iterable[int],
                release: Callable[[int], None] | None = None) -> Iterator[Meta]:
    """The metas ``raw(i)`` for ``positions``, in order, decoded :data:`DECODE_CHUNK` at a time
    (``release(i)`` for each once its chunk is decoded)."""
    chunk: list[bytes] = []
    done: list[int] = []
    for i in positions:
        chunk.append(raw(i))
        done.append(i)
        if len(chunk) == DECODE_CHUNK:
            decoded = loads(b"[" + b",".join(chunk) + b"]")
            chunk.clear()
            if release is not None:
                for j in done:
                    release(j)
            done.clear()
            yield from decoded
    if chunk:
        decoded = loads(b"[" + b",".join(chunk) + b"]")
        if release is not None:
            for j in done:
                release(j)
        yield from decoded


def _keep(i: int) -> None:
    """The default release: the bytes are the caller's to keep or drop."""


def _no_raw(i: int) -> bytes:
    raise KeyError(i)


def _remove(keys: list[Key], key: Key) -> None:
    i = bisect.bisect_left(keys, key)
    if i < len(keys) and keys[i] == key:
        del keys[i]
