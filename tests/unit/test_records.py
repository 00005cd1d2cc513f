"""The JSONL record format shared with the reference worker.

Records are compact JSON lines discriminated by ``type`` (meta, entry, leaf,
append, commit). Encoding must keep a mutation atomic under a torn write;
decoding must reject anything that is not a well-formed record so replay
can skip it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._wire.events import EVENT_FUNCTIONS
from session_manager.clock import ManualClock
from session_manager.errors import UnstorableValue
from session_manager.ids import SequentialIds
from session_manager.store import Commit
from session_manager.store.fs._records import decode_record, encode_commit
from session_manager.testing.contract import custom, message, meta


def lines(data: bytes) -> list[dict[str, Any]]:
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.decode("utf-8").split("\n")[:-1]]


def line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# -- encoding ------------------------------------------------------------------------


def test_single_append_is_one_append_line() -> None:
    # Prevents: an append split over lines a crash can separate (entry without its meta).
    e, m = message("e_1", None), meta("s_1", message_count=1)
    data = encode_commit(Commit(entries=(e,), leaf="e_1", meta=m))
    assert lines(data) == [{"type": "append", "entry": e, "meta": m}]
    assert data.count(b"\n") == 1


def test_append_many_ends_with_the_append_line() -> None:
    # Prevents: the leaf or meta of a batch landing before all its entries (a torn batch half-visible).
    batch = (message("e_1", None), message("e_2", "e_1"), message("e_3", "e_2"))
    m = meta("s_1", message_count=3)
    got = lines(encode_commit(Commit(entries=batch, leaf="e_3", meta=m)))
    assert got == [
        {"type": "entry", "entry": batch[0]},
        {"type": "entry", "entry": batch[1]},
        {"type": "append", "entry": batch[2], "meta": m},
    ]


def test_meta_only_leaf_only_and_update_commits() -> None:
    # Prevents: create / set-active-leaf / update-message writing the wrong record kinds.
    m = meta("s_1")
    assert lines(encode_commit(Commit(meta=m))) == [{"type": "meta", "meta": m}]
    assert lines(encode_commit(Commit(leaf="e_2"))) == [{"type": "leaf", "entry_id": "e_2"}]
    edited = message("e_1", None, "new", revision=1)
    got = lines(encode_commit(Commit(entries=(edited,), meta=m)))
    tx = got[0]["tx"]
    assert isinstance(tx, str) and tx
    assert got == [
        {"type": "entry", "entry": edited, "tx": tx},
        {"type": "meta", "meta": m, "tx": tx, "tx_n": 2},
    ]


def test_leaf_not_on_the_last_entry_keeps_separate_lines() -> None:
    # Prevents: the append shortcut moving the leaf to an entry the commit did not name.
    batch = (message("e_1", None), message("e_2", "e_1"))
    m = meta("s_1", message_count=2)
    got = lines(encode_commit(Commit(entries=batch, leaf="e_1", meta=m)))
    tx = got[0]["tx"]
    assert got == [
        {"type": "entry", "entry": batch[0], "tx": tx},
        {"type": "entry", "entry": batch[1], "tx": tx},
        {"type": "leaf", "entry_id": "e_1", "tx": tx},
        {"type": "meta", "meta": m, "tx": tx, "tx_n": 4},
    ]


def test_lines_are_compact_utf8() -> None:
    # Prevents: output the reference (serde_json) would write differently, or escaped non-ASCII bloat.
    e = message("e_1", None, "héllo ☃ \n \"q\"")
    data = encode_commit(Commit(entries=(e,), leaf="e_1", meta=meta("s_1", message_count=1)))
    text = data.decode("utf-8")
    assert "héllo ☃" in text
    assert ", " not in text and '": ' not in text
    assert text.count("\n") == 1  # the newline inside the text is escaped


def test_lone_surrogate_is_unstorable() -> None:
    # Prevents: a crash (or a corrupt line) on text that has no UTF-8 form.
    with pytest.raises(UnstorableValue):
        encode_commit(Commit(entries=(message("e_1", None, "bad \ud800"),), leaf="e_1", meta=meta("s_1")))


@pytest.mark.parametrize(
    "commit",
    [
        Commit(meta=meta("s_1", metadata={"owner": "u_1"}, draft="d")),
        Commit(leaf="e_9"),
        Commit(entries=(message("e_1", None),), leaf="e_1", meta=meta("s_1", message_count=1)),
        Commit(entries=(message("e_1", None), custom("e_2", "e_1", {"a": 1})), leaf="e_2", meta=meta("s_1")),
        Commit(entries=(message("e_1", None, revision=3),), meta=meta("s_1")),
    ],
)
def test_every_encoded_line_decodes(commit: Commit) -> None:
    # Prevents: writing a line our own replay would skip as malformed.
    for raw in encode_commit(commit).split(b"\n")[:-1]:
        assert decode_record(raw, "s_1") == json.loads(raw)


# -- decoding --------------------------------------------------------------------------


def test_reference_record_kinds_decode() -> None:
    # Prevents: rejecting any of the five record types the reference writes.
    m, e = meta("s_1"), message("e_1", None)
    for record in (
        {"type": "meta", "meta": m},
        {"type": "entry", "entry": e},
        {"type": "entry", "entry": custom("e_2", "e_1")},
        {"type": "leaf", "entry_id": "e_1"},
        {"type": "leaf", "entry_id": None},
        {"type": "append", "entry": e, "meta": m},
        {"type": "commit", "entry_id": "e_1"},
    ):
        assert decode_record(line(record), "s_1") == record


def test_absent_revision_defaults() -> None:
    # Prevents: older entries written without a revision being dropped, or decoded with a field
    # lost or invented (the decoder keeps the record as written; the store supplies the default).
    e = message("e_1", None)
    del e["revision"]
    assert decode_record(line({"type": "entry", "entry": e})) == {"type": "entry", "entry": e}


def test_an_entry_written_without_a_revision_is_served_as_revision_0(tmp_path: Path) -> None:
    # Prevents: an older log's entry without "revision" being skipped on replay, served without the
    # revision the wire requires, or refusing the update guarded by revision 0 its reader would send.
    data = tmp_path / "d"
    with session_manager.open(data, ids=SequentialIds(), clock=ManualClock(1000)) as sm:
        sm.call("session::create", {})
        sm.call("session::append", {"session_id": "s_001", "message": {
            "role": "user", "content": [{"type": "text", "text": "old"}], "timestamp": 1}})
    log = data / "s_001.jsonl"
    text = log.read_text(encoding="utf-8")
    assert text.count('"revision":0,') == 1
    log.write_text(text.replace('"revision":0,', ""), encoding="utf-8")
    shutil.rmtree(data / ".index")  # the sidecar indexed the old bytes; the store rebuilds it from the log
    seen: list[tuple[str, Any]] = []
    with session_manager.open(data, ids=SequentialIds(), clock=ManualClock(2000)) as sm:
        for fid in EVENT_FUNCTIONS:
            sm.observe({"function_id": fid}, lambda e, fid=fid: seen.append((fid, e)))
        got = sm.call("session::get-message", {"session_id": "s_001", "entry_id": "e_001"})["entry"]
        assert list(got) == ["kind", "id", "parent_id", "timestamp", "revision", "message"]  # as today's writer
        assert (got["revision"], got["message"]["content"]) == (0, [{"type": "text", "text": "old"}])
        assert sm.call("session::get", {"session_id": "s_001"})["meta"]["message_count"] == 1
        assert seen == []
        out = sm.call("session::update-message", {"session_id": "s_001", "entry_id": "e_001", "expected_revision": 0,
                                                  "content": [{"type": "text", "text": "new"}]})
        assert out == {"updated": True, "revision": 1}
        assert [(fid, e["entry_id"], e["revision"]) for fid, e in seen] == [("session::on-message-updated", "e_001", 1)]
    with session_manager.open(data, read_only=True) as again:
        got = again.call("session::get-message", {"session_id": "s_001", "entry_id": "e_001"})["entry"]
        assert (got["revision"], got["message"]["content"]) == (1, [{"type": "text", "text": "new"}])


def bad_entries() -> list[dict[str, Any]]:
    out = []
    for change in (
        {"id": 7},
        {"timestamp": True},
        {"timestamp": "1"},
        {"parent_id": 3},
        {"revision": -1},
        {"revision": 1.5},
        {"origin": "x"},
        {"kind": "other"},
        {"message": {"role": "robot", "content": []}},
        {"message": {"role": "user", "content": "text"}},
    ):
        out.append({**message("e_1", None), **change})
    out.append({**custom("e_1", None), "custom_type": None})
    return out


@pytest.mark.parametrize("entry", bad_entries())
def test_malformed_entries_are_rejected(entry: dict[str, Any]) -> None:
    # Prevents: a corrupt entry entering replay and breaking reads later.
    assert decode_record(line({"type": "entry", "entry": entry})) is None
    assert decode_record(line({"type": "append", "entry": entry, "meta": meta("s_1")})) is None


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b'{"type":"entry","ent',
        b"[1,2]",
        b'"meta"',
        b'{"type":"snapshot","meta":{}}',
        b'{"meta":{}}',
        b'{"type":"meta","meta":{"session_id":"s_1"}}',
        b'{"type":"leaf","entry_id":5}',
        b'{"type":"commit"}',
        b'{"type":"append","entry":{}}',
        b'{"type":"meta","meta":{"session_id":"s_1","title":"\xff"}}',
    ],
)
def test_malformed_lines_are_rejected(raw: bytes) -> None:
    # Prevents: a torn tail or a foreign line crashing replay instead of being skipped.
    assert decode_record(raw, "s_1") is None


def test_meta_of_another_session_is_rejected() -> None:
    # Prevents: a file copied under another name mixing two sessions' metas.
    record = {"type": "meta", "meta": meta("s_2")}
    assert decode_record(line(record), "s_1") is None
    assert decode_record(line(record), "s_2") == record
    assert decode_record(line(record)) == record


def test_bad_status_is_rejected() -> None:
    # Prevents: a meta with a status outside the contract reaching list filters.
    assert decode_record(line({"type": "meta", "meta": meta("s_1", status="halted")}), "s_1") is None


def test_integers_past_64_bits_are_stored_and_read_back() -> None:
    # Prevents: the fast JSON path refusing (or mangling) a caller's big integer in metadata.
    m = meta("s_1", metadata={"big": 2**70, "neg": -(2**65)})
    data = encode_commit(Commit(meta=m))
    assert decode_record(data.rstrip(b"\n"), "s_1") == {"type": "meta", "meta": m}


def test_nan_and_infinity_are_not_json() -> None:
    # Prevents: a line only Python's lenient parser accepts replaying here but not in the reference.
    line = b'{"type":"meta","meta":{"session_id":"s_1","title":"","description":"","status":"idle",' \
           b'"created_at":1,"updated_at":1,"message_count":0,"metadata":{"x":NaN}}}'
    assert decode_record(line, "s_1") is None
    assert decode_record(line.replace(b"NaN", b"Infinity"), "s_1") is None
