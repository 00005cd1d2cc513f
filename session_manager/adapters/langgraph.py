"""LangGraph persistence: ``SessionManagerSaver`` is a ``BaseCheckpointSaver``
over an open :class:`~session_manager.SessionManager` (or an
:class:`~session_manager.aio.AsyncSessionManager`)::

    from langgraph.graph import StateGraph
    from session_manager.adapters.langgraph import SessionManagerSaver

    with session_manager.open("./data/sessions") as sm:
        graph = builder.compile(checkpointer=SessionManagerSaver(sm))
        graph.invoke(inputs, {"configurable": {"thread_id": "chat-42"}})

Each thread is the session of the same id; each checkpoint an entry whose
parent entry is its parent checkpoint's, so time travel (replaying or forking
from an earlier checkpoint) makes a branch of the session; pending writes are
entries beside their checkpoint. Layout: :mod:`session_manager.adapters._checkpoints`.

Writes go through the host: the function surface, and for checkpoints and
pending writes its typed append (the same session checks, size limit and
events, without a payload to admit and parse: the saver built it);
reads go through the store the manager serves (the one read the function
surface lacks is every entry on every branch, which ``list`` needs). An
index of each thread, derived from its entries, is kept per saver and
rebuilt whenever the session's ``(created_at, leaf, version)`` is not the one it
was derived at (the version: a value no write of the session leaves twice, so a
leaf set back is no way back), so a reader in another process sees a writer's checkpoints: a
read checks that first; a write does not read, its append lands only while
the session is still as the index saw it (checked where the append reads the
session), and is redone with the index derived again otherwise. A thread is
written by one run at a time, as LangGraph runs them.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._hosts.embedded import SessionManager
from .._service.appending import LeafMoved
from .._service.storage_errors import storage_errors
from ..errors import NOT_FOUND, SessionError, invalid_request, not_found
from ._checkpoints import (
    CHECKPOINT,
    DELETED,
    ROOT,
    ROOT_ID,
    WRITES,
    Base,
    Key,
    ThreadIndex,
    data_json,
    decode_doc,
    encode_docs,
    is_base,
    new_writes,
    pack_values,
    pack_writes,
    serialize_values,
    text,
    unpack,
    value_bytes,
)
from ._kept import MEMO, Kept, footprint
from ._kept import OVERHEAD as KEPT_OVERHEAD
from ._memo import Memo, usable
from ._settle import settled
from ._transcript import _registry as lock_registry
from ._transcript import _session_lock as session_lock
from ._transcript import _SessionLock as SessionLock

__all__ = ["SessionManagerSaver"]

_CACHED_THREADS = 1024  # thread indexes kept per saver (least recently used dropped)
KEPT_BYTES = 64 << 20  # entries' data kept decoded per saver (_kept.py; least recently used dropped)
_CHECKED_ATTEMPTS = 5  # writes checked against a moving session before one unconditional
T = TypeVar("T")
_PAGE = 500
_UNKNOWN = object()  # a version no store gives: an index holding it is derived again at its next read
Names = list[str]  # (the class's own ``list`` method shadows the builtin in its annotations)
Keys = list[Key]
_COPIED = (CHECKPOINT, WRITES, DELETED)  # what copy_thread carries over (the target has its own root)


class SessionManagerSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer storing each thread in the session of the same id.

    ``metadata`` (optional) is the session metadata a new thread's session is
    created with (the tenancy hook: ``session::list`` filters, events, purge);
    ``list(None)`` and ``delete_for_runs`` then see only the sessions that carry it.
    ``serde`` replaces LangGraph's default serializer. ``cache_bytes``: how much of the
    entries' data it wrote or read the saver keeps decoded (least recently used dropped past
    it; 0 keeps none), so a read of them asks the store only whether the thread moved on."""

    def __init__(self, sm: Any, *, metadata: dict[str, Any] | None = None,
                 serde: SerializerProtocol | None = None, cache_bytes: int = KEPT_BYTES) -> None:
        super().__init__(serde=serde)
        self.sm: SessionManager = sm if isinstance(sm, SessionManager) else sm.sync
        self.metadata = dict(metadata) if metadata else None
        self._store = self.sm.service.store
        self._indexes: OrderedDict[str, ThreadIndex] = OrderedDict()
        self._indexes_guard = threading.Lock()
        self._locks = lock_registry(self.sm)  # (held weakly: kept only while in use, or recent)
        if type(cache_bytes) is not int or cache_bytes < 0:
            raise invalid_request(f"cache_bytes: expected a whole number of bytes, 0 or more, got {cache_bytes!r}")
        self._kept = Kept(cache_bytes)
        self._memo = Memo()  # the serializer's bytes of list items (messages) each put reuses

    # -- the thread index ----------------------------------------------------------

    def _lock(self, thread_id: str) -> SessionLock:
        """The session's one lock in this process (shared with every adapter object on it):
        hold it with ``with``, which keeps it (and so its registry entry) until the block ends."""
        ref = self._locks.live.get(thread_id)
        lock = ref() if ref is not None else None
        return session_lock(self.sm, thread_id, self._locks) if lock is None else lock

    def _index(self, thread_id: str) -> ThreadIndex:
        """The thread's index, derived again when the session moved on since (call under the lock)."""
        with self._indexes_guard:
            index = self._indexes.get(thread_id)
        known = index.token[2] if index is not None and index.token is not None else None
        with storage_errors():
            token = self._store.session_token(thread_id, known)
        with self._indexes_guard:
            index = self._indexes.get(thread_id)
            if index is not None and self._still(index, token):
                self._indexes.move_to_end(thread_id)
                return index
        index = ThreadIndex(token=token)
        if token is not None:
            with storage_errors():
                entries = self._store.entries_held(thread_id)
            for entry in entries:
                index.add(entry)
            # Each decoded here anyway: kept, so the reads that follow fetch none again.
            self._kept.seed(thread_id, index.epoch, entries)
            self._charge_bases(thread_id, index)
        with self._indexes_guard:
            self._indexes[thread_id] = index
            while len(self._indexes) > _CACHED_THREADS:
                evicted = self._indexes.popitem(last=False)[0]
                self._kept.uncharge(evicted)
                self._memo.drop(evicted)
        return index

    def _charge_bases(self, thread_id: str, index: ThreadIndex) -> None:
        """Count the index's delta bases in the cache budget (:meth:`._kept.Kept.charge`): past
        it, least recently used first, they are let go (:meth:`ThreadIndex.let_bases_go`)."""
        self._kept.charge(thread_id, index.bases_size(), index.let_bases_go)

    def _still(self, index: ThreadIndex, token: tuple[Any, str | None, Any] | None) -> bool:
        """Whether the session at ``token`` is the one ``index`` holds (then it takes ``token``).
        Its token's version changes with every write of the session and never comes back
        (a leaf set back by ``session::set-active-leaf`` does). After this saver's own writes
        (``index.mine``; each checked that the session was at the index's leaf, not at its
        version) the store is asked which version exactly those commits left: another
        instance's write among them leaves another. A store that cannot tell (postgres:
        ``xmin``) names the version each own write left, or none (:meth:`_write`: the index
        is then derived again); a store naming no versions is taken at the leaf."""
        held = index.token
        if held is None or token is None:
            return held == token
        if index.mine:
            if held[:2] != token[:2] or held[2] is _UNKNOWN:
                return False
            after = self._store.version_after(held[2], index.mine)
            if after is not None and after != token[2]:
                return False
            index.token, index.mine = token, 0
            return True
        return held == token

    def _current(self, thread_id: str) -> ThreadIndex:
        """The index this saver's last write to the thread left, without a read (a write
        made with it checks the session is still as the index saw it: :meth:`_checked`);
        :meth:`_index` when there is none (call under the lock)."""
        with self._indexes_guard:
            index = self._indexes.get(thread_id)
            if index is not None and index.rooted and index.token is not None:
                self._indexes.move_to_end(thread_id)
                return index
        return self._index(thread_id)

    def _checked(self, thread_id: str, index: ThreadIndex, write: Callable[[ThreadIndex, bool], T]) -> T:
        """``write(index, checked)``: a write made with ``index`` that lands only while the
        session is as the index saw it (``checked``: the store checks ``index.token`` where
        the append reads the session). When it moved on (another writer's entries, or it was
        deleted), the index is derived again and the write redone; the last attempt
        unconditionally, as a write after a read always was (call under the lock)."""
        for _ in range(_CHECKED_ATTEMPTS):
            try:
                return write(index, True)
            except LeafMoved:
                pass
            except SessionError as e:
                if e.code != NOT_FOUND:
                    raise
            index = self._index(thread_id)
        return write(index, False)

    def _forget(self, thread_id: str) -> None:
        with self._indexes_guard:
            self._indexes.pop(thread_id, None)
        self._kept.uncharge(thread_id)
        self._memo.drop(thread_id)

    def _append(self, thread_id: str, index: ThreadIndex, custom_type: str, data: Any, parent: str | None,
                entry_id: str | None = None, *, owned: bool = False, checked: bool = False,
                data_json: bytes | None = None) -> str:
        """Append one custom entry and take it into ``index`` (whose token follows the new leaf)."""
        written = self._write(thread_id, index, custom_type, data, parent, entry_id, owned=owned, checked=checked,
                              data_json=data_json)
        index.add({"id": written, "kind": "custom", "custom_type": custom_type, "data": data})
        if custom_type == CHECKPOINT:  # (a copied checkpoint: its line's bases may have changed)
            self._charge_bases(thread_id, index)
        return written

    def _write(self, thread_id: str, index: ThreadIndex, custom_type: str, data: Any, parent: str | None,
               entry_id: str | None = None, *, owned: bool = False, checked: bool = False,
               data_json: bytes | None = None) -> str:
        """Append one custom entry (rooting the thread first if needed); ``index``'s token
        follows the new leaf, the caller takes the entry into it. ``owned``: ``data`` was
        built by :mod:`._checkpoints` (exact JSON, newly made, not kept for changing)
        and is handed to the store as it is, without a private copy, through the host's
        typed append (the thread id passed the session's own checks when it was rooted:
        ``session::ensure``; ``parent`` is an entry id of it); ``checked`` (owned
        only): only while the session is at ``index.token``, else ``LeafMoved``;
        ``data_json`` (owned only): ``data``'s JSON, when made (:func:`._checkpoints.data_json`)."""
        if not index.rooted:
            self._root(thread_id, index)
        if owned:  # the host's typed call: no payload built, admitted or parsed
            assert entry_id is None, "an owned write takes the entry id the store draws"
            at = index.token[:2] if checked and index.token is not None else None
            written = self.sm._append_owned(thread_id, custom_type, data, parent, at=at,
                                            data_json=data_json)
        else:
            payload: dict[str, Any] = {"session_id": thread_id, "custom": {"custom_type": custom_type, "data": data}}
            if parent is not None:
                payload["parent_id"] = parent
            if entry_id is not None:
                payload["entry_id"] = entry_id
            written = str(self.sm.call("session::append", payload)["entry_id"])
        # (one commit more since the token's version: :meth:`_still` asks the store which version it left)
        version, mine = (index.token[2] if index.token else _UNKNOWN), index.mine + 1
        if version is not _UNKNOWN and self._store.version_after(version, 1) is None:
            if version is not None:
                # A store naming no version after own commits by their count (postgres: the row's
                # xmin) names the one this write left when the write itself checked the session
                # was at exactly the index's version; else (checked only at the leaf, which another
                # instance may have set back after its own write; or unchecked) it is unknown, and
                # the index is derived again at the next read.
                left = self._store.version_left(thread_id, version, written)
                version, mine = (_UNKNOWN, 0) if left is None else (left, 0)
            elif not checked:  # (a store naming no versions: its leaf, as ever, but unchecked)
                version = _UNKNOWN
        index.token = (index.token[0] if index.token else None, written, version)
        index.mine = mine
        return written

    def _root(self, thread_id: str, index: ThreadIndex) -> None:
        """Make the thread's session (when there is none) and its root entry, and take them
        into ``index`` (the thread's first write: its tokens read around the root's append
        say where it left the session, so the next read derives nothing again). When the
        session was not as the index saw it, or another write came between, the index
        holds a token no read matches (derived again at the next read)."""
        made = self.sm.call("session::ensure", _dropped_none({"session_id": thread_id, "metadata": self.metadata}))
        with storage_errors():
            before = self._store.session_token(thread_id)
        root = self.sm.call("session::append", {"session_id": thread_id, "entry_id": ROOT_ID,
                                                "custom": {"custom_type": ROOT, "data": None}})
        with storage_errors():
            after = self._store.session_token(thread_id)
        index.rooted = True
        # As the index saw it: the token it was derived at, or (none) a session with no entries yet.
        seen = before is not None and (before == index.token if index.token is not None else before[1] is None)
        if seen and before is not None and after is not None and after[:2] == (before[0], root["entry_id"]):
            left = self._store.version_after(before[2], 1)
            if left is None or left == after[2]:  # (exactly the root's commit; a store that cannot tell: the leaf)
                index.token, index.mine = after, 0
                return
        index.token, index.mine = (made["meta"]["created_at"], root["entry_id"], _UNKNOWN), 0

    # -- reads ---------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its newest in the namespace without a ``checkpoint_id``)."""
        thread_id, ns = _thread(config), _ns(config)
        with self._lock(thread_id):
            index = self._index(thread_id)
            checkpoint_id = get_checkpoint_id(config) or index.latest(ns)
            if checkpoint_id is None or (ns, checkpoint_id) not in index.checkpoints:
                return None
            return self._tuple(thread_id, index, (ns, checkpoint_id))

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of ``config``'s thread (and namespace, and
        checkpoint, when given) or of every thread, whose metadata has the
        ``filter`` values, older than ``before``, at most ``limit``."""
        configurable = (config or {}).get("configurable", {})
        threads = [_thread(config)] if config is not None and "thread_id" in configurable else self._threads()
        ns, wanted = configurable.get("checkpoint_ns"), configurable.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        left = limit
        for thread_id in threads:
            with self._lock(thread_id):
                index = self._index(thread_id)
                keys = sorted(index.checkpoints, key=lambda k: (k[1], k[0]), reverse=True)
                found: list[CheckpointTuple] = []
                for key in keys:
                    if left is not None and len(found) >= left:
                        break
                    if (ns is not None and key[0] != ns) or (wanted and key[1] != wanted) \
                            or (before_id and key[1] >= before_id):
                        continue
                    if filter and not self._matches(thread_id, index, index.checkpoints[key], filter):
                        continue
                    found.append(self._tuple(thread_id, index, key))
            yield from found
            if left is not None:
                left -= len(found)
                if left <= 0:
                    return

    def _threads(self) -> Names:
        """Every session holding a LangGraph thread (with ``metadata``, only those carrying it)."""
        request: dict[str, Any] = {"limit": _PAGE, "order": "created_asc"}
        if self.metadata:
            request["metadata"] = self.metadata
        out: Names = []
        while True:
            page = self.sm.call("session::list", request)
            for meta in page["sessions"]:
                with storage_errors():
                    if self._store.entry_held(meta["session_id"], ROOT_ID) is not None:
                        out.append(meta["session_id"])
            if not page.get("next_cursor"):
                return out
            request["cursor"] = page["next_cursor"]

    def _data(self, thread_id: str, index: ThreadIndex, entry_id: str) -> Any:
        """An entry's data: kept (:mod:`._kept`: ``index`` is current, the caller checked),
        else read and kept."""
        data = self._kept.get(thread_id, index.epoch, entry_id)
        if data is None:
            with storage_errors():
                entry = self._store.entry_held(thread_id, entry_id)
            if entry is None:  # deleted (by another instance) since the index was read
                raise not_found(thread_id)
            data = entry["data"]
            self._kept.keep(thread_id, index.epoch, entry_id, data, footprint(data))
        return data

    def _base_text(self, thread_id: str, holder: str, base_id: str, channel: str) -> str:
        """The text of the value stored whole that a delta (of ``channel``, in entry ``holder``) is
        of: entry ``base_id``'s. In a path copied by ``session::fork`` (new entry ids) that id is
        gone, and the base is the nearest checkpoint above ``holder`` holding a base of the channel
        (:func:`is_base`: the delta was made of the newest one on its line, :attr:`ThreadIndex.bases`)."""
        with storage_errors():
            found = self._store.entry_held(thread_id, base_id)
            at = None if found is not None else self._store.entry_held(thread_id, holder)
            while found is None and at is not None and at.get("parent_id"):
                at = self._store.entry_held(thread_id, at["parent_id"])
                value = at.get("data", {}).get("values", {}).get(channel) \
                    if at is not None and at.get("custom_type") == CHECKPOINT else None
                if value is not None and is_base(value):  # (not any whole value: a small one is no base)
                    found = at
        if found is None:  # deleted (by another instance) since the index was read
            raise not_found(thread_id)
        return found["data"]["values"][channel][2]  # type: ignore[no-any-return]

    def _metadata(self, thread_id: str, index: ThreadIndex, entry_id: str) -> Any:
        return decode_doc(self.serde, self._data(thread_id, index, entry_id)["metadata"])

    def _matches(self, thread_id: str, index: ThreadIndex, entry_id: str, filter: dict[str, Any]) -> bool:
        metadata = self._metadata(thread_id, index, entry_id)
        return all(metadata.get(k) == v for k, v in filter.items())

    def _tuple(self, thread_id: str, index: ThreadIndex, key: Key) -> CheckpointTuple:
        ns, checkpoint_id = key
        entry_id = index.checkpoints[key]
        data = self._data(thread_id, index, entry_id)
        checkpoint = decode_doc(self.serde, data["checkpoint"])  # (the caller's own copy)
        values: dict[str, Any] = {}
        blobs = index.blobs
        for channel, version in checkpoint["channel_versions"].items():
            holder = blobs.get((ns, channel, version))
            if holder is None:
                continue
            # (Most values changed with the checkpoint: in its own entry, already at hand.)
            stored = (data if holder == entry_id else self._data(thread_id, index, holder))["values"][channel]
            if stored[1] != "empty":
                base: Base | str | None = None
                if len(stored) > 3:  # a delta: of the index's base (no read), else of the entry it names
                    base = index.bases.get(ns, {}).get(channel)
                    if base is None or base.entry_id != stored[3]:
                        base = index.moved.get((holder, channel)) \
                            or self._base_text(thread_id, holder, stored[3], channel)
                values[channel] = self.serde.loads_typed((stored[1], value_bytes(stored, base)))
        pending = sorted(index.writes.get(key, {}).items(),
                         key=lambda kv: writes_sort_key(kv[1].task_path, kv[0][0], kv[0][1]))
        writes = []
        for (task_id, _), at in pending:
            _, channel, *packed = self._data(thread_id, index, at.entry_id)["writes"][at.position]
            writes.append((task_id, channel, unpack(self.serde, packed)))
        parent = data.get("parent")
        return CheckpointTuple(
            config=_config(thread_id, ns, checkpoint_id),
            checkpoint={**checkpoint, "channel_values": values},  # type: ignore[typeddict-item]
            metadata=decode_doc(self.serde, data["metadata"]),
            parent_config=_config(thread_id, ns, parent) if parent else None,
            pending_writes=writes,
        )

    # -- writes --------------------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Store ``checkpoint`` as a child of ``config``'s checkpoint, with the
        values of the channels in ``new_versions`` (each channel version once):
        one store call, serializing each new value once."""
        # (_configurable(), _thread_id(), _without_values(), _lock() and _config() inline for what
        # they take as it is or find at once, each tested as they test it: every put)
        configurable = config.get("configurable") if type(config) is dict else None
        if type(configurable) is not dict:
            configurable = _configurable(config)
        thread_id = configurable.get("thread_id")
        if type(thread_id) is not str or not thread_id:
            thread_id = _thread_id(thread_id)
        ns = configurable.get("checkpoint_ns") or ""
        if type(ns) is not str:  # (text() inline for what it takes as it is, here and below: every put)
            ns = text(str(ns), "checkpoint_ns")
        parent_id = configurable.get("checkpoint_id")
        if parent_id is not None and type(parent_id) is not str:
            parent_id = text(parent_id, "checkpoint_id")
        checkpoint_id = checkpoint["id"]
        if type(checkpoint_id) is not str:
            checkpoint_id = text(checkpoint_id, "checkpoint.id")
        # Built of exact JSON only (see _checkpoints): handed to the store without a copy.
        merged = get_checkpoint_metadata(config, metadata)
        fields: dict[str, Any] = dict(checkpoint)
        fields.pop("channel_values", None)
        body, meta, docs_size = encode_docs(self.serde, fields, merged)
        memo = self._memo if self._memo.on and usable(self.serde) else None
        try:
            serialized = serialize_values(self.serde, checkpoint["channel_values"], new_versions, memo, thread_id, ns)
        except BaseException:  # (a channel the serializer refuses after a memoized one: let go, as below)
            if memo is not None:
                memo.drop(thread_id)
            raise

        def write(index: ThreadIndex, checked: bool) -> tuple[ThreadIndex, dict[str, Any], str, str, int]:
            parent_entry = (index.checkpoints.get((ns, parent_id)) if parent_id else None) or ROOT_ID
            # A value stored as a delta names its base's entry (an ancestor: ThreadIndex.bases): made
            # with this index only when the append lands only while the session is as the index saw
            # it (``checked``), so the base is in the session.
            tip = index.tips.get(ns)  # (ThreadIndex.line, inline)
            line = index.bases.get(ns) if checked and tip is not None and tip == parent_entry else None
            values, twin, size = pack_values(serialized, line)
            data = {"ns": ns, "id": checkpoint_id, "parent": parent_id, "checkpoint": body, "metadata": meta,
                    "values": values}
            written = self._write(thread_id, index, CHECKPOINT, data, parent_entry, owned=True, checked=checked,
                                  data_json=data_json(data, "values", twin))
            return index, data, parent_entry, written, size

        ref = self._locks.live.get(thread_id)
        lock = ref() if ref is not None else None
        with lock or self._lock(thread_id):  # no read of the session: the append checks the index is current
            try:
                index, data, parent_entry, written, size = self._checked(thread_id, self._current(thread_id), write)
            except BaseException:  # (a failed put charges nothing: the memo it grew is let go, not held uncounted)
                if memo is not None:
                    memo.drop(thread_id)
                raise
            index.add_checkpoint(written, data, parent_entry)
            # (what :func:`footprint` counts of the data, added up from the parts that made it)
            self._kept.keep(thread_id, index.epoch, written, data, KEPT_OVERHEAD + size + docs_size)
            self._charge_bases(thread_id, index)
            held = memo.threads.get(thread_id) if memo is not None else None
            if held is not None:  # (counted in the budget too: past it, let go)
                self._kept.charge(thread_id, held.size(), held.release, MEMO)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Store a task's pending writes beside their checkpoint (a regular write
        the task already stored is kept; special ones replace)."""
        thread_id, ns = _thread(config), _ns(config)
        checkpoint_id = _configurable(config).get("checkpoint_id")
        if not checkpoint_id:
            raise invalid_request("checkpoint_id: put_writes needs the config of the checkpoint the writes belong to")
        key = (ns, text(str(checkpoint_id), "checkpoint_id"))
        task_id, task_path = text(task_id, "task_id"), text(task_path, "task_path")
        indexed = [(WRITES_IDX_MAP.get(channel, i), text(channel, "writes"), value)
                   for i, (channel, value) in enumerate(writes)]
        def write(index: ThreadIndex, checked: bool) -> None:
            fresh = new_writes(index, key, indexed, task_id)
            if not fresh:
                return
            packed, twin = pack_writes(self.serde, fresh)
            data = {"ns": ns, "checkpoint_id": key[1], "task_id": task_id, "task_path": task_path, "writes": packed}
            encoded = data_json(data, "writes", twin)
            written = self._append(thread_id, index, WRITES, data, index.checkpoints.get(key, ROOT_ID), owned=True,
                                   checked=checked, data_json=encoded)
            self._kept.keep(thread_id, index.epoch, written, data, footprint(data, encoded))

        with self._lock(thread_id):  # no read of the session: the append checks the index is current
            self._checked(thread_id, self._current(thread_id), write)

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's session: every checkpoint and write, on every branch."""
        thread_id = _thread_id(thread_id)
        with self._lock(thread_id):
            self.sm.call("session::delete", {"session_id": thread_id})
            self._forget(thread_id)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of the source thread (all branches and
        namespaces, same entry ids and tree) into the target thread."""
        source, target = _thread_id(source_thread_id), _thread_id(target_thread_id)
        with self._lock(source), storage_errors():
            entries = list(self._store.entries_held(source)) if self._store.get_meta(source) else []
        mine = {e["id"] for e in entries if e.get("kind") == "custom" and e.get("custom_type") in _COPIED}
        with self._lock(target):
            index = self._index(target)
            for entry in entries:
                if entry["id"] not in mine:
                    continue
                parent = entry.get("parent_id")
                parent = parent if parent in mine else ROOT_ID
                self._append(target, index, entry["custom_type"], entry["data"], parent, entry_id=entry["id"])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove the checkpoints (and their writes) whose metadata ``run_id`` is in ``run_ids``, in every thread."""
        runs = set(run_ids)
        if not runs:
            return
        for thread_id in self._threads():
            with self._lock(thread_id):
                index = self._index(thread_id)
                gone = [key for key, entry_id in index.checkpoints.items()
                        if self._metadata(thread_id, index, entry_id).get("run_id") in runs]
                self._tombstone(thread_id, index, gone)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint; ``delete``: delete the threads."""
        if strategy not in ("keep_latest", "delete"):
            raise invalid_request(f"strategy: expected 'keep_latest' or 'delete', got {strategy!r}")
        for thread_id in map(_thread_id, thread_ids):
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            with self._lock(thread_id):
                index = self._index(thread_id)
                self._tombstone(thread_id, index, [k for k in index.checkpoints if k[1] != index.latest(k[0])])

    def _tombstone(self, thread_id: str, index: ThreadIndex, gone: Keys) -> None:
        if gone:
            self._append(thread_id, index, DELETED, {"checkpoints": [[ns, cid] for ns, cid in sorted(gone)]}, None)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions as LangGraph's own savers make them: a zero-padded counter
        and a random fraction, so two branches never reuse one version."""
        number = 0 if current is None else current if isinstance(current, int) else int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- async: the same work on a worker thread; a cancelled write still settles first

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple` off the event loop."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list` off the event loop."""
        found = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        """:meth:`put` off the event loop."""
        return await settled(asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions))

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        """:meth:`put_writes` off the event loop."""
        await settled(asyncio.to_thread(self.put_writes, config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread` off the event loop."""
        await settled(asyncio.to_thread(self.delete_thread, thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread` off the event loop."""
        await settled(asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs` off the event loop."""
        await settled(asyncio.to_thread(self.delete_for_runs, run_ids))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune` off the event loop."""
        await settled(asyncio.to_thread(self.prune, thread_ids, strategy=strategy))


def _thread_id(value: Any) -> str:
    thread_id = text(str(value), "thread_id") if value is not None else ""
    if not thread_id:
        raise invalid_request("thread_id: a LangGraph thread needs a non-empty thread_id (it names its session)")
    return thread_id


def _configurable(config: RunnableConfig | None) -> dict[str, Any]:
    configurable = (config or {}).get("configurable")
    if not isinstance(configurable, dict):
        raise invalid_request("configurable: a LangGraph config needs {'configurable': {'thread_id': ...}}")
    return configurable


def _thread(config: RunnableConfig | None) -> str:
    return _thread_id(_configurable(config).get("thread_id"))


def _ns(config: RunnableConfig) -> str:
    return text(str(_configurable(config).get("checkpoint_ns") or ""), "checkpoint_ns")


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


def _without_values(checkpoint: Checkpoint) -> dict[str, Any]:
    """The checkpoint's fields but its channel values (stored per channel version instead)."""
    fields: dict[str, Any] = dict(checkpoint)
    fields.pop("channel_values", None)
    return fields


def _dropped_none(payload: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if v is not None}
