"""The builders generated from the wire models: the one place a field is named."""

from __future__ import annotations

from typing import Any

import pytest

from session_manager._wire import api
from session_manager._wire.events import EVENT_MODELS, MessageAddedEvent
from session_manager._wire.models import CustomEntry, MessageEntry, SessionMeta
from session_manager._wire.shape import build, edit, shape
from session_manager._worker.config_client import ConfigStatusResponse


def test_build_follows_the_model_order_and_its_null_rules() -> None:
    # Prevents: a builder that reorders keys (the bytes on disk follow them) or drops a null the contract keeps.
    out = build[MessageAddedEvent](timestamp=5, session_metadata=None, entry_id="e_1", session_id="s_1",
                                   parent_id=None, origin=None)
    assert list(out.items()) == [("session_id", "s_1"), ("entry_id", "e_1"), ("parent_id", None), ("timestamp", 5)]
    assert build[CustomEntry](kind="custom", id="c", timestamp=1, custom_type="t", data=None)["data"] is None
    assert "parent_id" not in build[api.ListResponse](sessions=[])  # not a kept null: left out
    # A plain (non-Wire) model's dump keeps every None, and so does its builder.
    assert build[ConfigStatusResponse](last_outcome="applied", last_error=None, rejected_reloads=0) == {
        "last_outcome": "applied", "last_error": None, "rejected_reloads": 0}


def test_values_pass_through_untouched() -> None:
    # Prevents: a builder that re-validates (3 -> 3.0, unknown stored keys dropped) or copies stored dicts.
    meta: dict[str, Any] = {"session_id": "s", "title": "", "description": "", "status": "idle", "created_at": 1,
                            "updated_at": 1, "message_count": 3, "written_by_a_newer_worker": {"x": 1}}
    response = build[api.GetResponse](meta=meta)
    assert response["meta"] is meta
    message = {"role": "assistant", "content": [], "usage": {"cost_usd": 3}, "model": "m", "provider": "p",
               "stop_reason": "end", "timestamp": 1}
    entry = build[MessageEntry](kind="message", id="e", parent_id=None, timestamp=2, revision=0, message=message)
    assert entry["message"]["usage"]["cost_usd"] == 3 and type(entry["message"]["usage"]["cost_usd"]) is int


def test_unknown_and_missing_fields_are_refused() -> None:
    # Prevents: a misspelt field name silently producing a response without it.
    with pytest.raises(TypeError, match="unexpected keyword argument 'entryid'"):
        build[api.AppendResponse](entryid="e", timestamp=1)
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'timestamp'"):
        build[api.AppendResponse](entry_id="e")
    with pytest.raises(TypeError, match="unexpected keyword argument 'titel'"):
        edit[SessionMeta]({"title": "a"}, titel="b")


def test_edit_keeps_key_order_and_removes_with_none() -> None:
    # Prevents: a meta update moving keys (changing the stored bytes) or keeping a cleared reason.
    meta = {"session_id": "s", "status": "working", "status_reason": "r", "updated_at": 1}
    out = edit[SessionMeta](meta, status="idle", status_reason=None, updated_at=2, draft="d")
    assert list(out) == ["session_id", "status", "updated_at", "draft"]
    assert out == {"session_id": "s", "status": "idle", "updated_at": 2, "draft": "d"}
    assert meta["status_reason"] == "r"  # the stored dict is never changed
    assert edit[MessageEntry]({"id": "e", "parent_id": "p"}, parent_id=None) == {"id": "e", "parent_id": None}


def test_shape_takes_the_model_fields_from_a_base() -> None:
    # Prevents: an event built from a meta picking up fields the event does not carry.
    meta = {"session_id": "s", "title": "T", "description": "", "status": "idle", "metadata": {"o": 1},
            "created_at": 1, "updated_at": 2, "message_count": 0}
    created = shape(EVENT_MODELS["session::on-created"], meta, session_metadata=meta["metadata"])
    assert created == {"session_id": "s", "title": "T", "description": "", "status": "idle", "created_at": 1,
                       "session_metadata": {"o": 1}}


def test_an_editor_of_fixed_fields_is_edit_with_those_fields() -> None:
    # Prevents: the hot path's fixed-field editor ordering new keys, removing with None or naming
    # fields differently from edit (the stored bytes of an update-message depend on it).
    from session_manager._wire.shape import editor

    meta = {"session_id": "s", "status": "working", "status_reason": "r", "updated_at": 1}
    fast = editor(SessionMeta, "updated_at", "draft", "status_reason", "status")
    out = fast(meta, 2, "d", None, "idle")
    assert out == edit[SessionMeta](meta, status="idle", status_reason=None, updated_at=2, draft="d")
    assert list(out) == list(edit[SessionMeta](meta, status="idle", status_reason=None, updated_at=2, draft="d"))
    assert meta["status_reason"] == "r"
    entry = {"id": "e", "message": {"role": "user"}}
    new = editor(MessageEntry, "revision", "message")(entry, 1, {"role": "user", "content": []})
    assert list(new) == list(edit[MessageEntry](entry, message={"role": "user", "content": []}, revision=1))
    assert editor(MessageEntry, "parent_id")({"id": "e", "parent_id": "p"}, None) == {"id": "e", "parent_id": None}
    assert editor(SessionMeta, "updated_at") is editor(SessionMeta, "updated_at")
    with pytest.raises(TypeError, match="no field 'titel'"):
        editor(SessionMeta, "titel")
