"""The baselines ours is compared with: stdlib sqlite3 and raw ``os.write``.

What a user would pick instead of this store, written the way a careful
user would: sqlite3 in WAL mode on one connection, a row per message,
parameterized statements, a commit per operation, the body being
``json.dumps`` of the same message dict ours is given; raw is one
``os.write`` of those bytes plus a newline to a descriptor kept open
(``fsync`` after it in the fsync workloads). Reads decode what they read
(``json.loads``), as ours returns dicts. ``python bench/run.py --show-baselines``
prints this file.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any, Literal

Synchronous = Literal["NORMAL", "FULL"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages (session_id, seq);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    owner TEXT,
    meta TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_updated ON sessions (updated_at);
CREATE INDEX IF NOT EXISTS sessions_by_created ON sessions (created_at);
CREATE INDEX IF NOT EXISTS sessions_by_owner ON sessions (owner, updated_at);
"""


class Sqlite:
    """One sqlite3 connection in WAL mode with the given ``synchronous``."""

    def __init__(self, path: Path, synchronous: Synchronous = "NORMAL") -> None:
        self.conn = sqlite3.connect(path, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.conn.executescript(SCHEMA)

    # -- writes: one commit per operation --------------------------------------------

    def append(self, session_id: str, message: dict[str, Any]) -> int:
        cur = self.conn.execute("INSERT INTO messages (session_id, body) VALUES (?, ?)",
                                (session_id, json.dumps(message)))
        self.conn.commit()
        return cur.lastrowid or 0

    def update(self, seq: int, message: dict[str, Any]) -> None:
        self.conn.execute("UPDATE messages SET body = ? WHERE seq = ?", (json.dumps(message), seq))
        self.conn.commit()

    def load_sessions(self, metas: list[dict[str, Any]]) -> None:
        """Fixture setup in one transaction; ``created_at``/``updated_at`` columns are the creation rank."""
        with self.conn:
            self.conn.executemany(
                "INSERT OR REPLACE INTO sessions (session_id, created_at, updated_at, owner, meta)"
                " VALUES (?, ?, ?, ?, ?)",
                ((m["session_id"], rank, rank, (m.get("metadata") or {}).get("owner"), json.dumps(m))
                 for rank, m in enumerate(metas, 1)))

    # -- reads --------------------------------------------------------------------------

    def tail(self, session_id: str, limit: int) -> list[dict[str, Any]]:
        got = self.conn.execute("SELECT body FROM messages WHERE session_id = ? ORDER BY seq DESC LIMIT ?",
                                (session_id, limit)).fetchall()
        return [json.loads(body) for (body,) in reversed(got)]

    def get(self, seq: int) -> dict[str, Any]:
        (body,) = self.conn.execute("SELECT body FROM messages WHERE seq = ?", (seq,)).fetchone()
        return json.loads(body)  # type: ignore[no-any-return]

    def recent(self, limit: int) -> list[dict[str, Any]]:
        got = self.conn.execute("SELECT meta FROM sessions ORDER BY updated_at DESC LIMIT ?", (limit,)).fetchall()
        return [json.loads(meta) for (meta,) in got]

    def by_owner(self, owner: str, limit: int) -> list[dict[str, Any]]:
        got = self.conn.execute("SELECT meta FROM sessions WHERE owner = ? ORDER BY updated_at DESC LIMIT ?",
                                (owner, limit)).fetchall()
        return [json.loads(meta) for (meta,) in got]

    def page(self, after_created: int, limit: int) -> list[dict[str, Any]]:
        """Keyset pagination in creation order (created_at is unique in the fixtures)."""
        got = self.conn.execute("SELECT meta FROM sessions WHERE created_at > ? ORDER BY created_at LIMIT ?",
                                (after_created, limit)).fetchall()
        return [json.loads(meta) for (meta,) in got]

    def close(self) -> None:
        self.conn.close()


class RawLog:
    """An append-only file of JSON lines on a descriptor kept open."""

    def __init__(self, path: Path, fsync: bool = False) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.fsync = fsync

    def append(self, message: dict[str, Any]) -> None:
        os.write(self.fd, json.dumps(message).encode() + b"\n")
        if self.fsync:
            os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


def last_lines(path: Path, n: int, chunk: int = 1 << 16) -> list[bytes]:
    """The last ``n`` complete lines of a file, reading backwards from its end."""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        data = b""
        pos = end
        while pos > 0 and data.count(b"\n") <= n:
            step = min(chunk, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    return data.splitlines()[-n:]


def raw_tail(path: Path, n: int) -> list[dict[str, Any]]:
    return [json.loads(line) for line in last_lines(path, n)]


def raw_replay(path: Path) -> list[dict[str, Any]]:
    """Read a whole log and decode every line: the floor of any replay of it."""
    with open(path, "rb") as f:
        return [json.loads(line) for line in f.read().splitlines()]


def raw_recent(directory: Path, limit: int) -> list[dict[str, Any]]:
    """The ``limit`` most recently updated sessions when each file's last line is its meta."""
    metas = [json.loads(last_lines(directory / name, 1, chunk=4096)[0]) for name in os.listdir(directory)]
    metas.sort(key=lambda m: m["updated_at"], reverse=True)
    return metas[:limit]
