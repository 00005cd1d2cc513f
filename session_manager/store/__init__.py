"""Storage adapters behind one small interface."""

from .base import Commit, SessionStore
from .fs import FsStore
from .memory import MemoryStore
from .path import EntryPath

__all__ = ["Commit", "EntryPath", "FsStore", "MemoryStore", "SessionStore"]
