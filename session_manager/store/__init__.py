"""Storage: the interface the domain needs and its adapters.

:class:`SessionStore` is the interface (provisional: see its docstring),
:class:`Commit` one mutation, :class:`EntryPath` the active-path view stores
hand out. Adapters: :class:`FsStore` (JSONL files, the reference's format),
:class:`MemoryStore` (nothing durable) and :class:`BridgeStore` (through a
main instance's ``session::store::*``). Modules starting with ``_`` are the
adapters' private helpers.
"""

from .base import Commit, SessionStore
from .bridge import BridgeStore
from .fs import FsStore
from .memory import MemoryStore
from .path import EntryPath

__all__ = ["BridgeStore", "Commit", "EntryPath", "FsStore", "MemoryStore", "SessionStore"]
