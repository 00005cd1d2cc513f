"""Storage: the interface the domain needs and its adapters.

:class:`SessionStore` is the interface (provisional: see its docstring),
:class:`Commit` one mutation, :class:`EntryPath` the active-path view stores
hand out. Adapters: :class:`FsStore` (JSONL files, the reference's format),
:class:`MemoryStore` (nothing durable) and :class:`BridgeStore` (through a
main instance's ``session::store::*``), each in a package of its own (``fs``,
``postgres``, ``sqlite``); ``_core`` holds what they share. Modules starting
with ``_`` are private.
"""

from typing import TYPE_CHECKING, Any

from .base import Commit, SessionStore
from .memory import MemoryStore
from .path import EntryPath

if TYPE_CHECKING:
    from .bridge import BridgeStore
    from .fs import DEFAULT_CACHE_BYTES, FsStore


def __getattr__(name: str) -> Any:
    # The bridge client (and the store protocol it speaks) loads on first use:
    # only a bridge-mode worker needs it, and `import session_manager` stays cheap.
    if name == "BridgeStore":
        from .bridge import BridgeStore

        return BridgeStore
    if name in ("FsStore", "DEFAULT_CACHE_BYTES"):
        # The fs adapter loads on first use too: the memory adapter and the interface need none of it.
        from . import fs

        return getattr(fs, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "BridgeStore",
    "Commit", "EntryPath", "FsStore", "MemoryStore", "SessionStore"]
