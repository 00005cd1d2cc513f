"""Bad input at the request boundary, through both hosts: each refusal is
``session/invalid_request`` naming the field, fires no event, changes no
state (also after a reopen), and never poisons later reads."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from iii import InvocationError

import session_manager
from session_manager._service.admission import MAX_DEPTH
from session_manager._wire.events import EVENT_FUNCTIONS
from session_manager.clock import ManualClock
from session_manager.errors import INVALID_REQUEST, SessionError
from session_manager.ids import SequentialIds
from session_manager.testing import FakeEngine, serve

Payload = Callable[[Any], tuple[str, dict[str, Any]]]

USER = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 0}


def open_store(where: Path) -> session_manager.SessionManager:
    return session_manager.open(where, ids=SequentialIds(), clock=ManualClock(1_000_000))


def nested(depth: int) -> Any:
    """``depth`` objects, one inside the other."""
    value: Any = "leaf"
    for _ in range(depth):
        value = {"x": value}
    return value


def nested_tuples(depth: int) -> Any:
    """``depth`` levels, one inside the other: tuples (a JSON array each), a list in the middle and
    an object outermost (the metadata fields must be objects)."""
    value: Any = "leaf"
    for level in range(depth - 1):
        value = [value] if level == depth // 2 else (value,)
    return {"x": value}


# The value shapes of the depth tests: objects, and an in-process caller's tuples (JSON arrays).
SHAPES: dict[str, Callable[[int], Any]] = {"objects": nested, "tuples": nested_tuples}


def record_events(sm: session_manager.SessionManager) -> list[tuple[str, dict[str, Any]]]:
    seen: list[tuple[str, dict[str, Any]]] = []
    for fid in EVENT_FUNCTIONS:
        sm.observe({"function_id": fid}, lambda event, fid=fid: seen.append((fid, event)))
    return seen


def view(sm: session_manager.SessionManager) -> Any:
    """Everything a caller can read back."""
    sessions = sm.call("session::list", {"limit": 500})["sessions"]
    return [(meta,
             sm.call("session::messages", {"session_id": meta["session_id"], "include_custom": True}),
             sm.call("session::list-attachments", {"session_id": meta["session_id"]}))
            for meta in sessions]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[session_manager.SessionManager]:
    sm = open_store(tmp_path / "d")
    sm.call("session::create", {"title": "kept", "metadata": {"owner": "u_1"}})
    sm.call("session::append", {"session_id": "s_001", "message": USER})
    yield sm
    sm.close()


# The fields holding free JSON (no model below them), where only a depth bound stops a value.
FREE_JSON: dict[str, Payload] = {
    "create.metadata": lambda v: ("session::create", {"metadata": v}),
    "ensure.metadata": lambda v: ("session::ensure", {"session_id": "chat-1", "metadata": v}),
    "set-meta.metadata": lambda v: ("session::set-meta", {"session_id": "s_001", "metadata": v}),
    "append.custom.data": lambda v: ("session::append", {"session_id": "s_001",
                                                         "custom": {"custom_type": "c", "data": v}}),
    "append.origin": lambda v: ("session::append", {"session_id": "s_001", "message": USER, "origin": v}),
    "append-many.origin": lambda v: ("session::append-many", {"session_id": "s_001", "messages": [USER],
                                                              "origin": v}),
    "list.metadata": lambda v: ("session::list", {"metadata": v}),
}


@pytest.mark.parametrize("case", sorted(FREE_JSON))
@pytest.mark.parametrize(("shape", "depth"), [("objects", MAX_DEPTH), ("objects", 600), ("objects", 900),
                                              ("tuples", MAX_DEPTH), ("tuples", 300)])
def test_a_value_nested_past_the_depth_bound_is_refused_before_any_write(
        store: session_manager.SessionManager, tmp_path: Path, case: str, shape: str, depth: int) -> None:
    # Prevents: metadata / custom data / origin nested ~450-990 deep being accepted (json_payload
    # and the store take one frame per level) and committed, then the response copy (two frames per
    # level) raising RecursionError: a traceback for a write that happened, and every later
    # session::list (metadata) or session::messages (entries) of that store raising it too.
    # Tuples: orjson does not count them toward its depth limit, so admission's orjson depth proof
    # passed them, and the private copy committed them as lists nested past the bound (log lines
    # the reference's serde_json, limited to 128 levels, cannot read).
    events = record_events(store)
    before = view(store)
    fid, payload = FREE_JSON[case](SHAPES[shape](depth))
    with pytest.raises(session_manager.SessionError) as caught:
        store.call(fid, payload)
    assert caught.value.code == INVALID_REQUEST
    top = case.split(".")[1]  # the request field the value is in
    assert caught.value.detail.startswith(f"{top}: ")
    assert f"nested more than {MAX_DEPTH} levels deep" in caught.value.detail
    assert events == []
    assert view(store) == before
    store.close()
    assert view(open_store(tmp_path / "d")) == before


# Where each case's value reads back.
READ_BACK: dict[str, Callable[[session_manager.SessionManager], Any]] = {
    "create.metadata": lambda sm: sm.call("session::get", {"session_id": "s_002"})["meta"]["metadata"],
    "ensure.metadata": lambda sm: sm.call("session::get", {"session_id": "chat-1"})["meta"]["metadata"],
    "set-meta.metadata": lambda sm: sm.call("session::get", {"session_id": "s_001"})["meta"]["metadata"],
    "append.custom.data": lambda sm: sm.call("session::messages", {"session_id": "s_001", "include_custom": True})[
        "messages"][-1]["custom"]["data"],
    "append.origin": lambda sm: sm.call("session::messages", {"session_id": "s_001"})["messages"][-1]["origin"],
    "append-many.origin": lambda sm: sm.call("session::messages", {"session_id": "s_001"})["messages"][-1][
        "origin"],
}


@pytest.mark.parametrize("case", sorted(READ_BACK))
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_value_at_the_depth_bound_round_trips(store: session_manager.SessionManager, tmp_path: Path,
                                                case: str, shape: str) -> None:
    # Prevents: the bound refusing what it promises to keep (the tuples' depth check too), or a
    # value at it read back changed or unreadable (the response and the event copies nest it a few
    # levels deeper still); tuples read back as lists.
    deepest = SHAPES[shape](MAX_DEPTH - 3)  # within the payload object, the field and (custom) its wrapper
    as_json = orjson.loads(orjson.dumps(deepest))
    events = record_events(store)
    fid, payload = FREE_JSON[case](deepest)
    store.call(fid, payload)
    assert len(events) == 1  # delivered: the observer's copy of the event is as deep
    assert READ_BACK[case](store) == as_json
    state = view(store)
    store.close()
    reopened = open_store(tmp_path / "d")
    assert READ_BACK[case](reopened) == as_json
    assert view(reopened) == state


def test_brackets_inside_text_are_not_nesting(store: session_manager.SessionManager, tmp_path: Path) -> None:
    # Prevents: the fast depth check (a count of the encoding's brackets, an upper bound of the
    # nesting) refusing a message whose text holds more brackets than MAX_DEPTH, e.g. pasted code.
    events = record_events(store)
    code = "fn main() { " + "{[" * (3 * MAX_DEPTH) + "]}" * (3 * MAX_DEPTH) + " }"
    message = {"role": "user", "content": [{"type": "text", "text": code}], "timestamp": 0}
    got = store.call("session::append", {"session_id": "s_001", "message": message})
    assert [name for name, _ in events] == ["session::on-message-added"]
    assert store.call("session::get-message", {"session_id": "s_001", "entry_id": got["entry_id"]})[
        "entry"]["message"]["content"][0]["text"] == code
    store.close()
    reopened = open_store(tmp_path / "d")
    assert reopened.call("session::get-message", {"session_id": "s_001", "entry_id": got["entry_id"]})[
        "entry"]["message"]["content"][0]["text"] == code


def count_walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Calls of admission's exact walk (the slow path of the size and depth checks)."""
    from session_manager._service import admission
    walks: list[int] = []
    real = admission.json_size

    def walk(value: Any, depth: int = 1) -> int:
        if depth == 1:
            walks.append(1)
        return real(value, depth)

    monkeypatch.setattr(admission, "json_size", walk)
    return walks


