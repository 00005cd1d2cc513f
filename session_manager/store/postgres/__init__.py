"""The postgres storage adapter (optional extra ``postgres``: psycopg 3 + psycopg_pool).

Modules: ``store`` (assembles :class:`PostgresStore` from ``core``,
``transactions``, ``reads`` and ``writes``), ``settings`` (how to connect),
``links`` (jump pointers of new entries), ``path`` (the lazily read active
path), ``outbox`` (events across instances), ``schema`` (versioned
migrations), ``keys`` and ``values`` (how ids and values are stored),
``secrets`` (password redaction), ``build`` (from a configuration value).

The two names are imported on first use, so the modules that need no
psycopg (``keys``, ``values``, ``path``) serve the sqlite adapter without
the extra installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .store import PostgresSettings, PostgresStore

__all__ = ["PostgresSettings", "PostgresStore"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import store

        return getattr(store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
