"""A root -> leaf path read window by window from a main (``session::store::read-path``).

The domain's readers index a path (``len``, ``path[i]``, ``index_of``); over
the bridge each window they touch is one call of :data:`CHUNK` entries, so a
page costs O(page) however long the session. The leaf is pinned when the
path is taken: the entries on a fixed leaf's chain never change place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ...errors import STORAGE, SessionError, StoreError, Vanished
from ..path import EntryPath

Entry = dict[str, Any]
# fetch(start=..., count=..., around=...) -> {length, start, index, entries}
Fetch = Callable[..., dict[str, Any]]

CHUNK = 64


class RemotePath(EntryPath):
    """An :class:`EntryPath` whose entries are fetched on first use."""

    __slots__ = ("_at", "_fetch", "_leaf", "_length", "_session_id", "_where")

    def __init__(self, fetch: Fetch, session_id: str, leaf: str) -> None:
        super().__init__([], {})
        self._fetch = fetch
        self._session_id = session_id
        self._leaf = leaf
        self._length: int | None = None
        self._at: dict[int, Entry] = {}
        self._where: dict[str, int] = {}

    def _load(self, **window: Any) -> dict[str, Any]:
        try:
            answer = self._fetch(**window)
        except StoreError as e:
            if self._length is None or isinstance(e, Vanished):
                # The first window is fetched inside the store's path(), where store errors are
                # mapped; a session deleted meanwhile is mapped at the host's edge (not_found).
                raise
            # Later windows are read after the readers' storage_errors() block: a failing
            # one is the session/storage answer itself, never a half page.
            raise SessionError(STORAGE, str(e)) from None
        if self._length is not None and answer["length"] != self._length:
            # A pinned leaf's chain keeps its length: this is another session under the same id
            # (deleted and created again on the main since the first window), as a local reader hears.
            raise Vanished(self._session_id, f"session {self._session_id} was deleted during the read")
        self._length = answer["length"]
        for offset, entry in enumerate(answer["entries"]):
            i = answer["start"] + offset
            self._at[i] = entry
            self._where[entry["id"]] = i
        return answer

    def __len__(self) -> int:
        if self._length is None:
            # The tail first: the readers start there or at the root, and a
            # session shorter than a window is then read in this one call.
            self._load(start=-CHUNK, count=CHUNK)
        assert self._length is not None
        return self._length

    def __getitem__(self, index: int) -> Entry:
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(index)
        entry = self._at.get(index)
        if entry is None:
            # Walking backwards (the next one is loaded): the window ends here.
            start = index - CHUNK + 1 if index + 1 in self._at else index
            self._load(start=max(0, start), count=CHUNK)
            entry = self._at[index]
        return entry

    def __iter__(self) -> Iterator[Entry]:
        for i in range(len(self)):
            yield self[i]

    def index_of(self, entry_id: str) -> int | None:
        i = self._where.get(entry_id)
        if i is not None:
            return i
        return self._load(around=entry_id, start=-(CHUNK // 2), count=CHUNK).get("index")  # null is left out

    @property
    def leaf(self) -> str | None:
        return self._leaf if len(self) else None