def test_a_wide_shallow_batch_is_admitted_without_the_exact_walk(
        store: session_manager.SessionManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: every payload holding more than MAX_DEPTH brackets taking the exact Python walk to
    # prove its depth (an append-many of 10,000 messages: ~55 ms of admission, 60x the encoding).
    walks = count_walks(monkeypatch)
    events = record_events(store)
    batch = [{"role": "user", "content": [{"type": "text", "text": f"m{i}"}], "timestamp": i} for i in range(300)]
    got = store.call("session::append-many", {"session_id": "s_001", "messages": batch})
    assert walks == []
    assert len(got["entry_ids"]) == 300
    assert [name for name, _ in events] == ["session::on-message-added"] * 300
    assert [e["entry_id"] for _, e in events] == got["entry_ids"]
    store.close()
    reopened = open_store(tmp_path / "d")
    assert reopened.call("session::get", {"session_id": "s_001"})["meta"]["message_count"] == 301
    texts = [m["message"]["content"][0]["text"]
             for m in reopened.call("session::messages", {"session_id": "s_001", "limit": 500})["messages"]]
    assert texts == ["hi"] + [f"m{i}" for i in range(300)]


def test_a_large_payload_is_held_to_the_depth_bound_exactly(
        store: session_manager.SessionManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the encoder-based depth check of a large payload (past the bracket count's reach)
    # letting one level too many through, or refusing the deepest value the bound keeps; brackets
    # in its strings (closing ones first) must not hide a level either.
    walks = count_walks(monkeypatch)
    events = record_events(store)
    before = view(store)
    pad = "]" * 3000 + "[" * 3000  # > 4 KB, and brackets that a count ignoring strings would net out
    too_deep = {"pad": pad, "deep": nested(MAX_DEPTH - 1)}  # payload, metadata, then 119: one past
    with pytest.raises(session_manager.SessionError) as caught:
        store.call("session::create", {"metadata": too_deep})
    assert caught.value.code == INVALID_REQUEST
    assert caught.value.detail == f"metadata: nested more than {MAX_DEPTH} levels deep"
    assert events == [] and view(store) == before
    walks.clear()
    fits = {"pad": pad, "deep": nested(MAX_DEPTH - 3)}
    created = store.call("session::create", {"metadata": fits})["session_id"]
    assert walks == []  # proven by the encoder, not walked
    assert [name for name, _ in events] == ["session::on-created"]
    assert store.call("session::get", {"session_id": created})["meta"]["metadata"] == fits
    store.close()
    reopened = open_store(tmp_path / "d")
    assert reopened.call("session::get", {"session_id": created})["meta"]["metadata"] == fits
    assert [m["session_id"] for m in reopened.call("session::list", {})["sessions"]] == [created, "s_001"]


def test_the_depth_bound_holds_on_the_exact_walk_too(store: session_manager.SessionManager) -> None:
    # Prevents: a payload the fast encoder cannot take for another reason (an integer past 64 bits)
    # skipping the depth bound: the exact walk must count levels as the encoder does.
    events = record_events(store)
    before = view(store)
    too_deep = {"big": 2**70, "deep": nested(MAX_DEPTH)}
    with pytest.raises(session_manager.SessionError) as caught:
        store.call("session::create", {"metadata": too_deep})
    assert caught.value.code == INVALID_REQUEST
    assert caught.value.detail.startswith("metadata: ")
    assert events == [] and view(store) == before
    fits = {"big": 2**70, "deep": nested(MAX_DEPTH - 4)}
    created = store.call("session::create", {"metadata": fits})["session_id"]
    assert store.call("session::get", {"session_id": created})["meta"]["metadata"] == fits


def test_the_wire_refuses_a_value_past_the_depth_bound(tmp_path: Path) -> None:
    # Prevents: the iii host committing a deeply nested metadata and then failing to answer (the
    # SDK's JSON encoder hits the recursion limit), leaving a session every list then trips on.
    engine = FakeEngine()
    host = serve(engine, tmp_path / "d", ids=SequentialIds(), clock=ManualClock(1_000_000))
    try:
        with pytest.raises(InvocationError) as caught:
            engine.invoke("session::create", {"metadata": nested(800)})
        assert caught.value.message.startswith(f"session/invalid_request: metadata: nested more than {MAX_DEPTH}")
        assert engine.invoke("session::list", {}) == {"sessions": []}
    finally:
        host.close()
    assert list((tmp_path / "d").glob("*.jsonl")) == []


@pytest.mark.parametrize("data", ["aGk\ud800", "\udfff" * 4])
def test_an_upload_whose_data_holds_an_unpaired_surrogate_is_invalid_request(
        store: session_manager.SessionManager, tmp_path: Path, data: str) -> None:
    # Prevents: the bulk-field measure of put-attachment raising admission's internal
    # Unrepresentable as a traceback instead of session/invalid_request naming `data`.
    events = record_events(store)
    before = view(store)
    with pytest.raises(session_manager.SessionError) as caught:
        store.call("session::put-attachment", {"session_id": "s_001", "name": "n", "mime": "m", "data": data})
    assert caught.value.code == INVALID_REQUEST
    assert caught.value.detail.startswith("data: ")
    assert events == [] and view(store) == before
    store.close()
    assert view(open_store(tmp_path / "d")) == before


def test_the_wire_refuses_an_upload_holding_an_unpaired_surrogate(tmp_path: Path) -> None:
    # Prevents: the same internal exception reaching the engine as a handler crash.
    engine = FakeEngine()
    host = serve(engine, tmp_path / "d", ids=SequentialIds(), clock=ManualClock(1_000_000))
    try:
        engine.invoke("session::create", {})
        with pytest.raises(InvocationError) as caught:
            engine.invoke("session::put-attachment", {"session_id": "s_001", "name": "n", "mime": "m",
                                                      "data": "aGk\ud800"})
        assert caught.value.message.startswith("session/invalid_request: data: ")
        assert engine.invoke("session::list-attachments", {"session_id": "s_001"}) == {"attachments": []}
    finally:
        host.close()


OPEN_COUNTS = ("default_list_limit", "max_list_limit", "max_attachment_bytes", "max_request_bytes",
               "max_batch_entries", "cache_bytes")


@pytest.mark.parametrize("name", OPEN_COUNTS)
@pytest.mark.parametrize("bad", ["5", -1, 1.5, True, 2**64, [5]])
def test_open_refuses_a_limit_that_is_not_a_count(tmp_path: Path, name: str, bad: Any) -> None:
    # Prevents: open() taking any value for a limit (the configuration model refuses them), so a
    # string or float failed every later call with a TypeError from deep inside the service, and
    # -1 quietly refused every write; and a refused open() keeping the data_dir locked.
    where = tmp_path / "d"
    with pytest.raises(ValueError) as caught:
        session_manager.open(where, **{name: bad})
    assert str(caught.value).startswith(f"{name}: ")
    with open_store(where) as sm:  # nothing was left holding the data_dir
        sm.call("session::create", {"title": "after"})
        assert [m["title"] for m in sm.call("session::list", {})["sessions"]] == ["after"]


def test_open_takes_every_count_the_configuration_takes(tmp_path: Path) -> None:
    # Prevents: the check refusing a value the worker's configuration accepts (0, the u64 top).
    values = {name: 0 for name in OPEN_COUNTS} | {name: 2**64 - 1 for name in OPEN_COUNTS[2:4]}
    with session_manager.open(tmp_path / "d", **values) as sm:
        sid = sm.call("session::create", {})["session_id"]
        put = {"session_id": sid, "name": "n", "mime": "m", "data": "aGk="}
        assert sm.call("session::put-attachment", put)["attachment"]["size"] == 2


def test_a_zero_list_limit_in_open_means_what_the_configuration_means(tmp_path: Path) -> None:
    # Prevents: open(max_list_limit=0) silently taking the default page of 500 (an `or` on the
    # argument) while the same value in the worker's configuration clamps pages to one.
    sm = session_manager.open(tmp_path / "d", ids=SequentialIds(), clock=ManualClock(1_000_000),
                              default_list_limit=0, max_list_limit=0)
    for _ in range(3):
        sm.call("session::create", {})
    page = sm.call("session::list", {})
    assert len(page["sessions"]) == 1 and page["next_cursor"] is not None
    assert len(sm.call("session::list", {"limit": 50})["sessions"]) == 1
    sm.close()


@pytest.mark.parametrize(("metadata", "title", "detail"), [
    ({"a": [1, float("nan")]}, "t", "metadata.a.1: nan is not a JSON number (NaN and Infinity are refused)"),
    ({"a": (1, float("-inf"))}, "t", "metadata.a.1: -inf is not a JSON number (NaN and Infinity are refused)"),
    ({"when": datetime.date(2020, 1, 1)}, "t", "metadata.when: a date is not a JSON value"),
    ({"when": datetime.date(2020, 1, 1)}, "x" * 3000, "payload: 3045 bytes of JSON exceed max_request_bytes (2000)"),
])
def test_a_payload_the_proven_copy_refuses_gets_the_exact_paths_error(
        tmp_path: Path, metadata: dict[str, Any], title: str, detail: str) -> None:
    # Prevents: the embedded host's bounded copy (which lets admission skip its NaN and depth scans)
    # changing which error a bad payload gets, or its order: admission's exact walk still speaks first.
    with session_manager.open(tmp_path / "d", max_request_bytes=2000) as sm:
        with pytest.raises(SessionError) as caught:
            sm.call("session::create", {"title": title, "metadata": metadata})
        assert caught.value.detail == detail
        assert sm.call("session::list", {})["sessions"] == []  # nothing was created
        # A tuple is a JSON array: copied as a list on the proven path, as before.
        created = sm.call("session::create", {"title": "t", "metadata": {"a": (1, [2.5])}})
        assert created["meta"]["metadata"] == {"a": [1, [2.5]]}
