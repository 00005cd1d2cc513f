"""The sqlite storage adapter (stdlib ``sqlite3``): several processes on one machine.

Modules: ``store`` (assembles :class:`SqliteStore` from ``core``,
``transactions``, ``reads`` and ``writes``), ``settings`` (the file, its
durability, the ``sqlite:///`` URI), ``schema`` (versioned migrations),
``outbox`` (events across processes), ``build`` (from a configuration value
or a URI). Ids and values are stored as the postgres adapter stores them
(its ``keys`` and ``values``), and paths are read by its window reader.
"""

from .settings import SqliteSettings
from .store import SqliteStore

__all__ = ["SqliteSettings", "SqliteStore"]
