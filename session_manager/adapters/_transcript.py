"""The branch an adapter reads and writes: a session whose first entry is a
sentinel root, so "remove the last item" is a move of the active leaf
(``session::set-active-leaf``) that keeps the item on its branch. "Clear"
destroys: the user asked for the history to be gone, so the session is
deleted (``session::delete``, bytes gone) and created again, empty.

Why a sentinel: the store has no empty active path once a session has
entries, so popping the very first item needs an entry to move the leaf to.
The adapter writes a custom entry (``custom_type`` ``<adapter>.root``, fixed
entry id, so concurrent first writers write it once) as the root when it
finds the session absent or empty. A session that already had entries
before an adapter touched it has no such root: reading and appending work,
but removing its first entry is refused with ``session/invalid_request``.

Every read and write goes through the public function surface.
"""

from __future__ import annotations

import _thread
import contextlib
import threading
import weakref
from _weakref import _remove_dead_weakref  # type: ignore[attr-defined]  # (what WeakValueDictionary uses)
from collections.abc import Callable
from typing import Any

from .._hosts.embedded import SessionManager
from .._service.transcript import item
from ..errors import NOT_FOUND, SessionError, invalid_request

Item = dict[str, Any]  # a transcript item: {entry_id, message | custom, origin?}
Json = dict[str, Any]
Write = tuple[Json | None, Json | None, Json | None]  # (message, custom, origin) of one new entry


class _SessionLock(_thread.RLock):  # type: ignore[misc]  # (final in typeshed; subclassable in CPython)
    """The one lock of a session of one ``sm``, shared by every adapter object on it,
    carrying whether the session is known rooted (a clear by any object resets it; set
    when made, by :func:`_session_lock`: no ``__init__`` of its own, a C-speed make).

    An ``RLock`` itself (its ``with`` costs what a plain one does), so whoever holds or waits
    for it references the very object its registry entry points to (see :class:`_Registry`)."""

    __slots__ = ("rooted",)
    rooted: bool


_RECENT = 4096  # session locks kept per ``sm`` past their last use (then all let go at once)


class _Registry:
    """The session locks of one ``sm``.

    ``live``: session id -> a weak reference to its lock. An entry goes only when its lock
    is unreferenced: no adapter object keeps it (a Transcript does for its life), no call holds
    or waits for it (``with lock:`` keeps a reference until the block ends). So two callers
    never hold different locks for one session, and a process serving millions of ids keeps
    only those in use. (The entry is dropped as ``WeakValueDictionary`` drops one: atomically,
    and only while the key still maps to the dead reference; a lock made since for the same
    id stays.) A plain dict of plain references: a look-up is a ``dict.get`` and a call.

    ``recent``: the locks last handed out, held strongly, at most :data:`_RECENT` (emptied
    when full): a session used again soon (one adapter object per request, a LangGraph thread
    between puts) finds its lock, and its ``rooted``, without making them again."""

    __slots__ = ("live", "recent")

    def __init__(self) -> None:
        self.live: dict[str, weakref.ref[_SessionLock]] = {}
        self.recent: dict[str, _SessionLock] = {}


_locks_guard = threading.Lock()
_locks: weakref.WeakKeyDictionary[SessionManager, _Registry] = weakref.WeakKeyDictionary()


def _registry(sm: SessionManager) -> _Registry:
    """The session locks of ``sm`` (an adapter object keeps this for its look-ups)."""
    with _locks_guard:
        registry = _locks.get(sm)
        if registry is None:
            registry = _locks[sm] = _Registry()
        return registry


def _dropper(live: dict[str, weakref.ref[_SessionLock]], key: str) -> Callable[[weakref.ref[_SessionLock]], None]:
    # The remover is bound here, not looked up at call time: a lock that outlives this
    # module's globals (freed while the interpreter shuts down, which sets them to None)
    # must still drop its entry quietly, as WeakValueDictionary binds it for the same reason.
    remove = _remove_dead_weakref

    def drop(_: weakref.ref[_SessionLock]) -> None:
        remove(live, key)
    return drop


