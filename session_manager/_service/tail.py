"""``session::messages-tail``: the newest page of the active path, in blocks.

A block is one entry, or one activity run (consecutive calls, results and
wakes) collapsed to what a chat view draws. Everything walks the path
backwards from an end by raw index, so a page costs O(page) however long
the session: custom entries the request leaves out are stepped over, never
listed up front.
"""

from __future__ import annotations

from typing import Any

from .._wire import api
from .._wire.models import MessageEntry
from .._wire.shape import build, edit
from ..errors import INVALID_CURSOR, SessionError, not_found
from ..store.base import Entry
from ..store.path import EntryPath
from .core import Result, ServiceCore
from .storage_errors import mapped, storage_errors
from .transcript import elide_message, is_run_member, item, kept_whole_in_run

__all__ = ["messages_tail"]


class _Walk:
    """Index arithmetic over one path: which entries count, where blocks start."""

    def __init__(self, path: EntryPath, include_custom: bool) -> None:
        self.path = path
        self.include_custom = include_custom
        # Whether each index seen is a run member: a page asks twice per entry (where its
        # block starts, then which items it makes); the entry is classified once.
        self._members: dict[int, bool] = {}
        self._entry = path.__getitem__  # (bound once: the walk's per-entry lookup)
        self._seen: dict[int, Entry] = {}  # the entries classified, for the items (no second lookup)

    def keep(self, i: int) -> bool:
        return self.include_custom or self.path[i].get("kind") == "message"

    def before(self, i: int) -> int:
        """The nearest kept index below ``i``, or -1."""
        i -= 1
        if self.include_custom:
            return i
        while i >= 0 and not self.keep(i):
            i -= 1
        return i

    def member(self, i: int) -> bool:
        found = self._members.get(i)
        if found is None:
            entry = self._seen[i] = self._entry(i)
            found = self._members[i] = is_run_member(entry)
        return found

    def block_start(self, i: int) -> int:
        """The first index of the block ``i`` belongs to."""
        if not self.member(i):
            return i
        while True:
            p = self.before(i)
            if p < 0 or not self.member(p):
                return i
            i = p

    def anchor(self, entry_id: str, name: str) -> int:
        i = self.path.index_of(entry_id)
        if i is None or not self.keep(i):
            raise SessionError(INVALID_CURSOR, f"{name} {entry_id} is not on the active path")
        return i

    def page_start(self, end: int, blocks: int, until: int | None) -> int:
        """Where a page of ``blocks`` blocks ending before ``end`` starts (at
        the latest ``until``, which extends it)."""
        start, taken = end, 0
        if self.include_custom:  # every index kept (the usual request): before(i) is i - 1
            # member(start), written out (once per entry of the page)
            members, seen, entry_at = self._members, self._seen, self._entry
            while taken < blocks and start > 0:
                start, taken = start - 1, taken + 1
                found = members.get(start)
                if found is None:
                    entry = seen[start] = entry_at(start)
                    found = members[start] = is_run_member(entry)
                if found:
                    start = self.block_start(start)
        else:
            while taken < blocks:
                p = self.before(start)
                if p < 0:
                    break
                start, taken = self.block_start(p), taken + 1
        return until if until is not None and until < start else start

    def items(self, start: int, end: int, image_data: bool) -> list[dict[str, Any]]:
        """The items of ``[start, end)``: runs collapsed, the rest whole."""
        out: list[dict[str, Any]] = []
        keep_all, members, seen = self.include_custom, self._members, self._seen
        i = start
        while i < end:
            if not keep_all and not self.keep(i):
                i += 1
            elif not (members[i] if i in members else self.member(i)):
                out.append(item(seen[i], image_data=image_data))  # (member() saw it)
                i += 1
            else:
                run: list[Entry] = []
                while i < end and (not self.keep(i) or self.member(i)):
                    if self.keep(i):
                        run.append(self.path[i])
                    i += 1
                out.extend(_collapsed(run, image_data))
        return out


def _collapsed(run: list[Entry], image_data: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for entry, whole in zip(run, kept_whole_in_run(run), strict=True):
        if whole:
            out.append(item(entry, image_data=image_data))
        else:
            collapsed = edit[MessageEntry](entry, message=elide_message(entry["message"]))
            out.append(item(collapsed, image_data=image_data, elided=True))
    return out


def messages_tail(core: ServiceCore, req: api.MessagesTailRequest) -> Result:
    session_id = req.session_id
    limits = core.limits.current  # (core.page_size, inline: Limits.clamp's steps)
    size = max(1, min(limits.default_list_limit if req.limit is None else req.limit, limits.max_list_limit))
    # A page is a function of the session's state and of these alone.
    memo_key = (session_id, size, req.before_entry_id, req.until_entry_id, req.include_custom is not False,
                req.include_image_data is not False)
    memo = core.tail_pages
    kept = memo.get(memo_key)
    try:  # (storage_errors' mapping, written out: every tail passes here)
        # One call for all three: a store may answer them, and the path's last window, in one
        # read; when the session is still at the version of the page kept, that page is the answer.
        # (Of the meta, only whether the session is there: a store may skip decoding it.)
        found, leaf, version = core.store.leaf_since(session_id, kept[0] if kept is not None else None)
        if not found:
            raise not_found(session_id)
        if version is not None and kept is not None and kept[0] == version:
            return memo.page(kept), []
        path = core.path(session_id, leaf)
    except BaseException as e:
        error = mapped(e)
        if error is not None:
            raise error from None
        raise
    walk = _Walk(path, include_custom=req.include_custom is not False)
    if walk.before(len(path)) < 0:
        with storage_errors():
            core.still_there(session_id)
        return build[api.MessagesTailResponse](messages=[], has_more=False), []
    end = len(path)
    if req.before_entry_id is not None:
        end = walk.block_start(walk.anchor(req.before_entry_id, "before_entry_id"))
    until = None
    if req.until_entry_id is not None:
        until = walk.block_start(walk.anchor(req.until_entry_id, "until_entry_id"))
    start = walk.page_start(end, size, until)
    items = walk.items(start, end, image_data=req.include_image_data is not False)
    oldest = items[0]["entry_id"] if items else None
    page = build[api.MessagesTailResponse](messages=items, has_more=walk.before(start) >= 0, oldest_entry_id=oldest)
    if version is not None:
        # Read from that version on (a later window of the path may be newer: then the
        # session is past that version, and the page kept is never answered).
        core.tail_pages.keep(memo_key, version, page)
    return page, []
