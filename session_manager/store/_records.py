"""Kept for the SQL adapters' imports until they read :mod:`._core.codec` (the codec
moved there; the fs record format is :mod:`.fs._records`)."""

from ._core.codec import encode_line as _line
from ._core.codec import loads

__all__ = ["_line", "loads"]
