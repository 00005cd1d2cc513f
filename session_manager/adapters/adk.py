"""Google ADK sessions: ``SessionManagerSessionService`` is a
``BaseSessionService`` over an open :class:`~session_manager.SessionManager`
(or an :class:`~session_manager.aio.AsyncSessionManager`)::

    from google.adk.runners import Runner
    from session_manager.adapters.adk import SessionManagerSessionService

    with session_manager.open("./data/sessions") as sm:
        runner = Runner(agent=agent, app_name="weather", session_service=SessionManagerSessionService(sm))

It behaves as ADK's ``InMemorySessionService`` (user scoping, ``app:`` /
``user:`` / ``temp:`` state, ``GetSessionConfig``, ordering of
``list_sessions``, ``AlreadyExistsError``, ``SessionNotFoundError``) and
reads back events equal to those appended, with the session's exact
``last_update_time``. It adds what ADK lacks: :meth:`fork_session` (a new
session holding the events up to any event) and appends from several
processes on one session with no event lost (each event is one
``session::append``; the store serializes them). The layout in the store is
described in :mod:`session_manager.adapters._adk_codec`.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.platform import time as platform_time
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session

from .._hosts.embedded import SessionManager
from ..errors import NOT_FOUND, SessionError
from ._adk_codec import (
    APP_PREFIX,
    KIND_APP_STATE,
    KIND_SESSION,
    KIND_USER_STATE,
    ORIGIN_KEY,
    STATE_TYPE,
    TEMP_PREFIX,
    USER_PREFIX,
    Json,
    app_state_key,
    delta_entry_id,
    encode_event,
    event_data,
    event_entry_id,
    fold_deltas,
    fold_session_state,
    json_state,
    session_key,
    session_metadata,
    split_state,
    user_state_key,
)
from ._settle import settled

__all__ = ["SessionManagerSessionService"]

T = TypeVar("T")
_PAGE = 1_000  # entries per read; the store clamps it to its max_list_limit
_ENSURED_KEPT = 4_096  # app / user state sessions remembered as existing (then forgotten at once)


async def _run(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` on a worker thread. A cancelled caller (once or repeatedly) still
    waits until the write has happened or failed before ``CancelledError`` surfaces:
    the caller never sees a cancellation whose write lands later."""
    return await settled(asyncio.to_thread(fn, *args))


