"""Many small sessions written fast: the store's own bytes for one session, copied with new ids.

Building 100k sessions through ``session::create`` + ``append-many`` takes
minutes; the logs are plain files, so one session is written through the
public API (the template: exactly the bytes the store writes) and every other
session is that file with its session id, entry ids, title, owner and
timestamps replaced by values of the same width. Nothing else differs, so
every log is one the store (and the reference) would have written. No index
sidecars or sessions index are written: the first open builds them, as it
does for a reference-written directory.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from fixtures import message

import session_manager

MESSAGES = 3
# Placeholders of the width of what replaces them (see _template).
_TITLE = "chat 0000000"
_OWNER = "u_00"
_ID = re.compile(rb"[se]_[0-9a-f]{32}")
_TIME = re.compile(rb"\b1[0-9]{12}\b")  # millisecond timestamps (13 digits until 2286)


def _template() -> tuple[bytes, list[bytes], list[bytes]]:
    """One session's log as the store writes it; its distinct ids and timestamps in order of appearance."""
    with tempfile.TemporaryDirectory() as tmp:
        with session_manager.open(tmp) as sm:
            sid = sm.call("session::create", {"title": _TITLE, "metadata": {"owner": _OWNER}})["session_id"]
            sm.call("session::append-many", {"session_id": sid, "messages": [message(i) for i in range(MESSAGES)]})
        (log,) = [p for p in Path(tmp).iterdir() if p.suffix == ".jsonl"]
        raw = log.read_bytes()
    ids = list(dict.fromkeys(_ID.findall(raw)))
    times = list(dict.fromkeys(_TIME.findall(raw)))
    assert len(ids) == 1 + MESSAGES and ids[0].startswith(b"s_"), ids
    return raw, ids, times


def write_sessions(where: Path, count: int, base_ms: int = 1_700_000_000_000) -> int:
    """``count`` sessions under ``where`` (created ``n`` ms after ``base_ms``,
    owners ``u_00``..``u_19``); returns the bytes written."""
    raw, ids, times = _template()
    assert raw.count(_TITLE.encode()) and raw.count(_OWNER.encode())
    where.mkdir(parents=True, exist_ok=True)
    pattern = re.compile(b"|".join(re.escape(t) for t in [*ids, *times, _TITLE.encode(), _OWNER.encode()]))
    total = 0
    for n in range(count):
        sub = {old: f"{old[:2].decode()}{n:012x}{i:020x}".encode() for i, old in enumerate(ids)}
        for k, old in enumerate(times):
            sub[old] = str(base_ms + 10 * n + k).encode()
        sub[_TITLE.encode()] = f"chat {n:07d}".encode()
        sub[_OWNER.encode()] = f"u_{n % 20:02d}".encode()
        data = pattern.sub(lambda m, table=sub: table[m.group(0)], raw)
        name = sub[ids[0]].decode() + ".jsonl"
        fd = os.open(where / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        total += len(data)
    return total
