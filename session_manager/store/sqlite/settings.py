"""What the sqlite adapter is opened with: :class:`SqliteSettings`, and the
``sqlite:///`` URI :func:`session_manager.open` takes (SQLAlchemy's form:
three slashes then a relative path, four for an absolute one)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

SCHEME = "sqlite://"
POLL_MS = 25  # how often a follower checks PRAGMA data_version for other processes' commits
OUTBOX_RETENTION_S = 60.0  # outbox rows older than this are pruned even if a dead store never read them
BUSY_TIMEOUT_MS = 30_000  # how long a writer waits for another's transaction before session/storage

Durability = Literal["flush", "fsync"]

__all__ = ["Durability", "SqliteSettings", "is_uri", "path_of"]


@dataclass(frozen=True)
class SqliteSettings:
    """One database file and how it is used (the adapter's ``config``).

    ``durability``: ``flush`` runs ``synchronous=NORMAL`` (a commit survives
    the process being killed; a power loss may lose the last commits, never
    corrupt the file), ``fsync`` runs ``synchronous=FULL`` (a commit survives
    power loss once acknowledged).

    ``read_only``: open the file read-only (``mode=ro``, ``query_only``): it must
    exist at this release's schema version (an older one is refused, never
    migrated), every mutation answers :class:`~session_manager.errors.ReadOnlyStore`,
    other processes' changes are followed without a reader row (:mod:`.watch`) and
    a search reads the index plus what it has not caught up yet (:mod:`.search`)."""

    path: str
    durability: Durability = "flush"
    poll_ms: int = POLL_MS
    outbox_retention_s: float = OUTBOX_RETENTION_S
    busy_timeout_ms: int = BUSY_TIMEOUT_MS
    read_only: bool = False

    def __post_init__(self) -> None:
        # What the worker's configuration refuses, refused here too (a ValueError naming the field).
        if self.durability not in ("flush", "fsync"):
            raise ValueError(f"durability must be 'flush' or 'fsync', not {self.durability!r}")
        for name, value, least in (("poll_ms", self.poll_ms, 1), ("busy_timeout_ms", self.busy_timeout_ms, 0),
                                   ("outbox_retention_s", self.outbox_retention_s, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < least:
                raise ValueError(f"{name}: expected a number of at least {least}, got {value!r}")


def is_uri(value: object) -> bool:
    """Whether ``value`` is a ``sqlite://`` URI (rather than a data_dir)."""
    return isinstance(value, str) and value.startswith(SCHEME)


def path_of(uri: str) -> str:
    """The file a ``sqlite:///relative.db`` / ``sqlite:////abs.db`` URI names;
    :class:`ValueError` naming the form for anything else."""
    rest = uri[len(SCHEME):] if uri.startswith(SCHEME) else None
    if rest is None or not rest.startswith("/") or rest in ("/", "//") or "?" in rest:
        raise ValueError(f"{uri!r}: expected sqlite:///relative/path.db or sqlite:////absolute/path.db")
    return os.fspath(rest[1:])
