"""How every ``data`` subcommand opens a data_dir: the one seam.

Reads open the store read-only: safe beside a running worker (no lock, no
write, no compaction). Writes open it writable, which takes the data_dir's
owner lock, so they fail with ``session/storage`` beside a live writer
instead of racing it. A ``postgresql://`` URI in place of the
data_dir opens the postgres adapter (schema ``public``), a ``sqlite:///``
one the sqlite adapter (safe beside running processes: it is made for
several); reads open those read-only too (nothing written, no migration),
so ``export`` and ``import`` move sessions between adapters; a
``ws://`` engine URL reads a main instance's sessions over its engine
(read-only, with its events: ``data serve``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from ..._hosts.embedded import SessionManager
from ..._hosts.embedded import open as open_store
from ...errors import DataDirError as DataDirError  # (re-exported: the old import path keeps working)
from ...store.sqlite.settings import SCHEME, path_of


def open_for(data_dir: str | os.PathLike[str], writable: bool) -> SessionManager:
    """The data_dir as a :class:`SessionManager`: writable (creating it if
    missing, holding its owner lock until closed) or read-only (it must exist)."""
    if is_engine(data_dir):
        if writable:
            raise DataDirError("an engine URL (ws://…) is opened read-only: this command writes")
        from ..._worker.engine_view import open_engine

        with _connect_quietly():
            view = open_engine(os.fspath(data_dir))
        return open_store(store=view, read_only=True)
    if is_uri(data_dir):
        uri = os.fspath(data_dir)
        if uri.startswith(SCHEME) and not writable and not os.path.isfile(path_of(uri)):
            raise DataDirError(f"{uri}: no such database file")  # a read must not create one
        return open_store(uri, read_only=not writable)  # a read writes nothing on any adapter
    path = Path(data_dir)
    if not writable and not path.is_dir():
        raise DataDirError(f"data_dir {os.fspath(data_dir)} does not exist or is not a directory")
    return open_store(path, read_only=not writable)


@contextlib.contextmanager
def _connect_quietly() -> Iterator[None]:
    """While connecting to an engine, the SDK's per-retry warnings ("Connection failed: …", three before
    it gives up) are DEBUG, as the worker has them while its engine is down: an unreachable engine is
    the command's one error line, not four."""
    from ..._worker.main import RETRYING_LOGGERS, QuietWhileDown

    quiet = QuietWhileDown(lambda: False)
    loggers = [logging.getLogger(name) for name in RETRYING_LOGGERS]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


def is_uri(data_dir: str | os.PathLike[str]) -> bool:
    """A database or engine URI (the postgres or sqlite adapter, or a main's engine), not a directory."""
    return os.fspath(data_dir).startswith(("postgresql://", "postgres://", SCHEME)) or is_engine(data_dir)


def is_engine(data_dir: str | os.PathLike[str]) -> bool:
    """A main instance's engine (``ws://``, ``wss://``): its sessions read over the store protocol."""
    return os.fspath(data_dir).startswith(("ws://", "wss://"))
