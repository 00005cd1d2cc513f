"""Typed helpers over the functions: transcript, edit, regenerate,
alternatives, abort, set_system_prompt and system_prompt.

They are built on the typed methods (``typed.py``), so they validate, fail
and fire events exactly as those functions do; none is a wire function.
The async flavour (:class:`AsyncHelpers`) runs the same sync helper on the
manager's thread pool (``transcript``: an async iterator paging with
``await``). See ``docs/helpers.md``.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, Literal, TypeVar, overload

from .._service.service import SessionService
from .._service.siblings import siblings
from .._wire.api import AppendResponse, GetMessageResponse, MessageItem, MessagesResponse
from .._wire.models import (
    AssistantMessage,
    FunctionCallBlock,
    FunctionResultBlock,
    FunctionResultMessage,
    MessageEntry,
    Role,
)
from .._wire.views import Alternative, TranscriptItem, TranscriptPage
from ..errors import ENTRY_NOT_FOUND, INVALID_CURSOR, INVALID_ENTRY_KIND, SessionError, invalid_request, not_found
from ..messages import Content, custom, function_result_message, now_ms
from .typed import AsyncTypedMethods, TypedMethods
from .typed_support import as_content, check_limit, payload

T = TypeVar("T")

ABORTED = "The call was aborted before it returned a result."
# The custom entry a system prompt is kept in (docs/helpers.md, "System prompts").
SYSTEM_PROMPT = "system_prompt"


class Helpers(TypedMethods):
    """The typed helpers of :class:`~session_manager.SessionManager`: edit,
    regenerate, alternatives, abort, transcript, set_system_prompt, system_prompt."""

    service: SessionService

    def _entry(self, session_id: str, entry_id: str) -> MessageEntry:
        """A message entry, or the error naming ``entry_id``."""
        if not isinstance(entry_id, str) or not entry_id:
            raise invalid_request("entry_id: expected a non-empty string")
        found: GetMessageResponse | None = self.get_message(session_id, entry_id=entry_id, include_image_data=True)
        if found is None:
            if self.get(session_id) is None:
                raise not_found(session_id)
            raise SessionError(ENTRY_NOT_FOUND, f"entry_id: entry {entry_id} does not exist in session {session_id}")
        if not isinstance(found.entry, MessageEntry):
            raise SessionError(INVALID_ENTRY_KIND, f"entry_id: {entry_id} is a custom entry, not a message")
        return found.entry

    def edit(self, session_id: str, entry_id: str, content: str | Sequence[Content]) -> AppendResponse:
        """Append an edited version of message ``entry_id`` and make it the active leaf.

        The new entry is a sibling of ``entry_id`` (same parent, same role, same
        message fields) with ``content`` (a string is one text block) and a new
        timestamp; an assistant message's ``usage`` is left out (it counted the
        original). The original stays on its branch (see :meth:`alternatives`).
        Fires ``session::on-message-added`` as ``append`` does.

        Raises :class:`~session_manager.SessionError`: ``session/entry_not_found``
        (unknown ``entry_id``), ``session/invalid_entry_kind`` (a custom entry),
        ``session/invalid_request`` for a root entry: no function appends a second
        root, so start sessions with a custom entry (e.g. :meth:`set_system_prompt`)
        to make their first message editable.
        """
        new_content = as_content(content)
        entry = self._entry(session_id, entry_id)
        if entry.parent_id is None:
            raise invalid_request(f"entry_id: {entry_id} is the session's first entry (no parent), so no sibling "
                                  "can be appended; start sessions with a custom entry to edit their first message")
        update: dict[str, Any] = {"content": new_content, "timestamp": now_ms()}
        if isinstance(entry.message, AssistantMessage):
            update["usage"] = None
        return self.append(session_id, message=entry.message.model_copy(update=update), parent_id=entry.parent_id)

    def regenerate(self, session_id: str, entry_id: str) -> str:
        """Move the active leaf to the parent of assistant message ``entry_id``
        and return the parent's id: the next ``append`` is an alternative reply
        (a sibling of ``entry_id``). Event-silent, as ``set_active_leaf``.

        Raises ``session/entry_not_found`` (unknown ``entry_id``),
        ``session/invalid_entry_kind`` (not an assistant message) or
        ``session/invalid_request`` (a root entry: it has no parent).
        """
        entry = self._entry(session_id, entry_id)
        if entry.message.role != "assistant":
            raise SessionError(INVALID_ENTRY_KIND, f"entry_id: {entry_id} is a {entry.message.role} message; "
                                                   "regenerate takes an assistant message")
        if entry.parent_id is None:
            raise invalid_request(f"entry_id: {entry_id} is the session's first entry (no parent to reply to)")
        return self.set_active_leaf(session_id, entry_id=entry.parent_id).active_leaf

    def alternatives(self, session_id: str, entry_id: str) -> builtins.list[Alternative]:
        """Every version of the turn ``entry_id`` belongs to: the entries with
        its parent (itself included; the roots for a root), in the order they
        were appended, ``active`` marking the one on the active path (none when
        the active path runs elsewhere). The list a UI pages through ("2 / 3").

        Raises ``session/not_found`` or ``session/entry_not_found``.
        """
        if not isinstance(entry_id, str) or not entry_id:
            raise invalid_request("entry_id: expected a non-empty string")
        self.get(session_id)  # a closed manager and a bad session id fail as every function does
        found = siblings(self.service, session_id, entry_id)
        out: builtins.list[Alternative] = []
        for raw in found.entries:
            entry = GetMessageResponse.model_validate({"entry": raw}).entry
            out.append(Alternative(entry, raw["id"] in found.active))
        return out

    def abort(self, session_id: str, entry_id: str, *, reason: str = ABORTED) -> builtins.list[str]:
        """Close a streamed assistant reply that was cut off (by the user, a
        timeout, a crash): every ``function_call`` block of ``entry_id`` that has
        no result on the active path gets an error ``function_result`` message
        (``is_error: true``, text ``reason``), appended at the active leaf in
        the order of the calls, so the next model call sees a valid transcript.
        The partial text is already stored; nothing else changes.

        Returns the ids of the results it appended (or found appended by a
        concurrent abort); empty when every call already had a result.
        Safe to repeat and to run twice at once: each result has the entry id
        ``<entry_id>.abort.<n>`` (``n``: the block's position), and ``append``
        with a known id is a no-op. Fires ``session::on-message-added`` per result.

        Raises ``session/entry_not_found``, ``session/invalid_entry_kind`` (not
        an assistant message) or ``session/invalid_request`` (``entry_id`` not on
        the active path: switch to it with ``set_active_leaf`` first).
        """
        entry = self._entry(session_id, entry_id)
        if entry.message.role != "assistant":
            raise SessionError(INVALID_ENTRY_KIND, f"entry_id: {entry_id} is a {entry.message.role} message; "
                                                   "abort takes an assistant message")
        calls = [(i, b) for i, b in enumerate(entry.message.content) if isinstance(b, FunctionCallBlock)]
        try:
            answered = _answered(self.transcript(session_id, after_entry_id=entry_id))
        except SessionError as e:
            if e.code != INVALID_CURSOR:
                raise
            raise invalid_request(f"entry_id: {entry_id} is not on the active path of session {session_id} "
                                  "(set_active_leaf to its branch first)") from None
        appended: builtins.list[str] = []
        for i, call in calls:
            if call.id in answered:
                continue
            result = function_result_message(call, reason, is_error=True)
            appended.append(self.append(session_id, message=result, entry_id=f"{entry_id}.abort.{i}").entry_id)
        return appended

    @overload
    def transcript(self, session_id: str, *, roles: Sequence[Role] | None = None, from_entry_id: str | None = None,
                   after_entry_id: str | None = None, include_custom: Literal[False] = False,
                   include_image_data: bool | None = None, page_size: int | None = None) -> Iterator[TranscriptItem]:
        ...

    @overload
    def transcript(self, session_id: str, *, roles: Sequence[Role] | None = None, from_entry_id: str | None = None,
                   after_entry_id: str | None = None, include_custom: bool,
                   include_image_data: bool | None = None, page_size: int | None = None) -> Iterator[MessageItem]:
        ...

    def transcript(self, session_id: str, *, roles: Sequence[Role] | None = None, from_entry_id: str | None = None,
                   after_entry_id: str | None = None, include_custom: bool = False,
                   include_image_data: bool | None = None, page_size: int | None = None) -> Iterator[MessageItem]:
        """Every item of the active path (or of root -> ``from_entry_id``),
        oldest first: ``session::messages`` paged to the end, ``page_size``
        items a call (default and most: ``max_list_limit``). The filters are
        those of :meth:`messages`. Without custom entries (the default) each
        item is a :class:`~session_manager.types.TranscriptItem`, whose
        ``message`` is never ``None``: ``item.message.text`` type-checks as is.

        The first page is read at once (bad input raises here); later pages as
        the iteration reaches them, so messages appended meanwhile are included,
        and a switch of the active branch meanwhile raises ``session/invalid_cursor``.
        """
        check_limit(page_size, self._list_limit_cap())
        request = _transcript_request(roles, from_entry_id, after_entry_id, include_custom, include_image_data,
                                      page_size if page_size is not None else self._list_limit_cap())
        model = MessagesResponse if include_custom else TranscriptPage
        first = model.model_validate(self.call("session::messages", {"session_id": session_id, **request}))
        return self._rest(session_id, model, request, first)

    def _rest(self, session_id: str, model: type[MessagesResponse] | type[TranscriptPage], request: dict[str, Any],
              page: MessagesResponse | TranscriptPage) -> Iterator[MessageItem]:
        while True:
            yield from page.messages
            if page.next_cursor is None:
                return
            body = {"session_id": session_id, **request, "cursor": page.next_cursor}
            page = model.model_validate(self.call("session::messages", body))

    def set_system_prompt(self, session_id: str, text: str) -> AppendResponse:
        """Set the session's system prompt from here on: appends a custom entry
        ``{custom_type: "system_prompt", data: {text}}`` at the active leaf (fires
        ``session::on-message-added`` as ``append`` does). It is part of the
        branch: a fork copies it, a branch made before it does not see it, and
        ``messages`` leaves it out unless ``include_custom``. A session started
        with it has every message under a parent, so even the first is editable.
        """
        if not isinstance(text, str):
            raise invalid_request(f"text: expected a string, got {type(text).__name__}")
        return self.append(session_id, custom=custom(SYSTEM_PROMPT, {"text": text}))

    def system_prompt(self, session_id: str) -> str | None:
        """The system prompt in effect at the active leaf: the text of the last
        ``system_prompt`` custom entry on the active path, or ``None`` (reads the
        whole path). Raises ``session/not_found`` for an unknown session."""
        found: str | None = None
        for item in self.transcript(session_id, include_custom=True):
            payload = item.custom
            if payload is not None and payload.custom_type == SYSTEM_PROMPT and isinstance(payload.data, dict):
                text = payload.data.get("text")
                if isinstance(text, str):
                    found = text
        return found


class AsyncHelpers(AsyncTypedMethods):
    """The typed helpers as coroutines (``await asm.edit(...)``): each runs the
    sync helper of the same name on the manager's thread pool."""

    async def _in_pool(self, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        raise NotImplementedError

    def _sync(self) -> Helpers:
        raise NotImplementedError

    async def edit(self, session_id: str, entry_id: str, content: str | Sequence[Content]) -> AppendResponse:
        """As :meth:`Helpers.edit`."""
        return await self._in_pool(self._sync().edit, session_id, entry_id, content)

    async def regenerate(self, session_id: str, entry_id: str) -> str:
        """As :meth:`Helpers.regenerate`."""
        return await self._in_pool(self._sync().regenerate, session_id, entry_id)

    async def alternatives(self, session_id: str, entry_id: str) -> builtins.list[Alternative]:
        """As :meth:`Helpers.alternatives`."""
        return await self._in_pool(self._sync().alternatives, session_id, entry_id)

    async def abort(self, session_id: str, entry_id: str, *, reason: str = ABORTED) -> builtins.list[str]:
        """As :meth:`Helpers.abort`."""
        return await self._in_pool(self._sync().abort, session_id, entry_id, reason=reason)

    async def set_system_prompt(self, session_id: str, text: str) -> AppendResponse:
        """As :meth:`Helpers.set_system_prompt`."""
        return await self._in_pool(self._sync().set_system_prompt, session_id, text)

    async def system_prompt(self, session_id: str) -> str | None:
        """As :meth:`Helpers.system_prompt`."""
        return await self._in_pool(self._sync().system_prompt, session_id)

    @overload
    def transcript(self, session_id: str, *, roles: Sequence[Role] | None = None, from_entry_id: str | None = None,
                   after_entry_id: str | None = None, include_custom: Literal[False] = False,
                   include_image_data: bool | None = None,
                   page_size: int | None = None) -> AsyncIterator[TranscriptItem]:
        ...

    @overload
    def transcript(self, session_id: str, *, roles: Sequence[Role] | None = None, from_entry_id: str | None = None,
                   after_entry_id: str | None = None, include_custom: bool,
                   include_image_data: bool | None = None, page_size: int | None = None) -> AsyncIterator[MessageItem]:
        ...

    def transcript(self, session_id: str, *, roles: Sequence[Role] | None = None, from_entry_id: str | None = None,
                   after_entry_id: str | None = None, include_custom: bool = False,
                   include_image_data: bool | None = None, page_size: int | None = None) -> AsyncIterator[MessageItem]:
        """As :meth:`Helpers.transcript`, for ``async for``; every page (the first
        too) is read as the iteration reaches it."""
        check_limit(page_size, self._list_limit_cap())
        request = _transcript_request(roles, from_entry_id, after_entry_id, include_custom, include_image_data,
                                      page_size if page_size is not None else self._list_limit_cap())
        return self._pages(session_id, MessagesResponse if include_custom else TranscriptPage, request)

    async def _pages(self, session_id: str, model: type[MessagesResponse] | type[TranscriptPage],
                     request: dict[str, Any]) -> AsyncIterator[MessageItem]:
        body = {"session_id": session_id, **request}
        while True:
            page = model.model_validate(await self.call("session::messages", body))
            for item in page.messages:
                yield item
            if page.next_cursor is None:
                return
            body = {**body, "cursor": page.next_cursor}


def _answered(items: Iterator[MessageItem]) -> set[str]:
    """The function-call ids a result on these items answers (result messages and result blocks)."""
    out: set[str] = set()
    for item in items:
        message = item.message
        if message is None:
            continue
        if isinstance(message, FunctionResultMessage):
            out.add(message.function_call_id)
        out.update(b.function_call_id for b in message.content if isinstance(b, FunctionResultBlock))
    return out


def _transcript_request(roles: Sequence[Role] | None, from_entry_id: str | None, after_entry_id: str | None,
                        include_custom: bool, include_image_data: bool | None, limit: int | None) -> dict[str, Any]:
    return payload(roles=list(roles) if isinstance(roles, tuple) else roles, from_entry_id=from_entry_id,
                   after_entry_id=after_entry_id, include_custom=include_custom or None,
                   include_image_data=include_image_data, limit=limit)