class SessionManagerSessionService(BaseSessionService):
    """ADK's ``BaseSessionService`` stored in a session-manager store (see the module docstring)."""

    def __init__(self, sm: Any) -> None:
        self._sm: SessionManager = sm if isinstance(sm, SessionManager) else sm.sync
        self._ensured: set[str] = set()  # state sessions known to exist (re-made if deleted)
        self._ensured_lock = threading.Lock()

    # -- the BaseSessionService surface ----------------------------------------------

    async def create_session(self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None,
                             session_id: str | None = None) -> Session:
        """A new session (``session_id`` stripped; a blank or absent one is generated);
        ``AlreadyExistsError`` when the user already has a session with that id."""
        return await _run(self._create, app_name, user_id, state, session_id)

    async def get_session(self, *, app_name: str, user_id: str, session_id: str,
                          config: GetSessionConfig | None = None) -> Session | None:
        """The session with its events (``config`` limits them as ``InMemorySessionService``
        does) and its merged state, or ``None``."""
        return await _run(self._get, app_name, user_id, session_id, config)

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        """The app's sessions (one user's, or every user's), without events, oldest update first."""
        return await _run(self._list, app_name, user_id)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session (a no-op when absent); shared ``app:`` / ``user:`` state stays."""
        await _run(self._delete, app_name, user_id, session_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's ``user:`` state in the app, keys without the prefix (``{}`` when none)."""
        return await _run(self._read_state, user_state_key(app_name, user_id))

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event`` and apply it to ``session`` as ``BaseSessionService.append_event`` does
        (partial events are not stored, ``temp:`` keys never persist, an event
        ``session`` already holds is not stored again);
        ``SessionNotFoundError`` when the session is not stored."""
        if event.partial:
            return event
        # A re-delivery of an event the session already holds (the same object or an
        # equal copy: a retry) is not stored twice, as InMemorySessionService does.
        if any(e == event for e in session.events if e.id == event.id):
            return event
        data = event.model_dump(mode="json", exclude_none=True)
        delta = (data.get("actions") or {}).get("state_delta")
        if isinstance(delta, dict):
            data["actions"]["state_delta"] = {k: v for k, v in delta.items() if not k.startswith(TEMP_PREFIX)}
        stored = threading.Event()
        try:
            await _run(self._store_event, session.app_name, session.user_id, session.id, data, stored)
        except asyncio.CancelledError:
            if stored.is_set():  # the write landed before the cancellation surfaced: show it
                await self._apply(session, event)
            raise
        await self._apply(session, event)
        return event

    async def _apply(self, session: Session, event: Event) -> None:
        """Once stored: the caller's session shows the event, its state (``temp:``
        keys included, for the rest of the invocation) and its time; once, when an overlapping
        call with the same event (the store's replay of it) has shown it already."""
        if any(e is event or e == event for e in session.events if e.id == event.id):
            return
        await super().append_event(session, event)
        session.last_update_time = event.timestamp

    async def fork_session(self, *, app_name: str, user_id: str, session_id: str, event_id: str | None = None,
                           new_session_id: str | None = None) -> Session:
        """A new session of the same user holding the events of ``session_id`` up to and
        including the event ``event_id`` (all of them when ``None``), and the session
        state as it was there; the source is untouched. ``SessionNotFoundError`` when the
        source or the event is absent, ``AlreadyExistsError`` when ``new_session_id`` is taken."""
        return await _run(self._fork, app_name, user_id, session_id, event_id, new_session_id)

    # -- synchronous halves (run on a worker thread) ----------------------------------

    def _call(self, function_id: str, payload: Json) -> Any:
        return self._sm.call(function_id, payload)

    def _create(self, app_name: str, user_id: str, state: dict[str, Any] | None, session_id: str | None) -> Session:
        sid = (session_id.strip() if session_id else "") or str(uuid.uuid4())
        app_delta, user_delta, own = split_state(json_state(state or {}))
        created = platform_time.get_time()
        self._new_session(app_name, user_id, sid, session_metadata(app_name, user_id, sid, created, own))
        if app_delta:
            self._add_delta(app_state_key(app_name), _app_meta(app_name), app_delta, sid)
        if user_delta:
            self._add_delta(user_state_key(app_name, user_id), _user_meta(app_name, user_id), user_delta, sid)
        session = Session(id=sid, app_name=app_name, user_id=user_id, state=own, last_update_time=created)
        return self._merged(session)

    def _new_session(self, app_name: str, user_id: str, sid: str, metadata: Json) -> str:
        key = session_key(app_name, user_id, sid)
        made = self._call("session::ensure", {"session_id": key, "title": sid, "metadata": metadata,
                                              "description": f"ADK session of {user_id} in {app_name}"})
        if not made["created"]:
            raise AlreadyExistsError(f"Session with id {sid} already exists.")
        return key

    def _get(self, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None) -> Session | None:
        sid = session_id.strip() if session_id else session_id
        loaded = self._load(session_key(app_name, user_id, sid))
        if loaded is None:
            return None
        metadata, events = loaded
        state = fold_session_state(metadata.get("adk_state") or {}, events)
        last = events[-1]["timestamp"] if events else metadata["adk_created"]
        chosen = _select(events, config)
        session = Session(id=sid, app_name=app_name, user_id=user_id, state=state, last_update_time=last,
                          events=[Event.model_validate(e) for e in chosen])
        return self._merged(session)

    def _load(self, key: str) -> tuple[Json, list[Json]] | None:
        """The session's metadata and the JSON of its events in order, or ``None`` when absent."""
        found = self._call("session::get", {"session_id": key})
        if found is None:
            return None
        items = self._items(key)
        if items is None:
            return None  # deleted between the two reads
        events = [d for d in map(event_data, items) if d is not None]
        return dict(found["meta"].get("metadata") or {}), events

    def _items(self, key: str) -> list[Json] | None:
        """Every entry of the session's active path, oldest first (``None`` when it is absent)."""
        out: list[Json] = []
        payload: Json = {"session_id": key, "include_custom": True, "limit": _PAGE}
        try:
            while True:
                page = self._call("session::messages", payload)
                out += page["messages"]
                if page.get("next_cursor") is None:
                    return out
                payload["cursor"] = page["next_cursor"]
        except SessionError as e:
            if e.code == NOT_FOUND:
                return None
            raise

    def _list(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        wanted: Json = {"adk_kind": KIND_SESSION, "app_name": app_name}
        if user_id is not None:
            wanted["user_id"] = user_id
        sessions: list[Session] = []
        payload: Json = {"metadata": wanted, "order": "created_asc", "limit": _PAGE}
        while True:
            page = self._call("session::list", payload)
            for meta in page["sessions"]:
                listed = self._listed(meta)
                if listed is not None:
                    sessions.append(listed)
            if page.get("next_cursor") is None:
                break
            payload["cursor"] = page["next_cursor"]
        app_state = self._read_state(app_state_key(app_name))
        users = {s.user_id: self._read_state(user_state_key(app_name, s.user_id)) for s in sessions}
        for s in sessions:
            _merge(s, app_state, users[s.user_id])
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    def _listed(self, meta: Json) -> Session | None:
        metadata = meta.get("metadata") or {}
        items = self._items(meta["session_id"])
        if items is None:
            return None  # deleted since the listing
        events = [d for d in map(event_data, items) if d is not None]
        return Session(id=metadata["adk_session_id"], app_name=metadata["app_name"], user_id=metadata["user_id"],
                       state=fold_session_state(metadata.get("adk_state") or {}, events),
                       last_update_time=events[-1]["timestamp"] if events else metadata["adk_created"])

    def _delete(self, app_name: str, user_id: str, session_id: str) -> None:
        sid = session_id.strip() if session_id else session_id
        self._call("session::delete", {"session_id": session_key(app_name, user_id, sid)})

    def _store_event(self, app_name: str, user_id: str, sid: str, data: Json, stored: threading.Event) -> None:
        message, custom, origin = encode_event(data)
        key, entry_id = session_key(app_name, user_id, sid), event_entry_id(data)
        payload: Json = {"session_id": key, "entry_id": entry_id}  # an equal event again: a replay
        if message is not None:
            payload["message"] = message
            payload["origin"] = origin
        else:
            payload["custom"] = custom
        try:
            written = self._call("session::append", payload)
        except SessionError as e:
            if e.code == NOT_FOUND:
                raise SessionNotFoundError(f"Session {sid} not found.") from e
            raise
        stored.set()
        delta = (data.get("actions") or {}).get("state_delta")
        app_delta, user_delta, _ = split_state(delta if isinstance(delta, dict) else {})
        # After the event: a session that is not stored changes no shared state.
        # Replayed with its event (whose replay answers the entry's own time), never re-applied;
        # the same event in the session deleted and created again is a new entry: a new delta.
        delta_id = delta_entry_id(key, entry_id, written["timestamp"])
        if app_delta:
            self._add_delta(app_state_key(app_name), _app_meta(app_name), app_delta, sid, delta_id)
        if user_delta:
            self._add_delta(user_state_key(app_name, user_id), _user_meta(app_name, user_id), user_delta, sid,
                            delta_id)

    def _add_delta(self, key: str, metadata: Json, delta: Json, sid: str, entry_id: str | None = None) -> None:
        """Append one delta to a shared-state session, creating it on first use."""
        payload: Json = {"session_id": key, "custom": {"custom_type": STATE_TYPE, "data": {"delta": delta}},
                         "origin": {ORIGIN_KEY: {"session_id": sid}}}
        if entry_id is not None:
            payload["entry_id"] = entry_id
        if key not in self._ensured:
            self._ensure_state(key, metadata)
        try:
            self._call("session::append", payload)
        except SessionError as e:
            if e.code != NOT_FOUND:
                raise
            self._ensure_state(key, metadata)  # deleted since (a purge): start it afresh
            self._call("session::append", payload)

    def _ensure_state(self, key: str, metadata: Json) -> None:
        title = f"ADK {metadata['adk_kind'].replace('_', ' ')}: " + " / ".join(
            str(metadata[k]) for k in ("app_name", "user_id") if k in metadata)
        self._call("session::ensure", {"session_id": key, "title": title, "metadata": metadata})
        with self._ensured_lock:
            if len(self._ensured) >= _ENSURED_KEPT:
                self._ensured.clear()  # (bounded: one forgotten is ensured again on its next delta)
            self._ensured.add(key)

    def _read_state(self, key: str) -> Json:
        items = self._items(key)
        return json_state(fold_deltas(items)) if items else {}

    def _merged(self, session: Session) -> Session:
        app_state = self._read_state(app_state_key(session.app_name))
        user_state = self._read_state(user_state_key(session.app_name, session.user_id))
        _merge(session, app_state, user_state)
        return session

    def _fork(self, app_name: str, user_id: str, session_id: str, event_id: str | None,
              new_session_id: str | None) -> Session:
        source = session_id.strip() if session_id else session_id
        key = session_key(app_name, user_id, source)
        found = self._call("session::get", {"session_id": key})
        items = self._items(key) if found is not None else None
        if found is None or items is None:
            raise SessionNotFoundError(f"Session {source} not found.")
        kept = items
        if event_id is not None:
            ends = [i for i, item in enumerate(items) if (event_data(item) or {}).get("id") == event_id]
            if not ends:
                raise SessionNotFoundError(f"Event {event_id} not found in session {source}.")
            kept = items[: ends[0] + 1]
        sid = (new_session_id.strip() if new_session_id else "") or str(uuid.uuid4())
        metadata = dict(found["meta"].get("metadata") or {})
        metadata.update(adk_session_id=sid, adk_created=platform_time.get_time(),
                        adk_forked_from={"session_id": source, "event_id": event_id})
        new_key = self._new_session(app_name, user_id, sid, metadata)
        for item in kept:
            if event_data(item) is None:
                continue  # another writer's entry: not part of the ADK session
            payload: Json = {"session_id": new_key}  # (its entry id too: a re-delivery to the fork replays)
            payload.update((k, item[k]) for k in ("entry_id", "message", "custom", "origin") if k in item)
            self._call("session::append", payload)
        forked = self._get(app_name, user_id, sid, None)
        if forked is None:
            raise SessionNotFoundError(f"Session {sid} was deleted while it was being forked.")
        return forked


def _app_meta(app_name: str) -> Json:
    return {"adk_kind": KIND_APP_STATE, "app_name": app_name}


def _user_meta(app_name: str, user_id: str) -> Json:
    return {"adk_kind": KIND_USER_STATE, "app_name": app_name, "user_id": user_id}


def _merge(session: Session, app_state: Json, user_state: Json) -> None:
    session.state.update({APP_PREFIX + k: v for k, v in app_state.items()})
    session.state.update({USER_PREFIX + k: v for k, v in user_state.items()})


def _select(events: list[Json], config: GetSessionConfig | None) -> list[Json]:
    """The events ``config`` asks for, as ``InMemorySessionService`` picks them: the newest
    ``num_recent_events``, then the run at the end stamped at or after ``after_timestamp``."""
    if config is None:
        return events
    if config.num_recent_events is not None:
        events = events[-config.num_recent_events:] if config.num_recent_events else []
    if config.after_timestamp is not None:
        start = len(events)
        while start > 0 and events[start - 1]["timestamp"] >= config.after_timestamp:
            start -= 1
        events = events[start:]
    return events
