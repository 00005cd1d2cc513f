"""The embedded host's boundary: what callers pass in and get out stays theirs."""

from __future__ import annotations

import base64
import contextlib
import shutil
import threading
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

import session_manager
from session_manager._wire.events import Event
from session_manager.clock import ManualClock
from session_manager.errors import INVALID_CURSOR, INVALID_REQUEST
from session_manager.ids import SequentialIds
from session_manager.store.fs._records import Replay
from session_manager.store.memory import MemoryStore

R = TypeVar("R")


def open_store(where: Path) -> session_manager.SessionManager:
    return session_manager.open(where, ids=SequentialIds(), clock=ManualClock(1_000_000))


def nested(depth: int) -> Any:
    value: Any = None
    for _ in range(depth):
        value = {"x": value}
    return value


def test_changing_a_payload_after_the_call_changes_nothing_stored(tmp_path: Path) -> None:
    # Prevents: the store keeping references to the caller's dicts (metadata, origin, custom
    # data, details), so a later change by the caller rewrote history, in memory and on disk.
    sm = open_store(tmp_path / "d")
    create = {"metadata": {"owner": {"id": "u_1"}}}
    sid = sm.call("session::create", create)["session_id"]
    custom = {"custom_type": "note", "data": {"k": [1]}}
    origin = {"turn": {"n": 1}}
    sm.call("session::append", {"session_id": sid, "custom": custom, "origin": origin})
    result = {"role": "function_result", "function_call_id": "c", "function_id": "f", "content": [],
              "timestamp": 0}
    sm.call("session::append", {"session_id": sid, "message": result})
    details = {"code": 0}
    sm.call("session::update-message", {"session_id": sid, "entry_id": "e_002", "content": [], "details": details})
    create["metadata"]["owner"]["id"] = "changed"
    custom["data"]["k"].append(2)
    origin["turn"]["n"] = 9
    details["code"] = 42

    def view(store: session_manager.SessionManager) -> Any:
        return (store.call("session::get", {"session_id": sid})["meta"]["metadata"],
                store.call("session::messages", {"session_id": sid, "include_custom": True})["messages"],
                store.call("session::get-message", {"session_id": sid, "entry_id": "e_001"})["entry"]["origin"])

    expected = ({"owner": {"id": "u_1"}},
                [{"entry_id": "e_001", "custom": {"custom_type": "note", "data": {"k": [1]}}},
                 {"entry_id": "e_002", "message": {**result, "details": {"code": 0}, "is_error": False}}],
                {"turn": {"n": 1}})
    assert view(sm) == expected
    sm.call("session::set-status", {"session_id": sid, "status": "working"})  # writes the meta again
    sm.close()
    assert view(open_store(tmp_path / "d")) == expected


def test_results_are_the_callers_to_change(tmp_path: Path) -> None:
    # Prevents: a caller editing a returned dict and so editing the store's cache.
    sm = open_store(tmp_path / "d")
    sid = sm.call("session::create", {"metadata": {"a": [1]}})["session_id"]
    got = sm.call("session::get", {"session_id": sid})
    got["meta"]["metadata"]["a"].append(2)
    assert sm.call("session::get", {"session_id": sid})["meta"]["metadata"] == {"a": [1]}


def test_a_result_copy_is_whole_with_or_without_nested_containers() -> None:
    # Prevents: the leaves-only fast path of copy_json handing back the original dict, or a dict whose
    # container comes after its leaves (the scan stops there) losing the deep copy of that container.
    from session_manager._hosts.embedded import copy_json

    flat = {"entry_id": "e", "parent_id": None, "timestamp": 1, "ok": True, "x": 1.5}
    got = copy_json(flat)
    assert got == flat and got is not flat
    nested = {"a": "s", "b": 2, "c": {"d": [1, {"e": []}]}, "f": [[]]}
    got = copy_json(nested)
    assert got == nested
    got["c"]["d"][1]["e"].append(1)
    got["f"][0].append(1)
    assert nested == {"a": "s", "b": 2, "c": {"d": [1, {"e": []}]}, "f": [[]]}


