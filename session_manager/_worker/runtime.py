"""One runtime: the store and service built from one adapter value, and the
events that replay a store's state to observers after an adapter swap
(streamed one session at a time, so a large store is never held as one
list of events)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from .._service.service import SessionService
from .._wire import events as ev
from .._wire.events import Event
from ..store.base import Meta, SessionStore
from ..store.fs import DataDirLocked, FsStore
from . import bridge_link as br
from . import config_client as cfg
from .config_value import BridgeAdapter, FsAdapter, PostgresAdapter, SqliteAdapter, WorkerConfig, resolve_data_dir


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
        try:
            from ..store.postgres.build import build_postgres  # the optional extra
        except ImportError as e:
            raise cfg.BuildError(f"adapter postgres needs the extra 'session-manager[postgres]' ({e})") from None
        return build_postgres(adapter.config)
    if isinstance(adapter, SqliteAdapter):
        from ..store.sqlite.build import build_sqlite

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




def resync_batches(store: SessionStore, old_metas: list[Meta], now_ms: int) -> Iterator[list[Event]]:
    """The new store's state as events, one list per session (deletes first)."""
    metas = store.list_metas()
    current = {m["session_id"] for m in metas}
    gone = [ev.deleted(m["session_id"], now_ms, m.get("metadata")) for m in old_metas
            if m["session_id"] not in current]
    if gone:
        yield gone
    for meta in metas:
        sid = meta["session_id"]
        metadata = meta.get("metadata")
        batch = [ev.created(meta)]
        for entry in store.entries(sid):
            # Added for every entry (an observer may never have seen it), then
            # the current revision for streamed ones, so highest-revision wins.
            batch.append(ev.message_added(sid, entry, metadata))
            if entry.get("kind") == "message" and entry.get("revision", 0) > 0:
                batch.append(ev.message_updated(sid, entry, entry.get("origin"), entry["timestamp"], metadata))
        yield batch
