"""One runtime: the store and service built from one adapter value.
(:func:`resync_batches`, the events that replay a store's state to observers
after an adapter swap, is the store's: re-exported here for the host.)"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .._service.service import SessionService
from ..store.base import SessionStore
from ..store.fs import DataDirLocked, FsStore
from ..store.resync import resync_batches as resync_batches
from . import bridge_link as br
from . import config_client as cfg
from .config_value import BridgeAdapter, FsAdapter, PostgresAdapter, SqliteAdapter, WorkerConfig, resolve_data_dir
from .store_factory import build_postgres, build_sqlite


@dataclass(frozen=True)
class Runtime:
    config: WorkerConfig
    store: SessionStore
    service: SessionService
    bridge: br.Bridge | None = None  # set in bridge mode: the link to the main

    @property
    def is_fs(self) -> bool:
        """A store this process owns: it serves session::store::* and feeds bridges."""
        return self.bridge is None and not self.store.shared


def same_adapter(a: WorkerConfig, b: WorkerConfig) -> bool:
    """Whether two configurations name one store: equal adapters, or fs
    adapters whose data_dirs resolve to one directory (``X``, ``X/``, ``./X``,
    a symlink to it), so a reload never opens a second store on a directory."""
    if a.adapter_value() == b.adapter_value():
        return True
    if not (isinstance(a.adapter, FsAdapter) and isinstance(b.adapter, FsAdapter)):
        return False
    return os.path.realpath(resolve_data_dir(a.adapter.config.data_dir)) == os.path.realpath(
        resolve_data_dir(b.adapter.config.data_dir))


def build_store(config: WorkerConfig) -> SessionStore:
    """The store an adapter value describes; :class:`~.config_client.BuildError` if it cannot be built."""
    adapter = config.adapter
    if isinstance(adapter, BridgeAdapter):
        raise cfg.BuildError("a bridge store is built by the host (it needs the bridge connection)")
    if isinstance(adapter, PostgresAdapter):
        return build_postgres(adapter.config)
    if isinstance(adapter, SqliteAdapter):
        return build_sqlite(adapter.config, str(resolve_data_dir(adapter.config.path)), config.durability)
    path = resolve_data_dir(adapter.config.data_dir)
    try:
        store = FsStore(path, durability=config.durability, cache_bytes=config.cache_bytes)
        store.list_metas()  # an unreadable data_dir fails here, not at the first call
    except DataDirLocked as e:
        raise cfg.BuildError(str(e)) from None
    except Exception as e:
        raise cfg.BuildError(f"cannot open data_dir {path}: {e}") from e
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        store.close()  # give the data_dir back: this build is abandoned
        raise cfg.BuildError(f"data_dir {path} is not readable and writable")
    return store
