"""The filesystem adapter: one append-only JSONL file per session under a data_dir.

:class:`FsStore` is the adapter (a facade over its parts: see :mod:`._store`). The
modules, grouped by job:

* format: ``_records`` (the JSONL records), ``_sizes`` (a commit's bytes and sizes),
  ``_encoding`` (ids as file names), ``_shared_keys`` (metas sharing their key strings),
  ``_sidecar_format`` (the index sidecar's bytes);
* files and locks: ``_fileops`` (the os seam), ``_opener`` (log names and openers),
  ``_lock`` (one owner per data_dir), ``_casefold``, ``_descriptors`` (kept fds, shared
  fsyncs), ``_logfiles`` (each session's files), ``_tail`` (reading a log from its end);
* writer: ``_writer`` (one commit's append), ``_group_commit`` (fsyncs shared by waiters);
* index: ``_sidecar`` (per-session index), ``_lazy``, ``_lazy_bodies``, ``_lazy_path``
  (entries held as log locations), ``_sessions_index`` (every log's last meta);
* listing: ``_lister`` (the list path), ``_catalog`` (metas in list order),
  ``_cold_list`` (the first list), ``_open_listing`` (what the open saw);
* compaction: ``_compaction`` (when a log is rewritten), ``_rewrite`` (the log budget
  and the rewrite), ``_background`` (rewrites off the caller's path);
* delete: ``_deleter`` (the store's delete), ``_removal`` (whole or not at all);
* attachments: ``_attachments``;
* follow: ``_follower`` (a read-only store following logs), ``_watch`` (its events);
* cache: ``_cache`` (loaded sessions within a byte budget);
* search: ``_search`` (the index a store queries), ``_search_db`` (the persisted FTS5 index).

The names below are the package's public ones: the data CLI reads and writes the
format through them (``SessionState``: what a replay of a log's records builds).
"""

from .._core.state import SessionState
from ._cache import DEFAULT_CACHE_BYTES
from ._datadir import Durability, ReadOnlyStore
from ._encoding import decode_id, encode_id
from ._lock import DataDirLocked, DataDirLost
from ._records import committed_records, decode_record, encode_snapshot, valid_entry, valid_meta
from ._search import SEARCH_DIR
from ._sidecar import INDEX_DIR
from ._store import FsStore

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "INDEX_DIR",
    "SEARCH_DIR",
    "DataDirLocked",
    "DataDirLost",
    "Durability",
    "FsStore",
    "ReadOnlyStore",
    "SessionState",
    "committed_records",
    "decode_id",
    "decode_record",
    "encode_id",
    "encode_snapshot",
    "valid_entry",
    "valid_meta",
]
