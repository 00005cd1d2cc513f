"""A commit's bytes together with the sizes compaction accounting needs.

:func:`._records.encode_commit` writes an append (or append-many, fork) as
entry lines and a last ``append`` line carrying the leaf's entry and the
meta; the fs store then charged each entry and the meta to the log's
budget (:mod:`._rewrite`) by encoding them a second time
(:func:`._records.snapshot_size`, :func:`._records.meta_size`). Here each
entry and the meta are encoded once and the lines put together from those
pieces: compact JSON of an object is its members' JSON joined, so the
bytes are the ones ``encode_commit`` writes, and the sizes fall out of the
pieces' lengths. Anything orjson cannot encode exactly, and every other
commit shape, goes the general way.
"""

from __future__ import annotations

import orjson

from ..base import Commit, Entry, Meta
from ._records import encode_commit, meta_size, snapshot_size, tx_id

_ENTRY_HEAD = b'{"type":"entry","entry":'
_APPEND_HEAD = b'{"type":"append","entry":'
_META_KEY = b',"meta":'
_META_HEAD = b'{"type":"meta","meta":'
_TX = b',"tx":'
_NEXT_ENTRY = b"}\n" + _ENTRY_HEAD  # between two entry lines' entries
# snapshot_size: an entry line in a snapshot plus its commit marker (the entry id and 34 bytes of it).
_MARKER = 34

_ENTRY_FIXED = len(_ENTRY_HEAD) + 1 + _MARKER  # _entry_size less the entry's JSON and id
_META_FIXED = len(_META_HEAD) + 2  # _meta_size's half less the meta's JSON
_dumps, _Fragment = orjson.dumps, orjson.Fragment

Sizes = tuple[tuple[int, ...], int | None]  # (each entry's snapshot size, the meta's size)


def _entry_size(entry_json: bytes, entry: Entry) -> int:
    """:func:`snapshot_size` of ``entry`` from its JSON."""
    return len(_ENTRY_HEAD) + len(entry_json) + 1 + len(entry["id"]) + _MARKER


def _meta_size(meta_json: bytes) -> int:
    """:func:`meta_size` from the meta's JSON."""
    return 2 * (len(_META_HEAD) + len(meta_json) + 2)


def encode_append(entry: Entry, meta: Meta, data_json: bytes | None) -> tuple[bytes, int, int] | None:
    """An append of one entry (the commit's leaf) with ``meta``: its one ``append`` line
    (``encode_commit``'s bytes), the entry's :func:`snapshot_size` and the meta's
    :func:`meta_size`; ``None`` when orjson cannot encode it exactly (``encode_commit`` decides).
    ``data_json``: as :class:`~..base.Commit`'s."""
    try:
        # The data's JSON spliced in when the caller has it (the bytes orjson writes for it within
        # the entry): a LangGraph checkpoint's ~5 KB of values is not encoded a second time.
        entry_json = _dumps(entry if data_json is None else {**entry, "data": _Fragment(data_json)})
        meta_json = _dumps(meta)
    except TypeError:  # integers past 64 bits, unpaired surrogates
        return None
    # (_entry_size and _meta_size, inline: every append)
    return (b"".join((_APPEND_HEAD, entry_json, _META_KEY, meta_json, b"}\n")),  # one copy, not four
            _ENTRY_FIXED + len(entry_json) + len(entry["id"]), 2 * (_META_FIXED + len(meta_json)))


def encode_sized(commit: Commit) -> tuple[bytes, Sizes]:
    """``encode_commit(commit)`` and, for :meth:`LogBudget` accounting, each
    entry's :func:`snapshot_size` and the meta's :func:`meta_size`."""
    entries, meta = commit.entries, commit.meta
    if len(entries) == 1 and meta is not None and commit.leaf == entries[0]["id"]:  # an append: no lists built
        encoded = encode_append(entries[0], meta, commit.data_json)
        if encoded is not None:
            return encoded[0], ((encoded[1],), encoded[2])
    elif entries and meta is not None and commit.leaf in (None, entries[-1]["id"]):
        try:
            pieces = [orjson.dumps(e) for e in entries]
            meta_json = orjson.dumps(meta)
        except TypeError:  # integers past 64 bits, unpaired surrogates: encode_commit decides
            pass
        else:
            if commit.leaf is None:  # an update (update-message, a label ...): one commit id on every line
                tx = _TX + orjson.dumps(tx_id(commit))  # drawn only now: encode_commit would draw its own
                # One join, no line list: an update-message streams one of these per token.
                data = b"".join((_ENTRY_HEAD, (tx + _NEXT_ENTRY).join(pieces), tx, b"}\n",
                                 _META_HEAD, meta_json, tx, b',"tx_n":%d}\n' % (len(pieces) + 1)))
            else:  # append-many, a fork: the last entry rides in the append line with the meta
                lines = [_ENTRY_HEAD + p + b"}\n" for p in pieces[:-1]]
                lines.append(_APPEND_HEAD + pieces[-1] + _META_KEY + meta_json + b"}\n")
                data = b"".join(lines)
            return data, (tuple(map(_entry_size, pieces, entries)), _meta_size(meta_json))
    data = encode_commit(commit)
    return data, (tuple(snapshot_size(e) for e in entries), None if meta is None else meta_size(meta))
