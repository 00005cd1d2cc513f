"""The floor of an append: what the contract makes every append do, and nothing else.

The irreducible steps written out inline, with ours' own pieces where the
contract names them: refuse what JSON cannot hold, measure it and take a private copy (``admit_copy``),
validate it strictly (the pydantic
request model: bad input must become ``session/invalid_request`` naming the
field), draw a random UUIDv4 id and the time, build the entry and the meta in
the field order the bytes on disk pin, encode the ``append`` line (orjson), one
``os.write`` on a descriptor kept open (and, with ``fsync``, one ``os.fsync``),
remember the entry, the leaf and the meta in memory, build the response and the
``on-message-added`` event payload, copy the response for the caller. No lock,
no compare-and-set, no index, no compaction accounting, no catalog: a
single-threaded store that cannot fail would need none of them, ours needs all
of them. :meth:`Floor.update` is the same for ``session::update-message``. Used by
``floor_append.py`` and by the append and update workloads of ``run.py``.

With ``bounded``, :meth:`Floor.update` also keeps issue 9's bound the cheapest
crash-safe way there is: it counts the bytes on disk and the live bytes (the
entry's last line and the meta's), and once the log passes the rule our store
uses (``RATIO`` x live + ``SLACK``, :mod:`session_manager.store.fs._rewrite`) it
writes the live state to a temp file in the store's own snapshot form
(``encode_snapshot``: the commit markers and the leaf the reference needs),
fsyncs it (a rename over the log must never expose an empty file), renames it
over the log and reopens it. Nothing else: no index, no directory sync, no
background thread. Live bytes are counted as the store counts them (``_sized``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from session_manager._service.admission import admit_copy
from session_manager._service.limits import Limits
from session_manager._wire import api
from session_manager._wire.dumping import fast_dump
from session_manager._wire.validation import parse_request
from session_manager.clock import SystemClock
from session_manager.ids import UuidIds
from session_manager.store.fs import _rewrite
from session_manager.store.fs._records import encode_snapshot
from session_manager.store.fs._sizes import _entry_size, _meta_size


class Floor:
    """The minimum an append must do, for one session, on one kept descriptor."""

    def __init__(self, path: Path, session_id: str, fsync: bool = False, bounded: bool = False) -> None:
        self.path = str(path)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.fsync = fsync
        self.bounded = bounded
        self.disk = 0  # bytes in the log (bounded only)
        self.rewrites = 0
        self.limits, self.ids, self.clock = Limits(), UuidIds(), SystemClock()
        self.entries: dict[str, dict[str, Any]] = {}
        self.leaf: str | None = None
        self.meta: dict[str, Any] = {"session_id": session_id, "title": "floor", "description": "",
                                     "status": "idle", "created_at": 0, "updated_at": 0, "message_count": 0}

    def append(self, payload: dict[str, Any]) -> dict[str, Any]:
        req = parse_request(api.AppendRequest, admit_copy("session::append", payload, self.limits, mutates=True))
        assert req.message is not None
        entry_id, now, parent = self.ids.entry_id(), self.clock.now_ms(), self.leaf
        entry = {"kind": "message", "id": entry_id, "parent_id": parent, "timestamp": now, "revision": 0,
                 "message": fast_dump(req.message)}
        meta = dict(self.meta)
        meta["updated_at"], meta["message_count"] = now, meta["message_count"] + 1
        os.write(self.fd, b'{"type":"append","entry":' + orjson.dumps(entry) + b',"meta":' + orjson.dumps(meta)
                 + b"}\n")
        if self.fsync:
            os.fsync(self.fd)
        self.entries[entry_id], self.leaf, self.meta = entry, entry_id, meta
        response = {"entry_id": entry_id, "parent_id": parent, "timestamp": now}
        _event = {"session_id": req.session_id, "entry_id": entry_id, "parent_id": parent,
                  "message": entry["message"], "timestamp": now}
        return dict(response)

    def update(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The floor of ``session::update-message`` (a streamed token): admit and
        validate strictly, find the entry and check what the contract checks, build
        the new revision and the meta, encode the two lines of an update exactly as
        the fs store writes them (entry then meta, sharing one commit id), one
        ``os.write``, remember both, build the response and the ``on-message-updated``
        payload. No lock, no compare-and-set, no cache, no compaction."""
        req = parse_request(api.UpdateMessageRequest,
                            admit_copy("session::update-message", payload, self.limits, mutates=True))
        entry = self.entries.get(req.entry_id)
        if entry is None or entry["kind"] != "message":
            raise KeyError(req.entry_id)
        revision = entry["revision"]
        if req.expected_revision is not None and req.expected_revision != revision:
            return {"updated": False, "revision": revision}
        now = self.clock.now_ms()
        message = dict(entry["message"])
        message["content"] = [fast_dump(b) for b in req.content]
        updated = dict(entry)
        updated["revision"], updated["message"] = revision + 1, message
        meta = dict(self.meta)
        meta["updated_at"] = now
        tx = b',"tx":' + orjson.dumps(self.ids.tx_id())
        entry_json, meta_json = orjson.dumps(updated), orjson.dumps(meta)
        data = b"".join((b'{"type":"entry","entry":', entry_json, tx,
                         b'}\n{"type":"meta","meta":', meta_json, tx, b',"tx_n":2}\n'))
        os.write(self.fd, data)
        if self.fsync:
            os.fsync(self.fd)
        self.entries[req.entry_id], self.meta = updated, meta
        if self.bounded:
            self.disk += len(data)
            live = _entry_size(entry_json, updated) + _meta_size(meta_json)
            if self.disk > _rewrite.RATIO * live + _rewrite.SLACK:
                self._rewrite(updated)
        response = {"updated": True, "revision": revision + 1}
        _event = {"session_id": req.session_id, "entry_id": req.entry_id, "message": message,
                  "revision": revision + 1, "origin": req.origin, "timestamp": now,
                  "session_metadata": meta.get("metadata")}
        return dict(response)

    def _rewrite(self, entry: dict[str, Any]) -> None:
        """The live state (the streamed entry, the meta) as the whole log: temp, fsync, rename, reopen."""
        body = encode_snapshot(self.meta, [entry], self.leaf)
        tmp = self.path + _rewrite.TEMP_SUFFIX
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        os.close(self.fd)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self.disk = len(body)
        self.rewrites += 1

    def close(self) -> None:
        os.close(self.fd)
