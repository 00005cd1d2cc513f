"""The postgres storage adapter (optional extra ``postgres``: psycopg 3 + psycopg_pool).

Modules: ``store`` (:class:`PostgresStore`, a facade over the parts
below), ``core`` (the datastore every part is handed: pool, deadline,
failure mapping), ``transactions``, ``reads``, ``writes``, ``optimistic``
and ``plan`` (a mutation in one round trip through ``sm_apply``),
``settings`` (how to connect) and ``defaults``, ``links`` (jump pointers of
new entries), ``outbox`` (events across instances), ``schema`` (versioned
migrations), ``secrets`` (password redaction), ``build`` (from a DSN),
``deadline`` (the watchdog behind ``timeout_ms``), ``in_doubt`` (settling a
commit whose answer was lost). What it shares with the sqlite adapter (ids
and values as stored, the window path reader, the call runner) is in
:mod:`..sql`.

The two names are imported on first use, so ``defaults`` (which the
worker's configuration model reads) needs no psycopg.
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