def _session_lock(sm: SessionManager, session_id: str, registry: _Registry | None = None) -> _SessionLock:
    """The one lock of ``session_id`` in ``sm``, shared by every adapter object: the one in
    use, else a new one. Keep a reference for as long as you hold it (``with`` does)."""
    registry = _registry(sm) if registry is None else registry
    live = registry.live
    with _locks_guard:  # two callers must never make two locks for one session
        ref = live.get(session_id)
        lock = ref() if ref is not None else None
        if lock is None:
            lock = _SessionLock()
            lock.rooted = False
            # (The callback runs where the lock's last reference goes, maybe under this guard:
            # it takes no lock, and removes the entry only while it is still this dead one.)
            live[session_id] = weakref.ref(lock, _dropper(live, session_id))
        recent = registry.recent
        if session_id not in recent:
            if len(recent) >= _RECENT:
                recent.clear()  # (their locks go too, unless in use: then they stay registered)
            recent[session_id] = lock
        return lock


def root_entry_id(prefix: str) -> str:
    return f"{prefix}-root"


class Transcript:
    """One session's active path as adapters see it (synchronous)."""

    def __init__(self, sm: Any, session_id: str, prefix: str) -> None:
        # An AsyncSessionManager is accepted too: adapters use its store.
        self.sm: SessionManager = sm if isinstance(sm, SessionManager) else sm.sync
        self.session_id = session_id
        self.root_type = f"{prefix}.root"
        self.root_id = root_entry_id(prefix)
        # Serializes read-modify-writes (pop, add, clear) of every adapter object on
        # this session in this process, so a batch stays contiguous and two pops never
        # pop one item twice (apps make one adapter object per request). Kept for this
        # object's life: its registry entry (and whether the session is rooted) with it.
        self.lock: _SessionLock = _session_lock(self.sm, session_id)

    @property
    def _rooted(self) -> bool:
        return bool(self.lock.rooted)

    @_rooted.setter
    def _rooted(self, value: bool) -> None:
        self.lock.rooted = value

    def is_root(self, item: Item) -> bool:
        return item.get("entry_id") == self.root_id and (item.get("custom") or {}).get("custom_type") == self.root_type

    def _call(self, function_id: str, payload: dict[str, Any]) -> Any:
        return self.sm.call(function_id, {"session_id": self.session_id, **payload})

    def ensure_root(self) -> None:
        """Create the session (and its root) unless it exists."""
        if self._rooted:
            return
        self.sm.call("session::ensure", {"session_id": self.session_id})
        if not self._tail(1):
            root = {"custom_type": self.root_type, "data": None}
            self._call("session::append", {"custom": root, "entry_id": self.root_id})
        self._rooted = True

    def _tail(self, blocks: int) -> list[Item]:
        return list(self._tail_page(blocks, None)["messages"])

    def _tail_page(self, blocks: int, before: str | None) -> Any:
        payload: dict[str, Any] = {"limit": blocks, "include_custom": True}
        if before is not None:
            payload["before_entry_id"] = before
        return self._call("session::messages-tail", payload)

    def all_items(self) -> list[Item]:
        """The whole active path, oldest first, without the root (``[]`` for an unknown session)."""
        out: list[Item] = []
        cursor: str | None = None
        try:
            while True:
                payload: dict[str, Any] = {"include_custom": True}
                if cursor is not None:
                    payload["cursor"] = cursor
                page = self._call("session::messages", payload)
                out += page["messages"]
                cursor = page.get("next_cursor")
                if cursor is None:
                    break
        except SessionError as e:
            if e.code == NOT_FOUND:
                return []
            raise
        return [i for i in out if not self.is_root(i)]

    def last_entries(self, count: int) -> list[Item]:
        """The newest ``count`` entries of the active path (fewer if it is shorter), oldest first.

        ``session::messages-tail`` walks back from the leaf, so this costs
        O(count) (plus the rest of a tool-call run the oldest one falls in);
        the entries it collapsed are read whole with one ``messages-range``."""
        if count <= 0:
            return []
        page: list[Item] = []
        before: str | None = None
        try:
            # Pages are clamped to max_list_limit: walk on back until ``count`` are in.
            while len(page) < count:
                got = self._tail_page(count - len(page), before)
                page = [i for i in got["messages"] if not self.is_root(i)] + page
                before = got.get("oldest_entry_id")
                if not got["has_more"] or before is None:
                    break
        except SessionError as e:
            if e.code == NOT_FOUND:
                return []
            raise
        page = page[-count:]
        elided = [i["entry_id"] for i in page if i.get("elided")]
        if elided:
            whole: dict[str, Item] = {}
            cursor: str | None = None
            while True:
                payload: dict[str, Any] = {"entry_ids": elided, "limit": len(elided)}
                if cursor is not None:
                    payload["cursor"] = cursor
                got = self._call("session::messages-range", payload)
                whole.update((i["entry_id"], i) for i in got["messages"])
                cursor = got.get("next_cursor")
                if cursor is None:
                    break
            page = [whole.get(i["entry_id"], i) if i.get("elided") else i for i in page]
        return [{k: v for k, v in i.items() if k != "elided"} for i in page]

    def pop_last(self) -> Item | None:
        """Move the active leaf to the parent of the last entry and return that
        entry as an item, or ``None`` when the path holds nothing but the root."""
        with self.lock:
            try:
                tail = self._tail(1)
            except SessionError as e:
                if e.code == NOT_FOUND:
                    return None
                raise
            if not tail or self.is_root(tail[-1]):
                return None
            entry_id = tail[-1]["entry_id"]
            found = self._call("session::get-message", {"entry_id": entry_id})
            entry = found["entry"]
            parent = entry.get("parent_id")
            if parent is None:
                raise invalid_request(
                    f"session {self.session_id}: entry {entry_id} is the first of a session this adapter "
                    "did not start, so there is no earlier point to move the active leaf to"
                )
            self._call("session::set-active-leaf", {"entry_id": parent})
            return item(entry)

    def clear(self) -> None:
        """Delete the session for real (``session::delete``: every entry, on any
        branch, and its attachments gone from the store) and create it again
        empty with the same id, title, description and metadata, so observers
        see ``on-deleted`` then ``on-created``. The next write roots it again.
        An unknown session is left alone."""
        with self.lock:
            found = self.sm.call("session::get", {"session_id": self.session_id})
            if found is None:
                return  # nothing stored, nothing to clear
            meta = found["meta"]
            self._rooted = False  # for every adapter object on this session: the root goes too
            self._call("session::delete", {})
            self._call("session::ensure", {"title": meta.get("title"), "description": meta.get("description"),
                                           "metadata": meta.get("metadata")})

    def append(self, messages: list[Write]) -> None:
        """Append ``(message, custom, origin)`` entries in order, each chained to the one before."""
        with self.lock:
            rooted = self._rooted
            try:
                self._append(messages)
            except SessionError as e:
                if e.code != NOT_FOUND or not rooted:
                    raise
                # Deleted since this object rooted it (console delete, an app's
                # reset): start it afresh, as a first write would.
                self._rooted = False
                self._append(messages)

    def _append(self, messages: list[Write]) -> None:
        with self.lock:
            self.ensure_root()
            start: str | None = None  # the leaf the batch hangs from
            parent: str | None = None
            for message, custom, origin in messages:
                payload: dict[str, Any] = {}
                if message is not None:
                    payload["message"] = message
                else:
                    payload["custom"] = custom
                if origin is not None:
                    payload["origin"] = origin
                if parent is not None:
                    payload["parent_id"] = parent
                try:
                    written = self._call("session::append", payload)
                except SessionError:
                    if parent is not None and start is not None:
                        self._undo_batch(start, parent)
                    raise
                if parent is None:
                    start = written.get("parent_id")
                parent = written["entry_id"]

    def _undo_batch(self, start: str, last: str) -> None:
        """Move the leaf back to ``start`` after a batch failed part way, so the
        path reads as before it (the entries written stay, as a branch off it).
        Only while the leaf is still the batch's last entry: another writer's
        later entry is never cut off. The batch's own error is what surfaces."""
        with contextlib.suppress(SessionError):
            tail = self._tail(1)
            if tail and tail[-1]["entry_id"] == last:
                self._call("session::set-active-leaf", {"entry_id": start})

