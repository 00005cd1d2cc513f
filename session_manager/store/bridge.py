"""The bridge adapter: store through a main instance's ``session::store::*``.

The bridged instance keeps all domain logic; the main (an fs-mode
session-manager on another engine) is its durable storage. Every method is
one or a few calls over a dedicated iii client connected to the main's
engine, each bounded by ``timeout_ms``. Nothing is cached here: the main is
the only truth, so two bridges on one main never read stale state.

Any failure (unreachable main, timeout, an error answer, a reply of the
wrong shape) is a :class:`~session_manager.errors.StoreError`, which the
service reports as ``session/storage``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError

from .. import _bus as bus
from .._bus import Bus
from .._wire.models import AttachmentMeta as AttachmentMetaModel
from .._wire.models import SessionEntry, SessionMeta
from ..errors import NotFound, StoreError
from . import _protocol as sp
from .base import AttachmentMeta, Commit, Entry, Meta, SessionStore
from .path import EntryPath, walk_to_root

_META = TypeAdapter(SessionMeta)
# Built on first use, like the models: `import session_manager` must stay cheap.
_ENTRY: TypeAdapter[Any] = TypeAdapter(SessionEntry, config=ConfigDict(defer_build=True))
_ATTACHMENT = TypeAdapter(AttachmentMetaModel)


class BridgeStore(SessionStore):
    """A :class:`SessionStore` whose every read and write is a call to the main."""

    def __init__(self, client: Bus, timeout_ms: int) -> None:
        self.client = client
        self.timeout_ms = timeout_ms

    # -- transport ------------------------------------------------------------

    def _call(self, function_id: str, payload: dict[str, Any]) -> Any:
        # Transport, timeout, the main's own error: all typed StoreErrors here.
        return bus.call(self.client, function_id, payload, self.timeout_ms, context=f"bridge {function_id} failed")

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
        by_id = {e["id"]: e for e in self.entries(session_id)}
        return EntryPath(walk_to_root(by_id, leaf), by_id)

    def commit(self, session_id: str, commit: Commit) -> None:
        entries = commit.entries
        if (len(entries) == 1 and commit.leaf == entries[0]["id"] and commit.meta is not None
                and entries[0].get("revision", 0) == 0 and commit.meta.get("updated_at") == entries[0]["timestamp"]):
            # A new entry that becomes the leaf, stamped now: an append, sent as
            # one atomic commit-append (entry, leaf and meta together). The
            # service already resolved the parent under its lock: explicit.
            answer = self._commit_append(session_id, entries[0])
            if answer is None:
                pass  # no session there yet (a one-entry fork): written the general way
            elif answer["committed"]:
                if answer.get("meta") != commit.meta:
                    # The main derives the meta (count, updated_at); a commit may
                    # carry more (or another writer raced us): ours is the contract.
                    self._ok(sp.PUT_META, {"meta": commit.meta})
                return
            # The id exists on the main (another writer got there first): a
            # commit is last-wins, so write it the general way.
        # Anything else: entries, then the leaf, then the meta, so a failure
        # part-way never leaves a meta pointing at writes that did not happen.
        for entry in entries:
            self._ok(sp.PUT_ENTRY, {"session_id": session_id, "entry": entry})
        if commit.leaf is not None:
            self._ok(sp.SET_ACTIVE_LEAF, {"session_id": session_id, "entry_id": commit.leaf})
        if commit.meta is not None:
            self._ok(sp.PUT_META, {"meta": commit.meta})

    def _commit_append(self, session_id: str, entry: Entry) -> dict[str, Any] | None:
        try:
            answer = self._call(sp.COMMIT_APPEND, {"session_id": session_id, "entry": entry,
                                                   "parent_explicit": True})
        except NotFound:
            return None
        if not isinstance(answer, dict) or not isinstance(answer.get("committed"), bool):
            raise self._malformed(sp.COMMIT_APPEND, f"expected {{entry, meta, committed}}, got {answer!r:.200}")
        return answer

    def delete_session(self, session_id: str) -> None:
        # Attachments first and the meta last: until the meta goes, a failed
        # delete leaves a visible session that a retry removes.
        ids = {"session_id": session_id}
        for function_id in (sp.DELETE_ATTACHMENTS, sp.DELETE_ACTIVE_LEAF, sp.DELETE_ENTRIES, sp.DELETE_META):
            self._ok(function_id, ids)

    # -- attachments -------------------------------------------------------------

    def put_attachment(self, meta: AttachmentMeta, chunks: Iterable[bytes]) -> None:
        data = b"".join(chunks)  # exhausted first: the producer completes `meta` (its hash) at the end
        self._ok(sp.PUT_ATTACHMENT, {"meta": meta, "data": base64.b64encode(data).decode("ascii")})

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
        answer = self._call(sp.DELETE_ATTACHMENT, {"session_id": session_id, "attachment_id": attachment_id})
        return bool(self._field(sp.DELETE_ATTACHMENT, answer, "deleted", bool))
