"""Storage adapters behind one small interface."""

from .base import Commit, SessionStore
from .fs import FsStore
from .memory import MemoryStore

__all__ = ["Commit", "FsStore", "MemoryStore", "SessionStore"]
