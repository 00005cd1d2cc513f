"""Storage: the interface the domain needs and its adapters.

:class:`SessionStore` is the interface (provisional: see its docstring),
:class:`Commit` one mutation, :class:`EntryPath` the active-path view stores
hand out. Adapters: :class:`FsStore` (JSONL files, the reference's format),
:class:`MemoryStore` (nothing durable) and :class:`BridgeStore` (through a
main instance's ``session::store::*``). Modules starting with ``_`` are the
adapters' private helpers.
"""

from typing import TYPE_CHECKING, Any

from ._cache import DEFAULT_CACHE_BYTES
from .base import Commit, SessionStore
from .fs import FsStore
from .memory import MemoryStore
from .path import EntryPath

if TYPE_CHECKING:
    from .bridge import BridgeStore


def __getattr__(name: str) -> Any:
    # The bridge client (and the store protocol it speaks) loads on first use:
    # only a bridge-mode worker needs it, and `import session_manager` stays cheap.
    if name == "BridgeStore":
        from .bridge import BridgeStore

        return BridgeStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "BridgeStore",
    "Commit", "EntryPath", "FsStore", "MemoryStore", "SessionStore"]
