"""How the ADK session service lays ADK's objects out in the store.

- An ADK session ``(app_name, user_id, id)`` is one session whose id is derived
  from the triple (``adk_s_<hash>``: a lookup is one ``session::get``, and two
  users' sessions with one ADK id never meet). Its ``metadata`` holds the
  triple (``app_name``, ``user_id``, ``adk_session_id``: what tenant filters,
  purge and listing match on), ``adk_kind: "session"``, the creation time and
  the initial session state.
- An event is one entry. One with text is an ordinary ``user`` (author
  ``user``) or ``assistant`` message of its text parts, so search, role filters
  and the viewer see it, with the whole event (``model_dump(mode="json")``) in
  ``origin.adk.event``; one without text is a custom entry ``adk.event`` whose
  data is the event. Reading an entry back validates that JSON, so the event
  equals the one appended. Its entry id is ``adk_e_<digest of that JSON>``:
  an equal event appended again is the store's replay of the entry.
- The shared state lives in one session per app (``adk_a_<hash>``) and one
  per app and user (``adk_u_<hash>``), each entry a custom ``adk.state`` entry
  holding one delta: the state is the fold of the deltas in log order, so
  writers in several processes never overwrite each other's keys (no
  read-modify-write), and the log says which session changed what.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from typing import Any

import orjson

KIND_SESSION = "session"
KIND_APP_STATE = "app_state"
KIND_USER_STATE = "user_state"
EVENT_TYPE = "adk.event"
STATE_TYPE = "adk.state"
ORIGIN_KEY = "adk"

APP_PREFIX = "app:"
USER_PREFIX = "user:"
TEMP_PREFIX = "temp:"

Json = dict[str, Any]
_MAX_SECONDS = 2**53 / 1000  # event times past this (year 285,000+) give their message time 0
Write = tuple[Json | None, Json | None, Json | None]  # (message, custom, origin) of one entry


def _digest(*parts: str) -> str:
    # JSON framing keeps ("a:b", "c") and ("a", "b:c") apart; 128 bits never collide in practice.
    return hashlib.sha256(orjson.dumps(list(parts))).hexdigest()[:32]


def session_key(app_name: str, user_id: str, session_id: str) -> str:
    """The store's id of an ADK session."""
    return f"adk_s_{_digest(app_name, user_id, session_id)}"


def app_state_key(app_name: str) -> str:
    """The store's id of an app's shared (``app:``) state."""
    return f"adk_a_{_digest(app_name)}"


def user_state_key(app_name: str, user_id: str) -> str:
    """The store's id of a user's shared (``user:``) state within an app."""
    return f"adk_u_{_digest(app_name, user_id)}"


def event_entry_id(data: Json) -> str:
    """The entry id of an event's entry: a digest of the event's whole JSON form. An equal
    event appended again (a retry after a failure or a cancellation, a re-delivery through
    a stale copy of the session) is then the store's idempotent replay of that entry:
    stored once, as ADK's in-memory service keeps it; distinct events sharing an ADK id differ."""
    return f"adk_e_{hashlib.sha256(_canonical(data)).hexdigest()[:32]}"


def delta_entry_id(session_key_: str, event_entry: str, stored_at: int) -> str:
    """The entry id, in a shared-state session, of the delta an event's entry (stored at
    ``stored_at``, ms) brought: a replayed event's delta is replayed too, never applied
    again over newer values."""
    return f"adk_d_{_digest(session_key_, event_entry, str(stored_at))}"


def _canonical(data: Json) -> bytes:
    try:
        return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer beyond 64 bits
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def session_metadata(app_name: str, user_id: str, session_id: str, created: float, state: Json) -> Json:
    return {"adk_kind": KIND_SESSION, "app_name": app_name, "user_id": user_id,
            "adk_session_id": session_id, "adk_created": created, "adk_state": state}


def split_state(state: dict[str, Any]) -> tuple[Json, Json, Json]:
    """``(app, user, session)`` deltas of a state mapping, prefixes removed; ``temp:`` keys dropped."""
    app: Json = {}
    user: Json = {}
    session: Json = {}
    for key, value in state.items():
        if key.startswith(APP_PREFIX):
            app[key[len(APP_PREFIX):]] = value
        elif key.startswith(USER_PREFIX):
            user[key[len(USER_PREFIX):]] = value
        elif not key.startswith(TEMP_PREFIX):
            session[key] = value
    return app, user, session


def json_state(state: Json) -> Json:
    """``state`` as JSON data (what the store keeps): values with no JSON form
    become their ``str``, as ADK's database service stores them."""
    from pydantic_core import to_jsonable_python

    out: Json = _json_copy(to_jsonable_python(state, fallback=str))
    return out


def _json_copy(value: Any) -> Any:
    """A fresh copy of JSON data: orjson's round trip, or the standard library's when it
    holds an integer beyond 64 bits (which JSON and the store keep, orjson does not)."""
    try:
        return orjson.loads(orjson.dumps(value))
    except TypeError:  # orjson.JSONEncodeError: "Integer exceeds 64-bit range"
        return json.loads(json.dumps(value))


def encode_event(data: Json) -> Write:
    """The entry for an event's JSON form (see the module docstring)."""
    texts = _texts(data)
    if not texts:
        return None, {"custom_type": EVENT_TYPE, "data": data}, None
    stamp = data.get("timestamp")
    millis = 0
    if isinstance(stamp, (int, float)) and math.isfinite(stamp) and abs(stamp) < _MAX_SECONDS:
        millis = int(stamp * 1000)  # (the event keeps its own time; a message's is in ms, within 2**53)
    blocks = [{"type": "text", "text": t} for t in texts]
    message: Json
    if data.get("author") == "user":
        message = {"role": "user", "content": blocks, "timestamp": millis}
    else:
        stop = "error" if data.get("error_code") else "end"
        message = {"role": "assistant", "content": blocks, "timestamp": millis, "stop_reason": stop,
                   "model": str(data.get("model_version") or ""), "provider": ""}
    return message, None, {ORIGIN_KEY: {"event": data}}


def _texts(data: Json) -> list[str]:
    content = data.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list):
        return []
    return [p["text"] for p in parts
            if isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"] and not p.get("thought")]


def event_data(item: Json) -> Json | None:
    """The event JSON an entry holds, or ``None`` for an entry that is no ADK event."""
    custom = item.get("custom")
    if custom is not None:
        if custom.get("custom_type") == EVENT_TYPE and isinstance(custom.get("data"), dict):
            return dict(custom["data"])
        return None
    origin = (item.get("origin") or {}).get(ORIGIN_KEY)
    if isinstance(origin, dict) and isinstance(origin.get("event"), dict):
        return dict(origin["event"])
    return None


def fold_session_state(initial: Json, events: Iterable[Json]) -> Json:
    """The session-scoped state: the initial state, then each event's plain keys in order."""
    state = dict(initial)
    for data in events:
        actions = data.get("actions")
        delta = actions.get("state_delta") if isinstance(actions, dict) else None
        if isinstance(delta, dict):
            state.update(split_state(delta)[2])
    # A copy: the values must not be the very objects inside the events read with them.
    copied: Json = _json_copy(state)
    return copied


def fold_deltas(items: Iterable[Json]) -> Json:
    """A shared state: the ``adk.state`` deltas of a state session, in log order."""
    state: Json = {}
    for item in items:
        custom = item.get("custom") or {}
        data = custom.get("data")
        if custom.get("custom_type") == STATE_TYPE and isinstance(data, dict) and isinstance(data.get("delta"), dict):
            state.update(data["delta"])
    return state
