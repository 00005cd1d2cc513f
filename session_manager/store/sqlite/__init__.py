"""The sqlite storage adapter (stdlib ``sqlite3``): several processes on one machine.

Modules: ``store`` (:class:`SqliteStore`, a facade over the parts below),
``core`` (the datastore every part is handed: connections, failure
mapping), ``transactions``, ``reads``, ``writes``, ``settings`` (the file,
its durability, the ``sqlite:///`` URI), ``schema`` (versioned migrations),
``outbox`` (events across processes), ``path`` (a path window as one range
scan), ``build`` (from a URI). Ids and values are stored as the postgres
adapter stores them, and paths are read by the same window reader: both
adapters share those (:mod:`..sql`).
"""

from .settings import SqliteSettings
from .store import SqliteStore

__all__ = ["SqliteSettings", "SqliteStore"]
