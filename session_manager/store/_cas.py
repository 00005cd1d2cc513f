"""Kept for the imports of the bridge and SQL adapters until they read :mod:`._core.cas`
(the CAS rules moved there)."""

from ._core.cas import UNSET, Unset, derive_append_meta, meta_version, resolve

__all__ = ["UNSET", "Unset", "derive_append_meta", "meta_version", "resolve"]
