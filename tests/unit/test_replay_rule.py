"""One replay rule for every reader: list (cold, from a log's tail), get and
messages (full replay), and a read-only open all answer the same after a
bad line inside a commit group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds
from session_manager.store.fs._records import Replay, last_meta

T0 = 1000


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def _streamed_session(where: Path) -> list[bytes]:
    """s_001 whose last mutation (an update at T0+5) is a two-line commit group."""
    clock = ManualClock(T0)
    with session_manager.open(where, ids=SequentialIds(), clock=clock) as sm:
        sm.call("session::create", {})
        sm.call("session::append", {"session_id": "s_001", "message": _user("draft")})
        clock.advance(5)
        sm.call("session::update-message", {"session_id": "s_001", "entry_id": "e_001",
                                            "content": [{"type": "text", "text": "final"}]})
    lines = (where / "s_001.jsonl").read_bytes().split(b"\n")
    assert b'"tx_n":2' in lines[-2] and b'"tx"' in lines[-3]  # entry member, then meta member
    return lines


def _answers(where: Path, *, read_only: bool = False) -> dict[str, Any]:
    """What each reader says, the cold list asked first (before any replay)."""
    with session_manager.open(where, read_only=read_only) as sm:
        listed = sm.call("session::list", {})["sessions"]
        got = sm.call("session::get", {"session_id": "s_001"})["meta"]
        texts = [m["message"]["content"][0]["text"]
                 for m in sm.call("session::messages", {"session_id": "s_001"})["messages"]]
        warm = sm.call("session::list", {})["sessions"]
    return {"list": [m["updated_at"] for m in listed], "get": got["updated_at"], "texts": texts,
            "warm_list": [m["updated_at"] for m in warm]}


def test_a_foreign_malformed_line_inside_a_group_skips_only_that_line(tmp_path: Path) -> None:
    # Prevents: list answering updated_at 1000 (group judged incomplete) while get answers 1005.
    where = tmp_path / "d"
    lines = _streamed_session(where)
    lines.insert(len(lines) - 2, b'{"type":"entry","entry":{not json')  # between the two members
    (where / "s_001.jsonl").write_bytes(b"\n".join(lines))
    want = {"list": [T0 + 5], "get": T0 + 5, "texts": ["final"], "warm_list": [T0 + 5]}
    assert _answers(where) == want
    assert _answers(where, read_only=True) == want


@pytest.mark.parametrize("member", [-3, -2], ids=["entry-member", "meta-member"])
def test_a_corrupt_member_leaves_the_whole_group_out_for_every_reader(tmp_path: Path, member: int) -> None:
    # Prevents: half a commit applied by one reader and none of it by another.
    where = tmp_path / "d"
    lines = _streamed_session(where)
    lines[member] = lines[member][:-12] + b"#garbage"
    (where / "s_001.jsonl").write_bytes(b"\n".join(lines))
    want = {"list": [T0], "get": T0, "texts": ["draft"], "warm_list": [T0]}
    assert _answers(where) == want
    assert _answers(where, read_only=True) == want


def test_a_tail_window_cut_inside_a_group_reads_like_the_whole_log() -> None:
    # Prevents: a cold list deciding from a window that starts mid-group (or mid-line).
    meta_a = b'{"type":"meta","meta":{"session_id":"s","title":"a","description":"","status":"idle",' \
             b'"created_at":1,"updated_at":1,"message_count":0}}'
    grouped = [
        b'{"type":"leaf","entry_id":null,"tx":"t1"}',
        b'{"type":"meta","meta":{"session_id":"s","title":"b","description":"","status":"idle",'
        b'"created_at":1,"updated_at":2,"message_count":0},"tx":"t1","tx_n":2}',
    ]
    log = [meta_a, *grouped, b""]
    whole, certain = last_meta(log, "s")
    assert certain and whole is not None and whole["title"] == "b"
    for cut in range(len(log)):
        window = [b"partial-line", *log[cut:]]
        meta, sure = last_meta(window, "s", whole=False)
        if sure:
            assert meta == whole, cut
    # A window holding only the group's last member cannot tell: it asks for more.
    assert last_meta([b"x", grouped[1], b""], "s", whole=False) == (None, False)


def test_replay_fed_in_pieces_equals_replay_in_one_go() -> None:
    # Prevents: a read-only refresh (which feeds what the log gained) deciding a group differently.
    lines = [
        b'{"type":"leaf","entry_id":"e_1","tx":"t"}',
        b"garbage",
        b'{"type":"leaf","entry_id":"e_2","tx":"t","tx_n":2}',
        b'{"type":"leaf","entry_id":"e_3"}',
    ]
    whole = list(Replay().feed(lines, "s", lambda n, w: None))
    for split in range(len(lines) + 1):
        replay = Replay()
        pieces = list(replay.feed(lines[:split], "s", lambda n, w: None))
        pieces += list(replay.feed(lines[split:], "s", lambda n, w: None))
        assert pieces == whole, split
    assert [r["entry_id"] for r in whole] == ["e_1", "e_2", "e_3"]