@pytest.mark.parametrize("depth", [300, 5000])
def test_values_nested_too_deeply_are_refused_cleanly(tmp_path: Path, depth: int) -> None:
    # Prevents: a serialization error or RecursionError escaping as a traceback (or half a write).
    sm = open_store(tmp_path / "d")
    sid = sm.call("session::create", {})["session_id"]
    message = {"role": "function_result", "function_call_id": "c", "function_id": "f", "content": [],
               "details": nested(depth), "timestamp": 0}
    with pytest.raises(session_manager.SessionError) as caught:
        sm.call("session::append", {"session_id": sid, "message": message})
    assert caught.value.code == INVALID_REQUEST
    assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 0
    assert sm.call("session::messages", {"session_id": sid}) == {"messages": []}


def test_a_deeply_nested_cursor_is_an_invalid_cursor(tmp_path: Path) -> None:
    # Prevents: a crafted cursor crashing list/messages with RecursionError.
    sm = open_store(tmp_path / "d")
    sid = sm.call("session::create", {})["session_id"]
    sm.call("session::append", {"session_id": sid, "message": {"role": "user", "content": [], "timestamp": 0}})
    cursor = base64.b64encode(b"[" * 100_000).decode()
    for fid, payload in (("session::list", {"cursor": cursor}),
                         ("session::messages", {"session_id": sid, "cursor": cursor})):
        with pytest.raises(session_manager.SessionError) as caught:
            sm.call(fid, payload)
        assert caught.value.code == INVALID_CURSOR


def test_a_deeply_nested_line_in_a_log_is_skipped(tmp_path: Path) -> None:
    # Prevents: one corrupt line making a whole session unreadable (RecursionError on replay).
    where = tmp_path / "d"
    sm = open_store(where)
    sid = sm.call("session::create", {"title": "keep me"})["session_id"]
    sm.close()
    with (where / f"{sid}.jsonl").open("ab") as f:
        f.write(b"[" * 5000 + b"\n")
    sm = open_store(where)
    assert sm.call("session::get", {"session_id": sid})["meta"]["title"] == "keep me"
    sm.call("session::append", {"session_id": sid, "message": {"role": "user", "content": [], "timestamp": 0}})
    sm.close()
    assert open_store(where).call("session::get", {"session_id": sid})["meta"]["message_count"] == 1


