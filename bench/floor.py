"""The floor of an append: what the contract makes every append do, and nothing else.

The irreducible steps written out inline, with ours' own pieces where the
contract names them: refuse what JSON cannot hold and measure it (``admit``),
take a private copy and validate it strictly (``json_payload`` + the pydantic
request model: bad input must become ``session/invalid_request`` naming the
field), draw a random UUIDv4 id and the time, build the entry and the meta in
the field order the bytes on disk pin, encode the ``append`` line (orjson), one
``os.write`` on a descriptor kept open (and, with ``fsync``, one ``os.fsync``),
remember the entry, the leaf and the meta in memory, build the response and the
``on-message-added`` event payload, copy the response for the caller. No lock,
no compare-and-set, no index, no compaction accounting, no catalog: a
single-threaded store that cannot fail would need none of them, ours needs all
of them. Used by ``floor_append.py`` and by the append workloads of ``run.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from session_manager._service.admission import admit
from session_manager._service.limits import Limits
from session_manager._wire import api
from session_manager._wire.dumping import fast_dump
from session_manager._wire.validation import json_payload, parse_request
from session_manager.clock import SystemClock
from session_manager.ids import UuidIds


class Floor:
    """The minimum an append must do, for one session, on one kept descriptor."""

    def __init__(self, path: Path, session_id: str, fsync: bool = False) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.fsync = fsync
        self.limits, self.ids, self.clock = Limits(), UuidIds(), SystemClock()
        self.entries: dict[str, dict[str, Any]] = {}
        self.leaf: str | None = None
        self.meta: dict[str, Any] = {"session_id": session_id, "title": "floor", "description": "",
                                     "status": "idle", "created_at": 0, "updated_at": 0, "message_count": 0}

    def append(self, payload: dict[str, Any]) -> dict[str, Any]:
        admit("session::append", payload, self.limits, mutates=True)
        req = parse_request(api.AppendRequest, json_payload(payload))
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

    def close(self) -> None:
        os.close(self.fd)
