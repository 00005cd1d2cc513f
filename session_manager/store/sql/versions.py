"""A SQL store's schema version refused: one wording for both adapters, for
a writable open (a newer release's schema) and a read-only one (which never
migrates)."""

from __future__ import annotations

from ...errors import StoreError

__all__ = ["newer", "older_read_only"]


def newer(where: str, version: int, current: int) -> StoreError:
    """``where`` (e.g. ``sqlite: PATH``) holds a schema a newer release wrote."""
    return StoreError(f"{where} is at schema version {version}, newer than this session-manager's {current}: "
                      "a newer release wrote it; run that release (nothing was written)")


def older_read_only(where: str, version: int, current: int) -> StoreError:
    """``where`` holds an older schema, and a read-only open never migrates."""
    return StoreError(f"{where} is at schema version {version}, older than this session-manager's {current}: "
                      "a read-only open never migrates; open it writable once with this release (or run a "
                      "writer of it) to migrate it, then open it read-only (nothing was written)")
