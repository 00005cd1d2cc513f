"""Model-based test: random operation sequences against a pure-Python model.

Hypothesis drives the embedded session store (fs adapter, deterministic ids
and clock) through random sequences of mutations, including failing ones,
and after every step compares everything a caller can read, and the events each
call delivered (none for a failed call, a replay or a read), with a small
reference model written here from the contract: metas, transcripts (paged
with small limits, forwards through session::messages and backwards
through session::messages-tail), single entries and the session list.
Restarts (close + reopen over the same data_dir) happen as a rule and at
teardown, so every reachable state must also replay identically.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import session_manager
from session_manager import SessionError, SessionManager
from session_manager._wire.events import (
    EVENT_FUNCTIONS,
    ON_CREATED,
    ON_DELETED,
    ON_MESSAGE_ADDED,
    ON_MESSAGE_UPDATED,
    ON_META_UPDATED,
    ON_STATUS_CHANGED,
)
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds
from session_manager.store import FsStore

T0 = 1_000_000
CALLER_SESSION_IDS = ("chat-42", "../escape/chat 42:?", "ünï cødé", "..")
CALLER_ENTRY_IDS = ("turn-1", "turn-2", "turn/3")
UNKNOWN = "nope"

texts = st.sampled_from(["hi", "hello world", "", "ünï ☃", "line\nbreak"])
origins = st.one_of(st.none(), st.just({"turn_id": "t_1"}), st.just({"notification": False}))
metadata: st.SearchStrategy[dict[str, Any] | None] = st.one_of(
    st.none(), st.just({}), st.just({"owner": "u_1"}), st.just({"owner": "u_2", "n": [1, 2]})
)

parent_choice = st.sampled_from([False, False, True])  # mostly chain from the leaf


def user_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def assistant_message(text: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end",
        "model": "m",
        "provider": "p",
        "timestamp": 2,
    }


messages = st.builds(
    lambda make, text: make(text), st.sampled_from([user_message, assistant_message]), texts
)


# -- the model -----------------------------------------------------------------------


@dataclass
class ModelSession:
    meta: dict[str, Any]
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)  # insertion order = creation order
    leaf: str | None = None

    def path(self, leaf: str | None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        cursor = leaf
        while cursor is not None:
            entry = self.entries[cursor]
            out.append(entry)
            cursor = entry["parent_id"]
        return out[::-1]

    def touch(self, now: int, **changes: Any) -> None:
        self.meta = {**self.meta, "updated_at": now}
        for key, value in changes.items():
            if value is None:
                self.meta.pop(key, None)
            else:
                self.meta[key] = value


def fresh_meta(session_id: str, title: str | None, description: str | None, meta_data: Any, now: int,
               **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"session_id": session_id, "title": title or "", "description": description or "",
                           "status": "idle"}
    if meta_data is not None:
        out["metadata"] = meta_data
    out.update(extra)
    out.update(created_at=now, updated_at=now, message_count=0)
    return out


def item_of(entry: dict[str, Any]) -> dict[str, Any]:
    """What session::messages shows for a stored entry."""
    if entry["kind"] == "message":
        out: dict[str, Any] = {"entry_id": entry["id"], "message": entry["message"]}
        if "origin" in entry:
            out["origin"] = entry["origin"]
        return out
    return {"entry_id": entry["id"], "custom": {"custom_type": entry["custom_type"], "data": entry["data"]}}


class SessionModel(RuleBasedStateMachine):
    """The store under test next to the model, checked after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="sm-model-"))
        self.ids = SequentialIds()
        self.clock = ManualClock(T0)
        self.fired: list[str] = []  # the event functions the last call delivered, in order
        self.sm: SessionManager = self.open()
        self.sessions: dict[str, ModelSession] = {}
        self.next_session = 1
        self.next_entry = 1

    # -- plumbing ---------------------------------------------------------------

    def open(self) -> SessionManager:
        # The id generator and clock survive restarts, as they would in a test host.
        sm = session_manager.open(self.dir, ids=self.ids, clock=self.clock)
        for fid in EVENT_FUNCTIONS:
            sm.observe({"function_id": fid}, lambda _e, fid=fid: self.fired.append(fid))
        return sm

    def take_session_id(self) -> str:
        sid = f"s_{self.next_session:03d}"
        self.next_session += 1
        return sid

    def take_entry_id(self) -> str:
        eid = f"e_{self.next_entry:03d}"
        self.next_entry += 1
        return eid

    def call(self, function_id: str, payload: dict[str, Any], fires: tuple[str, ...] = ()) -> Any:
        """The call's response, once it delivered exactly the events ``fires`` (a read: none)."""
        self.fired = []
        got = self.sm.call(function_id, payload)
        assert self.fired == list(fires), f"{function_id} {payload} fired {self.fired}, expected {list(fires)}"
        return got

    def expect_error(self, code: str, function_id: str, payload: dict[str, Any]) -> None:
        # Prevents: a refused call that still announced (or half-applied) a mutation.
        self.fired = []
        try:
            result = self.sm.call(function_id, payload)
        except SessionError as e:
            assert e.code == code, f"{function_id}: {e}"
            assert self.fired == [], f"{function_id} {payload} failed with {code} but fired {self.fired}"
        else:
            raise AssertionError(f"{function_id} {payload} succeeded with {result}; expected {code}")

    def pick_session(self, data: st.DataObject) -> str:
        # Mostly live sessions (so mutations succeed and state grows), sometimes an unknown one.
        known = sorted(self.sessions)
        return data.draw(st.sampled_from([*known, *known, *known, UNKNOWN]), label="session")

    def pick_entry(self, data: st.DataObject, session_id: str) -> str:
        model = self.sessions.get(session_id)
        known = list(model.entries) if model else []
        return data.draw(st.sampled_from([*known, *known, *known, "e_404"]), label="entry")

    def now(self) -> int:
        return self.clock.now_ms()

    # -- lifecycle rules -----------------------------------------------------------

    @initialize(title=st.one_of(st.none(), texts))
    def start_with_a_session(self, title: str | None) -> None:
        self.create(title, None, None)

    @rule(ms=st.sampled_from([0, 0, 1, 7]))
    def tick(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(title=st.one_of(st.none(), texts), description=st.one_of(st.none(), texts), meta_data=metadata)
    def create(self, title: str | None, description: str | None, meta_data: Any) -> None:
        payload: dict[str, Any] = {"title": title, "description": description, "metadata": meta_data}
        got = self.call("session::create", {k: v for k, v in payload.items() if v is not None}, (ON_CREATED,))
        sid = self.take_session_id()
        self.sessions[sid] = ModelSession(fresh_meta(sid, title, description, meta_data, self.now()))
        assert got == {"session_id": sid, "meta": self.sessions[sid].meta}

    @rule(session_id=st.sampled_from(CALLER_SESSION_IDS), title=st.one_of(st.none(), texts), meta_data=metadata)
    def ensure(self, session_id: str, title: str | None, meta_data: Any) -> None:
        payload: dict[str, Any] = {"session_id": session_id, "title": title, "metadata": meta_data}
        created = session_id not in self.sessions
        got = self.call("session::ensure", {k: v for k, v in payload.items() if v is not None},
                        (ON_CREATED,) if created else ())
        if created:
            self.sessions[session_id] = ModelSession(fresh_meta(session_id, title, None, meta_data, self.now()))
        assert got == {"session_id": session_id, "meta": self.sessions[session_id].meta, "created": created}

    @precondition(lambda self: bool(self.sessions))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        sid = self.pick_session(data)
        got = self.call("session::delete", {"session_id": sid}, (ON_DELETED,) if sid in self.sessions else ())
        assert got == {"deleted": sid in self.sessions}
        self.sessions.pop(sid, None)

    @precondition(lambda self: bool(self.sessions))
    @rule(data=st.data(), status=st.sampled_from(["idle", "working", "done", "error"]),
          reason=st.one_of(st.none(), st.sampled_from(["r1", "r2"])))
    def set_status(self, data: st.DataObject, status: str, reason: str | None) -> None:
        sid = self.pick_session(data)
        payload = {"session_id": sid, "status": status, **({"reason": reason} if reason else {})}
        model = self.sessions.get(sid)
        if model is None:
            self.expect_error("session/not_found", "session::set-status", payload)
            return
        previous = model.meta["status"]
        kept = reason if status != "idle" else None
        moved = previous != status or model.meta.get("status_reason") != kept
        if moved:
            model.touch(self.now(), status=status, status_reason=kept)
        got = self.call("session::set-status", payload, (ON_STATUS_CHANGED,) if moved else ())
        assert got == {"status": status, "previous_status": previous}

    @precondition(lambda self: bool(self.sessions))
    @rule(data=st.data(), title=st.one_of(st.none(), texts), description=st.one_of(st.none(), texts),
          meta_data=metadata)
    def set_meta(self, data: st.DataObject, title: str | None, description: str | None, meta_data: Any) -> None:
        sid = self.pick_session(data)
        payload = {"session_id": sid, "title": title, "description": description, "metadata": meta_data}
        payload = {k: v for k, v in payload.items() if v is not None}
        model = self.sessions.get(sid)
        if model is None:
            self.expect_error("session/not_found", "session::set-meta", payload)
            return
        if len(payload) > 1:
            model.touch(self.now(), **{k: v for k, v in payload.items() if k != "session_id"})
        # A supplied field counts as a change even when equal to the stored value (meta.feature).
        fires = (ON_META_UPDATED,) if len(payload) > 1 else ()
        assert self.call("session::set-meta", payload, fires) == {"meta": model.meta}

    # -- message rules ---------------------------------------------------------------

    @precondition(lambda self: bool(self.sessions))
    @rule(data=st.data(), body=st.one_of(messages, st.builds(lambda t: {"custom_type": "note", "data": t}, texts)),
          explicit_parent=parent_choice, caller_id=st.one_of(st.none(), st.sampled_from(CALLER_ENTRY_IDS)),
          origin=origins)
    def append(self, data: st.DataObject, body: dict[str, Any], explicit_parent: bool, caller_id: str | None,
               origin: dict[str, Any] | None) -> None:
        sid = self.pick_session(data)
        is_message = "role" in body
        payload: dict[str, Any] = {"session_id": sid, ("message" if is_message else "custom"): body}
        parent = self.pick_entry(data, sid) if explicit_parent else None
        if parent is not None:
            payload["parent_id"] = parent
        if caller_id is not None:
            payload["entry_id"] = caller_id
        if origin is not None:
            payload["origin"] = origin
        model = self.sessions.get(sid)
        if model is None:
            self.expect_error("session/not_found", "session::append", payload)
            return
        if caller_id is not None and caller_id in model.entries:
            # Idempotent replay: the original answer, nothing written.
            original = model.entries[caller_id]
            expected = {"entry_id": caller_id, "parent_id": original["parent_id"], "timestamp": original["timestamp"]}
            assert self.call("session::append", payload) == expected
            return
        if parent is not None and parent not in model.entries:
            self.expect_error("session/parent_not_found", "session::append", payload)
            return
        eid = caller_id if caller_id is not None else self.take_entry_id()
        entry: dict[str, Any] = {
            "kind": "message" if is_message else "custom",
            "id": eid,
            "parent_id": parent if explicit_parent else model.leaf,
            "timestamp": self.now(),
            "revision": 0,
        }
        if origin is not None:
            entry["origin"] = origin
        if is_message:
            entry["message"] = body
        else:
            entry.update(custom_type="note", data=body["data"])
        model.entries[eid] = entry
        model.leaf = eid
        model.touch(self.now(), message_count=model.meta["message_count"] + int(is_message))
        got = self.call("session::append", payload, (ON_MESSAGE_ADDED,))
        assert got == {"entry_id": eid, "parent_id": entry["parent_id"], "timestamp": self.now()}

    @precondition(lambda self: bool(self.sessions))
    @rule(data=st.data(), batch=st.lists(messages, min_size=1, max_size=3), explicit_parent=parent_choice,
          origin=origins)
    def append_many(self, data: st.DataObject, batch: list[dict[str, Any]], explicit_parent: bool,
                    origin: dict[str, Any] | None) -> None:
        sid = self.pick_session(data)
        if data.draw(st.sampled_from([False] * 5 + [True]), label="empty batch"):
            batch = []
        payload: dict[str, Any] = {"session_id": sid, "messages": batch}
        parent = self.pick_entry(data, sid) if explicit_parent else None
        if parent is not None:
            payload["parent_id"] = parent
        if origin is not None:
            payload["origin"] = origin
        model = self.sessions.get(sid)
        if model is None:
            self.expect_error("session/not_found", "session::append-many", payload)
            return
        if not batch:
            self.expect_error("session/empty_batch", "session::append-many", payload)
            return
        if parent is not None and parent not in model.entries:
            self.expect_error("session/parent_not_found", "session::append-many", payload)
            return
        chain = parent if explicit_parent else model.leaf
        ids = []
        for body in batch:
            eid = self.take_entry_id()
            entry: dict[str, Any] = {"kind": "message", "id": eid, "parent_id": chain, "timestamp": self.now(),
                                     "revision": 0}
            if origin is not None:
                entry["origin"] = origin
            entry["message"] = body
            model.entries[eid] = entry
            ids.append(eid)
            chain = eid
        model.leaf = chain
        model.touch(self.now(), message_count=model.meta["message_count"] + len(batch))
        got = self.call("session::append-many", payload, (ON_MESSAGE_ADDED,) * len(ids))
        assert got == {"entry_ids": ids, "last_entry_id": ids[-1]}

    @precondition(lambda self: bool(self.sessions))
    @rule(data=st.data(), text=texts, expectation=st.sampled_from(["none", "right", "wrong"]))
    def update_message(self, data: st.DataObject, text: str, expectation: str) -> None:
        sid = self.pick_session(data)
        eid = self.pick_entry(data, sid)
        content = [{"type": "text", "text": text}]
        payload: dict[str, Any] = {"session_id": sid, "entry_id": eid, "content": content}
        model = self.sessions.get(sid)
        entry = model.entries.get(eid) if model else None
        if expectation != "none":
            current = entry["revision"] if entry else 0
            payload["expected_revision"] = current if expectation == "right" else current + 1
        if model is None:
            self.expect_error("session/not_found", "session::update-message", payload)
            return
        if entry is None:
            self.expect_error("session/entry_not_found", "session::update-message", payload)
            return
        if entry["kind"] != "message":
            self.expect_error("session/invalid_entry_kind", "session::update-message", payload)
            return
        if expectation == "wrong":
            got = self.call("session::update-message", payload)
            assert got == {"updated": False, "revision": entry["revision"]}
            return
        revision = entry["revision"] + 1
        model.entries[eid] = {**entry, "revision": revision, "message": {**entry["message"], "content": content}}
        model.touch(self.now())
        got = self.call("session::update-message", payload, (ON_MESSAGE_UPDATED,))
        assert got == {"updated": True, "revision": revision}

    @precondition(lambda self: bool(self.sessions))
    @rule(data=st.data())
    def set_active_leaf(self, data: st.DataObject) -> None:
        sid = self.pick_session(data)
        eid = self.pick_entry(data, sid)
        payload = {"session_id": sid, "entry_id": eid}
        model = self.sessions.get(sid)
        if model is None:
            self.expect_error("session/not_found", "session::set-active-leaf", payload)
        elif eid not in model.entries:
            self.expect_error("session/entry_not_found", "session::set-active-leaf", payload)
        else:
            model.leaf = eid
            model.touch(self.now())  # team rule: every mutation but set-draft bumps updated_at
            assert self.call("session::set-active-leaf", payload) == {"active_leaf": eid}

    @precondition(lambda self: bool(self.sessions))
    @rule(data=st.data(), title=st.one_of(st.none(), texts))
    def fork(self, data: st.DataObject, title: str | None) -> None:
        sid = self.pick_session(data)
        eid = self.pick_entry(data, sid)
        payload = {"session_id": sid, "entry_id": eid, **({"title": title} if title is not None else {})}
        source = self.sessions.get(sid)
        if source is None:
            self.expect_error("session/not_found", "session::fork", payload)
            return
        if eid not in source.entries:
            self.expect_error("session/entry_not_found", "session::fork", payload)
            return
        new_id = self.take_session_id()
        src = source.meta
        extra = {"forked_from": sid}
        meta = fresh_meta(new_id, title if title is not None else src["title"], src["description"],
                          src.get("metadata"), self.now(), **extra)
        copy_of = ModelSession(meta)
        mapping: dict[str, str] = {}
        for entry in source.path(eid):
            new_eid = self.take_entry_id()
            mapping[entry["id"]] = new_eid
            parent = entry["parent_id"]
            copy_of.entries[new_eid] = {**entry, "id": new_eid,
                                        "parent_id": mapping[parent] if parent else None, "revision": 0}
        copy_of.leaf = mapping[eid]
        copy_of.meta["message_count"] = sum(1 for e in copy_of.entries.values() if e["kind"] == "message")
        self.sessions[new_id] = copy_of
        assert self.call("session::fork", payload, (ON_CREATED,)) == {"session_id": new_id, "meta": copy_of.meta}

    # -- restarts ---------------------------------------------------------------------

    @rule()
    def restart(self) -> None:
        self.sm.close()
        self.sm = self.open()

    @rule()
    def restart_compacting_every_log(self) -> None:
        # Every log rewritten as its live state, then read back by a fresh store.
        store = self.sm.service.store
        assert isinstance(store, FsStore)
        for meta in store.list_metas():
            assert store.compact(meta["session_id"])
        self.sm.close()
        self.sm = self.open()
        self.compare(page=2)

    # -- comparisons --------------------------------------------------------------------

    @invariant()
    def reads_match(self) -> None:
        self.compare(page=2)

    @rule(page=st.integers(1, 4))
    def read_with_other_page_sizes(self, page: int) -> None:
        self.compare(page=page)

    def compare(self, page: int) -> None:
        for sid, model in self.sessions.items():
            assert self.call("session::get", {"session_id": sid}) == {"meta": model.meta}, sid
            path = model.path(model.leaf)
            assert self.transcript(sid, page) == [item_of(e) for e in path], sid
            assert self.tail_ids(sid, page) == [e["id"] for e in path], sid
            assert model.meta["message_count"] == sum(1 for e in model.entries.values() if e["kind"] == "message")
            for eid, entry in model.entries.items():
                got = self.call("session::get-message", {"session_id": sid, "entry_id": eid})
                assert got == {"entry": entry}, (sid, eid)
        assert self.call("session::get", {"session_id": UNKNOWN}) is None
        self.compare_list(page)

    def transcript(self, sid: str, page: int) -> list[dict[str, Any]]:
        """session::messages with custom entries, every page followed."""
        items: list[dict[str, Any]] = []
        payload: dict[str, Any] = {"session_id": sid, "include_custom": True, "limit": page}
        while True:
            got = self.call("session::messages", payload)
            items.extend(got["messages"])
            if "next_cursor" not in got:
                return items
            assert len(got["messages"]) == page  # no short page before the end
            payload["cursor"] = got["next_cursor"]

    def tail_ids(self, sid: str, page: int) -> list[str]:
        """session::messages-tail walked backwards from the leaf to the root."""
        ids: list[str] = []
        payload: dict[str, Any] = {"session_id": sid, "limit": page}
        while True:
            got = self.call("session::messages-tail", payload)
            page_ids = [i["entry_id"] for i in got["messages"]]
            assert not any(i.get("elided") for i in got["messages"])  # no activity runs in this model
            ids[:0] = page_ids
            if not got["has_more"]:
                return ids
            assert page_ids and got["oldest_entry_id"] == page_ids[0]
            payload["before_entry_id"] = got["oldest_entry_id"]

    def compare_list(self, page: int) -> None:
        expected = sorted(self.sessions.values(), key=lambda s: (s.meta["updated_at"], s.meta["session_id"]),
                          reverse=True)
        listed: list[dict[str, Any]] = []
        payload: dict[str, Any] = {"limit": page}
        while True:
            got = self.call("session::list", payload)
            listed.extend(got["sessions"])
            if "next_cursor" not in got:
                break
            payload["cursor"] = got["next_cursor"]
        assert listed == [copy.deepcopy(s.meta) for s in expected]

    def teardown(self) -> None:
        try:
            self.restart()
            self.compare(page=3)
        finally:
            self.sm.close()
            shutil.rmtree(self.dir, ignore_errors=True)


def model_settings(examples: int, steps: int) -> settings:
    """The model test's hypothesis settings (slow steps, filtered draws: both expected)."""
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def shards(machine: type[RuleBasedStateMachine], examples: int, steps: int, count: int) -> list[type[Any]]:
    """``count`` test cases of ``machine`` sharing ``examples`` between them (``steps`` each).

    One case is one test, run by one xdist worker: split, the examples spread over the workers
    instead of one worker running them all while the others wait. Each shard draws from its own
    random seed (no ``derandomize``), so together they explore as widely as one case would."""
    return [type(f"{machine.__name__}Shard{i + 1}", (machine.TestCase,),
                 {"settings": model_settings(examples // count, steps)}) for i in range(count)]


# 100 examples x 50 steps, in four shards: the suite's longest test (~144 s on one worker) set the floor
# of a parallel run.
TestSessionModel1, TestSessionModel2, TestSessionModel3, TestSessionModel4 = shards(SessionModel, 100, 50, 4)
