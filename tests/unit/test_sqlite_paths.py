"""Paths over the sqlite adapter's jump pointers: every window of a long chain
with branches, read in any order, is the chain the memory store gives."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import session_manager
from session_manager.store import Commit
from session_manager.store.memory import MemoryStore
from session_manager.store.sqlite import SqliteSettings, SqliteStore
from session_manager.testing.contract import message, meta


def test_long_branching_paths_read_in_any_order_match_the_memory_store(tmp_path: Path) -> None:
    # Prevents: a wrong depth or jump pointer (one statement now links an entry from its parent
    # and the parent's jump target) that shows only deep in a long session, or on a branch.
    lite = SqliteStore(SqliteSettings(path=str(tmp_path / "p.db")))
    plain = MemoryStore()
    rng = random.Random(7)
    ids: list[str] = []
    try:
        for store in (lite, plain):
            store.commit("s", Commit(meta=meta("s")))
        for i in range(1500):
            # Mostly the last entry, sometimes an earlier one (a branch), in batches of up to 7.
            parent = ids[-1] if ids and rng.random() > 0.05 else (rng.choice(ids) if ids else None)
            batch = []
            for j in range(rng.randint(1, 7)):
                entry = message(f"e{i}-{j}", parent)
                batch.append(entry)
                parent = entry["id"]
            ids += [e["id"] for e in batch]
            for store in (lite, plain):
                store.commit("s", Commit(entries=tuple(batch), leaf=parent))
        for leaf in [ids[-1], *rng.sample(ids, 20)]:
            want = [e["id"] for e in plain.path("s", leaf)]
            got = lite.path("s", leaf)
            assert len(got) == len(want)
            order = list(range(len(want)))
            rng.shuffle(order)
            for index in order[:200]:
                assert got[index]["id"] == want[index]
                assert got.index_of(want[index]) == index
            assert [e["id"] for e in got] == want
    finally:
        lite.close()


def _tails(sm: session_manager.SessionManager, sid: str) -> list[list[str]]:
    """Every page of the active path, newest first, as message texts (a fork's copies get new
    ids), paging with before_entry_id."""
    pages: list[list[str]] = []
    req: dict[str, Any] = {"session_id": sid, "limit": 7}
    while True:
        page = sm.call("session::messages-tail", req)
        pages.append([m["message"]["content"][0]["text"] for m in page["messages"]])
        if not page["has_more"]:
            return pages
        req["before_entry_id"] = page["oldest_entry_id"]


def _walks(store: SqliteStore) -> list[str]:
    """Window reads that took the jump-pointer walk (the recursive query) instead of the range scan."""
    seen: list[str] = []
    store.db.conn().set_trace_callback(lambda sql: seen.append(sql) if "WITH RECURSIVE" in sql else None)
    return seen


def test_tail_after_set_active_leaf_and_fork_matches_the_memory_store(tmp_path: Path) -> None:
    # Prevents: the depth-range window (entries_depth) returning a sibling branch's entry at a
    # depth, after set-active-leaf moves the leaf to an older branch or in a fork's new session;
    # a bushy stretch (many siblings per depth) read row by row instead of by the walk; and an
    # append under a moved leaf linked from a stale depth (the append's read brings the links).
    lite = session_manager.open(f"sqlite:///{tmp_path / 't.db'}")
    plain = session_manager.open(store=MemoryStore())
    try:
        for sm in (lite, plain):
            sid = "s"
            sm.ensure(sid)
            for i in range(40):
                sm.append(sid, message=_user(f"t{i}"), entry_id=f"t{i}")
            # Twelve alternative replies to t29, each three entries deep: depths 30..32 hold 13 entries each.
            for b in range(12):
                parent = "t29"
                for k in range(3):
                    parent = sm.append(sid, message=_user(f"b{b}-{k}"), parent_id=parent,
                                       entry_id=f"b{b}-{k}").entry_id
        walks = _walks(lite.service.store)  # type: ignore[arg-type]
        for n, leaf in enumerate(("t39", "b5-2", "b11-1", "t30", "t39")):
            for sm in (lite, plain):
                sm.set_active_leaf("s", entry_id=leaf)
            assert _tails(lite, "s") == _tails(plain, "s"), leaf
            # An append under the moved leaf: its links come with the append's read of the leaf.
            for sm in (lite, plain):
                sm.append("s", message=_user(f"after {leaf}"), entry_id=f"a{n}")
            assert _tails(lite, "s") == _tails(plain, "s"), f"a{n}"
        assert walks, "the bushy stretch (13 entries per depth) was read by the jump-pointer walk"
        forks = [sm.fork("s", entry_id="b3-1").session_id for sm in (lite, plain)]
        for sm, fork in zip((lite, plain), forks, strict=True):
            sm.append(fork, message=_user("after the fork"), entry_id="f0")
        walks.clear()
        assert _tails(lite, forks[0]) == _tails(plain, forks[1])
        assert not walks, "a fork's linear path is read by range scans, no walk"
        assert _tails(lite, forks[0])[0] == ["t26", "t27", "t28", "t29", "b3-0", "b3-1", "after the fork"]
    finally:
        lite.close()
        plain.close()


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def test_an_uncopied_tail_or_messages_page_is_the_callers_alone(tmp_path: Path) -> None:
    # Prevents: the embedded host skipping its response copy (sqlite paths are decoded
    # per read: private_paths) while something still shares the objects: a caller changing
    # a page it got (message text, origin, the item list) must not change what the next
    # read returns, nor what another thread's read of the same window got.
    with session_manager.open(f"sqlite:///{tmp_path / 's.db'}") as sm:
        assert sm.service.store.private_paths
        sid = sm.create().session_id
        for i in range(70):
            sm.call("session::append", {"session_id": sid, "message": _user(f"m{i}"), "origin": {"n": i}})
        for function, request in (("session::messages-tail", {"session_id": sid, "limit": 50}),
                                  ("session::messages", {"session_id": sid, "limit": 50})):
            first = sm.call(function, request)
            second = sm.call(function, request)
            assert first == second
            pristine = copy.deepcopy(first)
            for item in first["messages"]:
                item["message"]["content"][0]["text"] = "changed"
                item["message"]["content"].append({"type": "text", "text": "more"})
                item["origin"]["n"] = -1
            first["messages"].clear()
            assert second == pristine, function
            assert sm.call(function, request) == pristine, function


def test_stores_whose_paths_are_shared_still_get_their_responses_copied(tmp_path: Path) -> None:
    # Prevents: the copy skipped over a store whose path entries are cached and shared (fs,
    # memory): a caller's change to its page would then change the store's cached entries.
    for sm in (session_manager.open(tmp_path / "fs"), session_manager.open(store=MemoryStore())):
        with sm:
            assert not sm.service.store.private_paths
            sid = sm.create().session_id
            sm.call("session::append", {"session_id": sid, "message": _user("kept")})
            page = sm.call("session::messages-tail", {"session_id": sid, "limit": 5})
            page["messages"][0]["message"]["content"][0]["text"] = "changed"
            again = sm.call("session::messages-tail", {"session_id": sid, "limit": 5})
            assert again["messages"][0]["message"]["content"][0]["text"] == "kept"



def test_a_window_decoded_in_one_parse_keeps_every_value_exact(tmp_path: Path) -> None:
    # Prevents: the one-parse decoding of a path window (its bodies joined as one JSON array)
    # losing what the per-body decoding kept: integers past 64 bits (the whole window then
    # takes the exact decoder), -0.0, float digits, non-ASCII text, in order, entry by entry.
    data = {"big": 2**70, "neg": -(2**64) - 1, "zero": -0.0, "f": 0.1, "text": "é\u2028🙂", "n": [1, 1.0]}
    with session_manager.open(f"sqlite:///{tmp_path / 's.db'}") as sm:
        sid = sm.create().session_id
        for i in range(5):
            sm.call("session::append", {"session_id": sid, "message": _user(f"before {i}")})
        sm.call("session::append", {"session_id": sid, "custom": {"custom_type": "probe", "data": data}})
        sm.call("session::append", {"session_id": sid, "message": _user("after")})
        page = sm.call("session::messages-tail", {"session_id": sid, "limit": 50})
    items = page["messages"]
    assert [i.get("message", {}).get("content", [{}])[0].get("text") for i in items] == [
        "before 0", "before 1", "before 2", "before 3", "before 4", None, "after"]
    got = items[5]["custom"]["data"]
    assert got == data and repr(got) == repr(data)
    assert type(got["big"]) is int and type(got["n"][1]) is float and str(got["zero"]) == "-0.0"
