"""How every ``data`` subcommand opens a data_dir: the one seam.

Reads open the store read-only (safe beside a running worker once the fs
store offers ``read_only``); writes open it writable, which takes the
data_dir's owner lock where the store has one, so they fail beside a live
writer instead of racing it. A ``postgresql://`` URI in place of the
data_dir opens the postgres adapter (schema ``public``), so ``export`` and
``import`` move sessions between adapters.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..._hosts.embedded import SessionManager
from ..._hosts.embedded import open as open_store


class DataDirError(Exception):
    """A data_dir the command cannot use (missing, not a directory, held by a writer)."""


def open_for(data_dir: str | os.PathLike[str], writable: bool) -> SessionManager:
    """The data_dir as a :class:`SessionManager`: writable (creating it if
    missing) or for reading (it must exist).

    Until the fs store has a read-only mode this opens writable either way;
    switching is this function's one line.
    """
    if is_uri(data_dir):
        return open_store(os.fspath(data_dir))
    path = Path(data_dir)
    if not writable and not path.is_dir():
        raise DataDirError(f"data_dir {os.fspath(data_dir)} does not exist or is not a directory")
    return open_store(path)


def is_uri(data_dir: str | os.PathLike[str]) -> bool:
    """A database URI (the postgres adapter), not a directory."""
    return os.fspath(data_dir).startswith(("postgresql://", "postgres://"))
