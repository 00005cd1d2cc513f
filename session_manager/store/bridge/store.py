"""The bridge adapter: store through a main instance's ``session::store::*``.

The bridged instance keeps all domain logic; the main (an fs-mode
session-manager on another engine) is its durable storage. Every method is
one call over a dedicated iii client connected to the main's engine, each
bounded by ``timeout_ms``: a commit is one ``session::store::commit`` applied
whole or not at all with compare-and-set (a stale one raises
:class:`~session_manager.errors.Conflict`), a delete one ``delete-session``, and a path
is read window by window (``read-path``), so a page costs O(page). Every
mutation whose answer is lost is settled (sent again, then read back, within
a bounded time: :mod:`session_manager.store.bridge.settle`) rather than left in doubt, so an applied
mutation answers as applied and fires its events once. Nothing
is cached here: the main is the only truth, so two bridges on one main
never read stale state.

A main without those calls (a Rust main answers ``function_not_found``) is
served the reference's multi-call writes instead: no atomicity, no
compare-and-set, O(session) path reads (see the README).

Any failure (unreachable main, timeout, an error answer, a reply of the
wrong shape) is a :class:`~session_manager.errors.StoreError`, which the
service reports as ``session/storage``.
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
import uuid
from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from typing import Any, TypeVar

from pydantic import ConfigDict, TypeAdapter, ValidationError

from ... import _bus as bus
from ..._bus import Bus
from ..._wire.models import AttachmentMeta as AttachmentMetaModel
from ..._wire.models import SessionEntry, SessionMeta
from ...errors import Conflict, NotFound, StoreError, Unavailable, Vanished
from .._core.cas import UNSET, meta_version
from ..base import AttachmentMeta, Commit, Entry, Meta, SessionStore
from ..path import EntryPath, walk_to_root
from ..search_index import Matches
from ..search_text import Query
from . import protocol as sp
from . import protocol_cas as atomic
from . import protocol_search as searching
from .remote_path import RemotePath
from .settle import Deadlines, settle

log = logging.getLogger("session_manager.store.bridge")

FUNCTION_NOT_FOUND = "function_not_found"  # the engine's code for a function nobody serves
LEGACY_RECHECK_S = 60.0

_META = TypeAdapter(SessionMeta)
# Built on first use, like the models: `import session_manager` must stay cheap.
_ENTRY: TypeAdapter[Any] = TypeAdapter(SessionEntry, config=ConfigDict(defer_build=True))
_ATTACHMENT = TypeAdapter(AttachmentMetaModel)
T = TypeVar("T")


class _NotServed(Unavailable):
    """The main does not serve one of our atomic calls (a Rust main). Caught
    where the fallback applies; anywhere else (a main that stopped serving
    mid-read) it is a storage failure like any other."""


class BridgeStore(SessionStore):
    """A :class:`SessionStore` whose every read and write is a call to the main."""

    def __init__(self, client: Bus, timeout_ms: int) -> None:
        self.client = client
        self.timeout_ms = timeout_ms
        # Until when the main is known not to serve our atomic calls (a Rust
        # main): looked at again afterwards, so a main that was only
        # restarting is not treated as a Rust one for good.
        self._legacy_until = 0.0
        self._deadlines = Deadlines()

    def _legacy_main(self) -> bool:
        return time.monotonic() < self._legacy_until

    @property
    def atomic(self) -> bool:
        """Whether writes currently go through the atomic, compare-and-set calls."""
        return not self._legacy_main()

    def _new_call(self, function_id: str, payload: dict[str, Any]) -> Any:
        """A call of ours (:mod:`.protocol_cas`); :class:`_NotServed`
        when the main does not know it."""
        try:
            return self._call(function_id, payload)
        except Unavailable as e:
            if e.code != FUNCTION_NOT_FOUND:
                raise
            if not self._legacy_main():
                log.warning("the main does not serve %s (a Rust main?): falling back to multi-call "
                            "writes without atomicity or compare-and-set for %.0f s", function_id,
                            LEGACY_RECHECK_S)
            self._legacy_until = time.monotonic() + LEGACY_RECHECK_S
            raise _NotServed(function_id) from e

    # -- transport ------------------------------------------------------------

    def _call(self, function_id: str, payload: dict[str, Any]) -> Any:
        # Transport, timeout, the main's own error: all typed StoreErrors here.
        timeout_ms = self._deadlines.timeout_ms(self.timeout_ms, function_id)  # shorter while settling
        return bus.call(self.client, function_id, payload, timeout_ms, context=f"bridge {function_id} failed")

    def _settle(self, lost: Unavailable, replay: Callable[[], T | None], read_back: Callable[[], T | None]) -> T:
        """:func:`._settle.settle` with this bridge's deadlines and timeout."""
        return settle(self._deadlines, self.timeout_ms, lost, replay, read_back)

    @staticmethod
    def _malformed(function_id: str, why: str) -> StoreError:
        return StoreError(f"bridge {function_id} returned malformed data: {why}")

    def _checked(self, function_id: str, adapter: TypeAdapter[Any], value: Any) -> Any:
        try:
            adapter.validate_python(value)
        except ValidationError as e:
            raise self._malformed(function_id, str(e).splitlines()[0]) from None
        return value

    def _field(self, function_id: str, answer: Any, key: str, kind: type) -> Any:
        if not isinstance(answer, dict) or not isinstance(answer.get(key), kind):
            raise self._malformed(function_id, f"expected an object with `{key}`, got {answer!r:.200}")
        return answer[key]

    def _items(self, function_id: str, answer: Any, key: str, adapter: TypeAdapter[Any]) -> list[Any]:
        items = self._field(function_id, answer, key, list)
        return [self._checked(function_id, adapter, item) for item in items]

    def _ok(self, function_id: str, payload: dict[str, Any]) -> None:
        answer = self._call(function_id, payload)
        if not isinstance(answer, dict) or answer.get("ok") is not True:
            raise self._malformed(function_id, f"expected {{ok: true}}, got {answer!r:.200}")

    # -- sessions and entries ----------------------------------------------------

    def get_meta(self, session_id: str) -> Meta | None:
        answer = self._call(sp.GET_META, {"session_id": session_id})
        return None if answer is None else self._checked(sp.GET_META, _META, answer)

    def list_metas(self) -> list[Meta]:
        return self._items(sp.LIST_METAS, self._call(sp.LIST_METAS, {}), "metas", _META)

    def get_entry(self, session_id: str, entry_id: str) -> Entry | None:
        answer = self._call(sp.GET_ENTRY, {"session_id": session_id, "entry_id": entry_id})
        return None if answer is None else self._checked(sp.GET_ENTRY, _ENTRY, answer)

    def get_leaf(self, session_id: str) -> str | None:
        answer = self._call(sp.GET_ACTIVE_LEAF, {"session_id": session_id})
        if not isinstance(answer, dict):
            raise self._malformed(sp.GET_ACTIVE_LEAF, f"expected an object, got {answer!r:.200}")
        leaf = answer.get("entry_id")
        if leaf is not None and not isinstance(leaf, str):
            raise self._malformed(sp.GET_ACTIVE_LEAF, f"entry_id {leaf!r:.200}")
        return leaf

    def entries(self, session_id: str) -> list[Entry]:
        return self._items(sp.LIST_ENTRIES, self._call(sp.LIST_ENTRIES, {"session_id": session_id}),
                           "entries", _ENTRY)

    def path(self, session_id: str, leaf: str | None) -> EntryPath:
        if leaf is None:
            return EntryPath([], {})
        if not self._legacy_main():
            def fetch(**window: Any) -> dict[str, Any]:
                return self._window(session_id, leaf, window)

            try:
                path = RemotePath(fetch, session_id, leaf)
                len(path)  # the first window; a Rust main answers function_not_found here
                return path
            except Vanished:
                return EntryPath([], {})  # no such session: reads as absent
            except _NotServed:
                pass
        by_id = {e["id"]: e for e in self.entries(session_id)}
        return EntryPath(walk_to_root(by_id, leaf), by_id)

    def _window(self, session_id: str, leaf: str, window: dict[str, Any]) -> dict[str, Any]:
        try:
            answer = self._new_call(atomic.READ_PATH, {"session_id": session_id, "leaf": leaf, **window})
        except NotFound as e:  # deleted on the main while this path was being read
            raise Vanished(session_id, str(e)) from None
        self._field(atomic.READ_PATH, answer, "length", int)
        self._field(atomic.READ_PATH, answer, "start", int)
        self._items(atomic.READ_PATH, answer, "entries", _ENTRY)
        return answer  # type: ignore[no-any-return]

    def commit(self, session_id: str, commit: Commit) -> Commit:
        if not self._legacy_main():
            try:
                return self._commit(session_id, commit)
            except _NotServed:
                pass
        return self._legacy_commit(session_id, commit)

    def _commit(self, session_id: str, commit: Commit) -> Commit:
        payload: dict[str, Any] = {"session_id": session_id, "entries": list(commit.entries), "leaf": commit.leaf,
                                   "meta": commit.meta, "append": commit.append, "chain": commit.chain,
                                   "expect_revisions": dict(commit.expect_revisions)}
        if commit.expect_meta is not UNSET:
            payload["expect_meta_version"] = meta_version(commit.expect_meta)
        try:
            answer = self._new_call(atomic.COMMIT, payload)
        except _NotServed:
            raise
        except Unavailable as lost:
            # Only the answer may have been lost: the main can have applied the commit. Without
            # knowing, the caller's retry is an idempotent replay that fires no event (or a
            # "nothing to delete"), so the mutation's events would never fire anywhere.
            return self._settle_commit(session_id, commit, payload, lost)
        committed = self._field(atomic.COMMIT, answer, "committed", bool)
        if not committed:
            raise Conflict(f"the main refused a stale commit: {answer.get('conflict')}")
        return self._applied(commit, answer)

    def _applied(self, commit: Commit, answer: Any) -> Commit:
        entries = tuple(self._items(atomic.COMMIT, answer, "entries", _ENTRY))
        meta = answer.get("meta")
        if meta is not None:
            self._checked(atomic.COMMIT, _META, meta)
        return replace(commit, entries=entries, leaf=answer.get("leaf"), meta=meta)

    def _settle_commit(self, session_id: str, commit: Commit, payload: dict[str, Any],
                       lost: Unavailable) -> Commit:
        """A commit whose answer was lost (:mod:`session_manager.store.bridge.settle`): sent again (a
        replay never applies twice, and it is serialized with the first one
        under the main's session lock), and when the replay is refused or
        lost too, read back."""
        def replay() -> Commit | None:
            answer = self._call(atomic.COMMIT, payload)
            if self._field(atomic.COMMIT, answer, "committed", bool):
                return self._applied(commit, answer)
            return None

        return self._settle(lost, replay, lambda: self._landed(session_id, commit))

    def _landed(self, session_id: str, commit: Commit) -> Commit | None:
        """``commit`` as the main holds it, if it is there; else ``None``. New
        entries (fresh ids, or the next revision under ``expect_revisions``)
        prove it: a commit applies whole, so its first and last entries stand
        for all of them (two reads, whatever the batch). Without entries the
        meta and leaf must read as written."""
        entries = commit.entries
        ends = (0, len(entries) - 1) if len(entries) > 1 else tuple(range(len(entries)))
        found: dict[int, Entry] = {}
        for i in ends:
            stored = self.get_entry(session_id, entries[i]["id"])
            # A chained append's first parent is the main's choice.
            ignore = ("parent_id",) if commit.chain and i == 0 else ()
            if stored is None or {k: v for k, v in stored.items() if k not in ignore} != {
                    k: v for k, v in entries[i].items() if k not in ignore}:
                return None
            found[i] = stored
        landed = tuple(found.get(i, entry) for i, entry in enumerate(entries))
        if commit.append:
            meta = self.get_meta(session_id)
            if meta is None or not landed:
                return None
            return replace(commit, entries=landed, leaf=landed[-1]["id"], meta=meta)
        if not landed:
            if commit.meta is not None and self.get_meta(session_id) != commit.meta:
                return None
            if commit.leaf is not None and self.get_leaf(session_id) != commit.leaf:
                return None
            if commit.meta is None and commit.leaf is None:
                return None  # nothing to recognize it by
        return replace(commit, entries=landed)

    def _legacy_commit(self, session_id: str, commit: Commit) -> Commit:
        """Today's multi-call writes for a main without ``session::store::commit``
        (a Rust main): not atomic, no compare-and-set (see the README)."""
        entries = commit.entries
        if commit.append and len(entries) == 1:
            # One atomic call on any main: idempotent, parent and meta derived there.
            answer = self._commit_append(session_id, entries[0], explicit=not commit.chain)
            if answer is None:
                raise Conflict(f"session {session_id} no longer exists on the main")
            if not answer["committed"]:
                raise Conflict(f"entry {entries[0]['id']} already exists on the main")
            return replace(commit, entries=(answer["entry"],), leaf=answer["entry"]["id"], meta=answer["meta"])
        # Entries, then the leaf, then the meta, so a failure part-way never
        # leaves a meta pointing at writes that did not happen.
        for entry in entries:
            self._ok(sp.PUT_ENTRY, {"session_id": session_id, "entry": entry})
        if commit.leaf is not None:
            self._ok(sp.SET_ACTIVE_LEAF, {"session_id": session_id, "entry_id": commit.leaf})
        if commit.meta is not None:
            self._ok(sp.PUT_META, {"meta": commit.meta})
        return commit

    def _commit_append(self, session_id: str, entry: Entry, *, explicit: bool) -> dict[str, Any] | None:
        try:
            answer = self._call(sp.COMMIT_APPEND, {"session_id": session_id, "entry": entry,
                                                   "parent_explicit": explicit})
        except NotFound:
            return None
        if not isinstance(answer, dict) or not isinstance(answer.get("committed"), bool):
            raise self._malformed(sp.COMMIT_APPEND, f"expected {{entry, meta, committed}}, got {answer!r:.200}")
        self._checked(sp.COMMIT_APPEND, _ENTRY, answer.get("entry"))
        self._checked(sp.COMMIT_APPEND, _META, answer.get("meta"))
        return answer

    def bulk_delete_problem(self) -> str | None:
        """Purge, delete-tree and retention need the main's atomic delete (a Rust main's
        multi-call delete can leave half a session behind, many times over): asked of
        the main with a delete of an id nobody has."""
        if not self._legacy_main():
            try:
                self._new_call(atomic.DELETE_SESSION, {"session_id": f"s_probe-{uuid.uuid4().hex}",
                                                       "op": uuid.uuid4().hex})
                return None
            except _NotServed:
                pass
        return (f"the main does not serve {atomic.DELETE_SESSION} (a Rust main?): purge, delete-tree and "
                "retention need a Python main's atomic delete")

    def search(self, query: Query, sessions: Collection[str] | None,
               roles: Collection[str] | None) -> Matches:
        """On the main, against its index (``session::store::search``); a Rust main lacks it."""
        payload = {"exact": list(query.exact), "prefix": query.prefix,
                   "sessions": None if sessions is None else list(sessions),
                   "roles": None if roles is None else sorted(roles)}
        try:
            # (_call, not _new_call: a main without search says nothing about its atomic writes)
            answer = self._call(searching.SEARCH, payload)
        except Unavailable as e:
            if e.code != FUNCTION_NOT_FOUND:
                raise
            raise StoreError(f"session::search is unsupported on this bridge: the main does not serve "
                             f"{searching.SEARCH} (a Rust main, or an older release)") from None
        try:
            return searching.matches_from_json(answer, len(query.terms))
        except ValueError as e:
            raise self._malformed(searching.SEARCH, str(e)) from None

    def delete_session(self, session_id: str) -> bool:
        if not self._legacy_main():
            # `op` names this delete: the main answers a repeat of it as it answered the first.
            ids = {"session_id": session_id, "op": uuid.uuid4().hex}

            def deleted() -> bool:
                answer = self._call(atomic.DELETE_SESSION, ids)
                return bool(self._field(atomic.DELETE_SESSION, answer, "deleted", bool))

            try:
                answer = self._new_call(atomic.DELETE_SESSION, ids)
                # The main's answer, not ours: of two bridges racing, one deleted it.
                return bool(self._field(atomic.DELETE_SESSION, answer, "deleted", bool))
            except _NotServed:
                pass
            except Unavailable as lost:
                return self._settle(lost, deleted, lambda: _gone(self.get_meta(session_id)))
        # Attachments first and the meta last: until the meta goes, a failed
        # delete leaves a visible session that a retry removes. (Several calls:
        # whether this one removed it is not known; the caller read it present.)
        ids = {"session_id": session_id}
        for function_id in (sp.DELETE_ATTACHMENTS, sp.DELETE_ACTIVE_LEAF, sp.DELETE_ENTRIES, sp.DELETE_META):
            self._ok(function_id, ids)
        return True

    # -- attachments -------------------------------------------------------------

    def put_attachment(self, meta: AttachmentMeta, chunks: Iterable[bytes]) -> None:
        data = b"".join(chunks)  # exhausted first: the producer completes `meta` (its hash) at the end
        payload = {"meta": meta, "data": base64.b64encode(data).decode("ascii")}
        try:
            self._ok(sp.PUT_ATTACHMENT, payload)
        except Unavailable as lost:
            def replay() -> bool:  # the same bytes and record again: a no-op if they landed
                self._ok(sp.PUT_ATTACHMENT, payload)
                return True

            def read_back() -> bool | None:
                stored = self.get_attachment_meta(meta["session_id"], meta["attachment_id"])
                return True if stored == meta else None

            self._settle(lost, replay, read_back)

    def get_attachment_meta(self, session_id: str, attachment_id: str) -> AttachmentMeta | None:
        # Listed rather than fetched: the metadata alone never moves the bytes.
        for meta in self.list_attachments(session_id):
            if meta.get("attachment_id") == attachment_id:
                return meta
        return None

    def read_attachment(self, session_id: str, attachment_id: str) -> bytes | None:
        answer = self._call(sp.GET_ATTACHMENT, {"session_id": session_id, "attachment_id": attachment_id})
        if answer is None:
            return None
        data = self._field(sp.GET_ATTACHMENT, answer, "data", str)
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as e:
            raise self._malformed(sp.GET_ATTACHMENT, f"data is not base64: {e}") from None

    def list_attachments(self, session_id: str) -> list[AttachmentMeta]:
        return self._items(sp.LIST_ATTACHMENTS, self._call(sp.LIST_ATTACHMENTS, {"session_id": session_id}),
                           "attachments", _ATTACHMENT)

    def delete_attachment(self, session_id: str, attachment_id: str) -> bool:
        # `op`: as for delete_session (a Rust main ignores it; its repeat answers false).
        ids = {"session_id": session_id, "attachment_id": attachment_id, "op": uuid.uuid4().hex}

        def deleted() -> bool:
            return bool(self._field(sp.DELETE_ATTACHMENT, self._call(sp.DELETE_ATTACHMENT, ids), "deleted", bool))

        try:
            return deleted()
        except Unavailable as lost:
            return self._settle(lost, deleted, lambda: _gone(self.get_attachment_meta(session_id, attachment_id)))


def _gone(found: Any) -> bool | None:
    """A delete's read-back, when its repeat was lost too: gone reads as deleted
    by this call (only a delete racing it from another bridge, while both of
    this call's answers were lost, could have been the one), still there as unknown."""
    return True if found is None else None
