"""An in-memory adapter: the same semantics as the fs store, nothing durable.

Useful for embedding in tests of applications, and as the second adapter
the shared store test suite runs against.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable

from ._core.state import SessionState, StateBackedStore
from .base import AttachmentMeta, Commit, Meta
from .search_index import Matches, TermIndex
from .search_text import Query


class MemoryStore(StateBackedStore):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, SessionState] = {}
        self._attachments: dict[str, dict[str, tuple[AttachmentMeta, bytes]]] = {}
        self._search = TermIndex()  # kept up to date by every commit and delete

    def _state(self, session_id: str, create: bool = False) -> SessionState | None:
        with self._lock:
            state = self._sessions.get(session_id)
            if state is None and create:
                state = self._sessions[session_id] = SessionState()
                state.loaded = True
            return state

    def list_metas(self) -> list[Meta]:
        with self._lock:
            return [s.meta for s in self._sessions.values() if s.meta is not None]

    def commit(self, session_id: str, commit: Commit) -> Commit:
        state = self._state(session_id, create=True)
        assert state is not None
        with state.lock:
            commit = state.resolve(commit)
            state.apply(commit)
            for entry in commit.entries:  # under the session's lock: revisions land in order
                self._search.put(session_id, entry)
        return commit

    def search(self, query: Query, sessions: Collection[str] | None,
               roles: Collection[str] | None) -> Matches:
        """From the in-memory index."""
        return self._search.search(query, sessions, roles)

    def delete_session(self, session_id: str) -> bool:
        with self._lock:
            state = self._sessions.pop(session_id, None)
            attachments = self._attachments.pop(session_id, None)
        if state is not None:
            with state.lock:
                state.clear()
                self._search.drop(session_id)
        return state is not None or bool(attachments)

    def put_attachment(self, meta: AttachmentMeta, chunks: Iterable[bytes]) -> None:
        data = b"".join(chunks)
        with self._lock:
            self._attachments.setdefault(meta["session_id"], {})[meta["attachment_id"]] = (dict(meta), data)

    def get_attachment_meta(self, session_id: str, attachment_id: str) -> AttachmentMeta | None:
        with self._lock:
            found = self._attachments.get(session_id, {}).get(attachment_id)
        return dict(found[0]) if found else None

    def read_attachment(self, session_id: str, attachment_id: str) -> bytes | None:
        with self._lock:
            found = self._attachments.get(session_id, {}).get(attachment_id)
        return found[1] if found else None

    def list_attachments(self, session_id: str) -> list[AttachmentMeta]:
        with self._lock:
            return [dict(m) for m, _ in self._attachments.get(session_id, {}).values()]

    def delete_attachment(self, session_id: str, attachment_id: str) -> bool:
        with self._lock:
            return self._attachments.get(session_id, {}).pop(attachment_id, None) is not None
