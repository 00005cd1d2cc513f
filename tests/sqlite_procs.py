"""Child processes for the sqlite multi-process tests (``python -m tests.sqlite_procs ROLE ...``).

- ``append URI SID PREFIX N [DURABILITY]``: N appends (entry ids PREFIX-0 ...), one id
  printed per acknowledged append (flushed: what the parent reads was acknowledged).
- ``forever URI SID PREFIX [DURABILITY]``: appends until killed, printing each acknowledged id.
- ``step URI SID PREFIX``: one append per line on stdin (entry ids PREFIX-0 ...),
  printing each acknowledged id; ends with stdin.
- ``read URI SID``: for each id on stdin, reads it back at once and prints
  ``ok ID`` or ``missing ID``.
- ``observe URI SECONDS [RETENTION_S]``: observes every event function for
  SECONDS after printing ``ready``, then prints each event as one JSON line
  and ``done`` (RETENTION_S: the outbox retention, default the adapter's).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import session_manager
from session_manager._wire.events import EVENT_FUNCTIONS
from session_manager.store.sqlite import SqliteSettings, SqliteStore
from session_manager.store.sqlite.settings import path_of


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def _append(uri: str, sid: str, prefix: str, count: int | None, durability: str = "flush") -> None:
    with session_manager.open(uri, durability=durability) as sm:  # type: ignore[arg-type]
        i = 0
        while count is None or i < count:
            entry_id = f"{prefix}-{i}"
            sm.append(sid, message=user(entry_id), entry_id=entry_id)
            print(entry_id, flush=True)
            i += 1


def _step(uri: str, sid: str, prefix: str) -> None:
    with session_manager.open(uri) as sm:
        for i, _ in enumerate(sys.stdin):
            entry_id = f"{prefix}-{i}"
            sm.append(sid, message=user(entry_id), entry_id=entry_id)
            print(entry_id, flush=True)


def _read(uri: str, sid: str) -> None:
    with session_manager.open(uri) as sm:
        for line in sys.stdin:
            entry_id = line.strip()
            try:
                sm.call("session::get-message", {"session_id": sid, "entry_id": entry_id})
                print("ok", entry_id, flush=True)
            except session_manager.SessionError:
                print("missing", entry_id, flush=True)


def _observe(uri: str, seconds: float, retention_s: float | None) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    store = None
    if retention_s is not None:
        store = SqliteStore(SqliteSettings(path=path_of(uri), outbox_retention_s=retention_s))
    with session_manager.open(None if store else uri, store=store) as sm:
        for fid in EVENT_FUNCTIONS:
            sm.observe({"function_id": fid}, lambda e, fid=fid: seen.append((fid, e)))
        print("ready", flush=True)
        time.sleep(seconds)
    for fid, payload in seen:
        print(json.dumps([fid, payload]), flush=True)
    print("done", flush=True)


def main(argv: list[str]) -> None:
    role, uri, *rest = argv
    if role == "append":
        _append(uri, rest[0], rest[1], int(rest[2]), *rest[3:4])
    elif role == "forever":
        _append(uri, rest[0], rest[1], None, *rest[2:3])
    elif role == "step":
        _step(uri, rest[0], rest[1])
    elif role == "read":
        _read(uri, rest[0])
    elif role == "observe":
        _observe(uri, float(rest[0]), float(rest[1]) if len(rest) > 1 else None)
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main(sys.argv[1:])
