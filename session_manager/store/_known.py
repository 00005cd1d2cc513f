"""Kept for the imports of the adapters and the worker until they read
:mod:`._core.known` (the known-sessions set moved there)."""

from ._core.known import KnownSessions

__all__ = ["KnownSessions"]