def test_list_during_a_replay_shows_the_loaded_meta(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the first list of a process caching the half-replayed meta of a session another
    # thread is loading (or leaving that session out), until the session is next written.
    where = tmp_path / "d"
    sm = open_store(where)
    sid = sm.call("session::create", {"title": "big"})["session_id"]
    sm.call("session::append-many", {"session_id": sid, "messages": [
        {"role": "user", "content": [], "timestamp": 0}] * 5})
    sm.call("session::set-meta", {"session_id": sid, "title": "final"})
    sm.close()

    halfway, resume = threading.Event(), threading.Event()
    real = Replay.feed_numbered

    def slow(self: Replay, *args: Any, **kwargs: Any) -> Any:
        for n, item in enumerate(real(self, *args, **kwargs)):
            if n == 1:  # the meta of the create is applied; the rest is not
                halfway.set()
                resume.wait(10)
            yield item

    shutil.rmtree(where / ".index")  # as the reference leaves it: the log is replayed line by line
    monkeypatch.setattr(Replay, "feed_numbered", slow)
    sm = open_store(where)
    loader = threading.Thread(target=lambda: sm.call("session::get", {"session_id": sid}))
    loader.start()
    assert halfway.wait(10)
    listed = sm.call("session::list", {})["sessions"]
    resume.set()
    loader.join()
    assert [(m["title"], m["message_count"]) for m in listed] == [("final", 5)]
    assert [(m["title"], m["message_count"]) for m in sm.call("session::list", {})["sessions"]] == [("final", 5)]


class _Opaque:
    pass


@pytest.mark.parametrize(("value", "where"), [
    (float("nan"), "custom.data"),
    ({"x": float("inf")}, "custom.data.x"),
    ([1, -float("inf")], "custom.data.1"),
    ({1: "a"}, "custom.data"),
    ({"when": __import__("datetime").datetime(2020, 1, 1)}, "custom.data.when"),
    ({"tags": {"a", "b"}}, "custom.data.tags"),
    (b"bytes", "custom.data"),
    (_Opaque(), "custom.data"),
])
def test_values_json_cannot_hold_are_refused_naming_where(tmp_path: Path, value: Any, where: str) -> None:
    # Prevents: NaN/inf silently stored as null, datetimes/tuples stored as Python objects (read
    # back as such until a restart turns them into strings/lists), int keys becoming strings, and
    # sets/bytes escaping as a TypeError traceback from the log writer.
    with open_store(tmp_path / "d") as sm:
        sid = sm.call("session::create", {})["session_id"]
        seen: list[Any] = []
        sm.observe({"function_id": "session::on-message-added"}, seen.append)
        with pytest.raises(session_manager.SessionError) as caught:
            sm.call("session::append", {"session_id": sid, "custom": {"custom_type": "x", "data": value}})
        assert caught.value.code == INVALID_REQUEST
        assert str(caught.value).startswith(f"{INVALID_REQUEST}: {where}: ")
        assert seen == []
        assert sm.call("session::messages", {"session_id": sid, "include_custom": True}) == {"messages": []}
    with open_store(tmp_path / "d") as again:
        assert again.call("session::messages", {"session_id": sid, "include_custom": True}) == {"messages": []}


def test_tuples_are_json_arrays_and_read_back_as_lists(tmp_path: Path) -> None:
    # Prevents: a tuple stored as a Python tuple (reads back a tuple, then a list after a restart).
    with open_store(tmp_path / "d") as sm:
        sid = sm.call("session::create", {})["session_id"]
        data = {"pair": (1, (2.5, None))}
        sm.call("session::append", {"session_id": sid, "custom": {"custom_type": "x", "data": data}})
        stored = {"custom_type": "x", "data": {"pair": [1, [2.5, None]]}}
        expected = {"messages": [{"entry_id": "e_001", "custom": stored}]}
        assert sm.call("session::messages", {"session_id": sid, "include_custom": True}) == expected
    with open_store(tmp_path / "d") as again:
        assert again.call("session::messages", {"session_id": sid, "include_custom": True}) == expected


class _TransactionalStore(MemoryStore):
    """A store with its own call wrapper and mutation transaction (as postgres has), recording both."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []
        self.transactions: list[tuple[str, ...]] = []

    def run_call(self, call: Callable[[], tuple[R, list[Event]]]) -> tuple[R, list[Event]]:
        response, events = call()
        self.calls.append([e.function_id for e in events])
        return response, events

    @contextlib.contextmanager
    def mutation(self, session_ids: Collection[str]) -> Iterator[None]:
        yield
        self.transactions.append(tuple(session_ids))


def test_a_store_wrapping_calls_and_mutations_still_gets_both() -> None:
    # Prevents: the embedded host's shortcut past the default (do-nothing) run_call and
    # transaction skipping a store that overrides them: its events would not be recorded
    # with its writes, and its mutations would run outside a transaction.
    store = _TransactionalStore()
    sm = session_manager.open(store=store, ids=SequentialIds())
    sid = sm.call("session::create", {})["session_id"]
    message = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}
    sm.call("session::append", {"session_id": sid, "message": message})
    assert store.calls == [["session::on-created"], ["session::on-message-added"]]
    assert store.transactions == [(sid,), (sid,)]


def test_a_nested_str_subclass_key_is_stored_and_answered_as_a_plain_str(tmp_path: Path) -> None:
    # Prevents: a caller's str-subclass key kept in the cache (its hash may drift: the result
    # copy then fails every read with a RuntimeError traceback) and answered differently
    # before and after a restart.
    from tests.property.test_json_payload import DriftingKey

    key = DriftingKey("b")
    held = [1]
    metadata = {"a": {key: held}}
    sm = session_manager.open(tmp_path / "d", ids=SequentialIds(), clock=ManualClock())
    try:
        created = sm.call("session::create", {"metadata": metadata})
        key.salt = 1
        held.append(2)
        assert created["meta"]["metadata"] == {"a": {"b": [1]}}
        got = sm.call("session::get", {"session_id": created["session_id"]})["meta"]["metadata"]
        assert got == {"a": {"b": [1]}} and [type(k) for k in got["a"]] == [str]
    finally:
        sm.close()
    reopened = session_manager.open(tmp_path / "d")
    try:
        assert reopened.call("session::get", {"session_id": "s_001"})["meta"]["metadata"] == {"a": {"b": [1]}}
    finally:
        reopened.close()


def test_a_handed_over_payload_is_stored_as_it_is_and_still_admitted_and_validated(tmp_path: Path) -> None:
    # Prevents: the adapters' handed-over path (_call_owned: no private copy) skipping what
    # every call gets: the size limit, text JSON cannot carry, the request model, a missing
    # session, read-only refusal, and the event after a durable write.
    where = tmp_path / "d"
    with session_manager.open(where, ids=SequentialIds(), clock=ManualClock(1), max_request_bytes=400) as sm:
        sid = sm.call("session::create", {})["session_id"]
        seen: list[Any] = []
        sm.observe({"function_id": "session::on-message-added"}, seen.append)
        data = {"values": [["1", "msgpack", "\x00\xff"]], "n": 1.5}
        sm._call_owned("session::append", {"session_id": sid, "custom": {"custom_type": "x", "data": data}})
        refused = {
            "size": {"session_id": sid, "custom": {"custom_type": "x", "data": "y" * 500}},
            "surrogate": {"session_id": sid, "custom": {"custom_type": "x", "data": "\ud800"}},
            "model": {"session_id": sid, "custom": {"data": 1}},
        }
        for why, payload in refused.items():
            with pytest.raises(session_manager.SessionError) as caught:
                sm._call_owned("session::append", payload)
            assert caught.value.code == INVALID_REQUEST, why
        with pytest.raises(session_manager.SessionError) as missing:
            sm._call_owned("session::append", {"session_id": "nope", "custom": {"custom_type": "x"}})
        assert missing.value.code == "session/not_found"
        path = sm.call("session::messages", {"session_id": sid, "include_custom": True})["messages"]
        assert [m["custom"]["data"] for m in path] == [data]
        assert [e["custom"]["data"] for e in seen] == [data]
    with session_manager.open(where) as again:  # durable, and what JSON gives back
        path = again.call("session::messages", {"session_id": sid, "include_custom": True})["messages"]
        assert [m["custom"]["data"] for m in path] == [data]
    with session_manager.open(where, read_only=True) as inspecting, pytest.raises(session_manager.SessionError):
        inspecting._call_owned("session::append", {"session_id": sid, "custom": {"custom_type": "x"}})


def test_the_typed_append_admits_checks_and_fires_as_a_handed_over_call_does(tmp_path: Path) -> None:
    # Prevents: the adapters' typed append (_append_owned: no payload admitted or parsed) skipping
    # what a call gets: the size limit measured as admission measures the request (the same
    # answer at the bound), text JSON cannot carry, a missing session, a moved session (at),
    # read-only refusal, and the event after a durable write.
    from session_manager._service.appending import LeafMoved

    where = tmp_path / "d"
    with session_manager.open(where, ids=SequentialIds(), clock=ManualClock(1), max_request_bytes=400) as sm:
        sid = sm.call("session::create", {})["session_id"]
        seen: list[Any] = []
        sm.observe({"function_id": "session::on-message-added"}, seen.append)
        data = {"values": [["1", "msgpack", "\x00\xff\u00e9"]], "n": 1.5}
        first = sm._append_owned(sid, "x", data)
        # At the limit and one byte past it: the typed append and the handed-over call agree.
        outcomes = set()
        for filler in range(140, 170):
            answers = []
            for append in (lambda d: sm._append_owned(sid, "x", d, first),
                           lambda d: sm._call_owned("session::append", {"session_id": sid, "parent_id": first,
                                                                        "custom": {"custom_type": "x", "data": d}})):
                try:
                    append({"t": "\u00e9" * filler})
                    answers.append("ok")
                except session_manager.SessionError as e:
                    answers.append(e.code)
            assert answers[0] == answers[1], filler
            outcomes.add(answers[0])
        assert outcomes == {"ok", INVALID_REQUEST}  # (the sweep crossed the bound)
        sm.call("session::set-active-leaf", {"session_id": sid, "entry_id": first})
        for why, bad in {"size": "y" * 500, "surrogate": "\ud800"}.items():
            with pytest.raises(session_manager.SessionError) as caught:
                sm._append_owned(sid, "x", bad)
            assert caught.value.code == INVALID_REQUEST, why
        # An integer past 64 bits is taken as a call takes it (stored exactly: the documented
        # rule), not refused (test_owned_append_wide_ints.py).
        wide = sm._append_owned(sid, "x", 1 << 70, first)
        assert sm.service.store.get_entry(sid, wide)["data"] == 1 << 70
        sm.call("session::set-active-leaf", {"session_id": sid, "entry_id": first})
        with pytest.raises(session_manager.SessionError) as missing:
            sm._append_owned("nope", "x", None)
        assert missing.value.code == "session/not_found"
        meta = sm.call("session::get", {"session_id": sid})["meta"]
        with pytest.raises(LeafMoved):
            sm._append_owned(sid, "x", 1, at=(meta["created_at"], "e_999"))
        second = sm._append_owned(sid, "x", 2, at=(meta["created_at"], first))
        path = sm.call("session::messages", {"session_id": sid, "include_custom": True})["messages"]
        assert [m["entry_id"] for m in path] == [first, second]
        assert [m["custom"]["data"] for m in path] == [data, 2]
        assert seen[0]["entry_id"] == first and seen[-1]["entry_id"] == second
        assert seen[0]["custom"] == {"custom_type": "x", "data": data}
    with session_manager.open(where) as again:  # durable, and what JSON gives back
        path = again.call("session::messages", {"session_id": sid, "include_custom": True})["messages"]
        assert [m["custom"]["data"] for m in path] == [data, 2]
    with session_manager.open(where, read_only=True) as inspecting, pytest.raises(session_manager.SessionError):
        inspecting._append_owned(sid, "x", None)


def test_the_typed_append_builds_its_event_only_for_someone_to_receive(tmp_path: Path, monkeypatch: Any) -> None:
    # Prevents: the typed append (every LangGraph put) building an event nobody receives (no
    # observer, over a store that records no events: the host drops it), and the other side:
    # an observer, or a store that records its calls' events (sqlite's outbox), not getting it.
    from session_manager._service import appending

    built: list[str] = []
    make = appending.ev.message_added

    def counted(session_id: str, entry: dict[str, Any], metadata: Any) -> Any:
        built.append(entry["id"])
        return make(session_id, entry, metadata)

    monkeypatch.setattr(appending.ev, "message_added", counted)
    with session_manager.open(tmp_path / "d", ids=SequentialIds(), clock=ManualClock(1)) as sm:
        sid = sm.call("session::create", {"metadata": {"team": "a"}})["session_id"]
        quiet = sm._append_owned(sid, "x", {"n": 1})
        assert built == []
        seen: list[Any] = []
        sm.observe({"function_id": "session::on-message-added"}, seen.append)
        heard = sm._append_owned(sid, "x", {"n": 2}, quiet)
        assert built == [heard]
        by_call = sm.call("session::append", {"session_id": sid, "parent_id": heard,
                                              "custom": {"custom_type": "x", "data": {"n": 2}}})["entry_id"]
    assert [e["entry_id"] for e in seen] == [heard, by_call]
    assert {**seen[0], "entry_id": "", "parent_id": "", "timestamp": 0} \
        == {**seen[1], "entry_id": "", "parent_id": "", "timestamp": 0}  # the same event as a call's
    assert seen[0]["session_metadata"] == {"team": "a"} and seen[0]["parent_id"] == quiet
    built.clear()
    with session_manager.open(f"sqlite:///{tmp_path / 's.db'}") as recorded:  # an outbox: built, no observer
        sid = recorded.call("session::create", {})["session_id"]
        assert built == [] and recorded._append_owned(sid, "x", 1) in built


def test_a_handed_over_append_at_a_session_state_lands_only_there(tmp_path: Path) -> None:
    # Prevents: an adapter's append made on its own view of a session (no read first) landing
    # after another writer moved the session on, or after it was deleted and created again.
    from session_manager._service.appending import LeafMoved

    with session_manager.open(tmp_path / "d", ids=SequentialIds(), clock=ManualClock(1)) as sm:
        seen: list[Any] = []
        sm.observe({"function_id": "session::on-message-added"}, seen.append)
        made = sm.call("session::ensure", {"session_id": "s"})["meta"]["created_at"]
        first = sm.call("session::append", {"session_id": "s", "custom": {"custom_type": "x"}})["entry_id"]
        stale = [(made, None), (made + 1, first), (made, "e_999")]
        for at in stale:
            with pytest.raises(LeafMoved):
                sm._call_owned("session::append", {"session_id": "s", "custom": {"custom_type": "y"}}, at=at)
        written = sm._call_owned("session::append", {"session_id": "s", "custom": {"custom_type": "y"}},
                                 at=(made, first))
        with pytest.raises(ValueError):
            sm._call_owned("session::delete", {"session_id": "s"}, at=(made, first))
        path = sm.call("session::messages", {"session_id": "s", "include_custom": True})["messages"]
    assert [m["entry_id"] for m in path] == [first, written["entry_id"]]
    assert [e["entry_id"] for e in seen] == [first, written["entry_id"]]
