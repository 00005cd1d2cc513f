"""Crash and failure behaviour of the fs store's JSONL files.

A crash may lose the mutation in flight, never part of an earlier one, and
must never leave a file that replays into a state no sequence of whole
mutations produces. Files stay readable by (and written in the format of)
the reference worker.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.clock import ManualClock
from session_manager.errors import SessionError, StoreError
from session_manager.ids import SequentialIds
from session_manager.store import Commit, FsStore
from session_manager.store.fs import _rewrite
from session_manager.store.fs._records import decode_record, encode_commit
from session_manager.testing.contract import T0, attachment, message, meta


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


def seeded(data: Path) -> FsStore:
    """s_1 with e_1 <- e_2 (leaf e_2, 2 messages)."""
    store = FsStore(data)
    store.commit("s_1", Commit(meta=meta("s_1")))
    store.commit("s_1", Commit(entries=(message("e_1", None),), leaf="e_1", meta=meta("s_1", message_count=1)))
    store.commit("s_1", Commit(entries=(message("e_2", "e_1"),), leaf="e_2", meta=meta("s_1", message_count=2)))
    return store


def reread(data: Path) -> FsStore:
    """What a restart would replay, read while the writer still owns the directory."""
    return FsStore(data, read_only=True)


def state(store: FsStore, session_id: str = "s_1") -> dict[str, Any]:
    leaf = store.get_leaf(session_id)
    return {
        "meta": store.get_meta(session_id),
        "leaf": leaf,
        "path": [e["id"] for e in store.path(session_id, leaf)],
        "entries": sorted(store.entries(session_id), key=lambda e: e["id"]),
    }


def assert_clean(path: Path, session_id: str = "s_1") -> None:
    """Every line of the file is a whole, valid record and the file ends with a newline."""
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    for number, line in enumerate(raw.split(b"\n")[:-1], 1):
        assert decode_record(line, session_id) is not None, f"line {number}: {line!r}"


def next_append(store: FsStore) -> None:
    store.commit("s_1", Commit(entries=(message("e_3", "e_2"),), leaf="e_3", meta=meta("s_1", message_count=3)))


# -- torn tails ------------------------------------------------------------------------


@pytest.mark.parametrize("torn", [b'{"type":"append","entry":{"kind":"mes', b"{", b'{"type":"meta","meta":{"ti\xc3'])
def test_torn_tail_is_truncated_by_the_next_commit(data: Path, torn: bytes) -> None:
    # Prevents: a crash mid-append gluing the next record onto the torn line (losing it on replay).
    before = state(seeded(data))
    path = data / "s_1.jsonl"
    good = path.read_bytes()
    path.write_bytes(good + torn)
    store = FsStore(data)
    assert state(store) == before
    next_append(store)
    # The torn bytes are gone, not kept in front of the new record.
    assert path.read_bytes() == good + encode_commit(
        Commit(entries=(message("e_3", "e_2"),), leaf="e_3", meta=meta("s_1", message_count=3))
    )
    assert_clean(path)
    assert state(reread(data))["path"] == ["e_1", "e_2", "e_3"]


def test_valid_unterminated_last_line_gets_a_newline(data: Path) -> None:
    # Prevents: a complete final record (newline lost) being truncated away or merged with the next one.
    seeded(data)
    path = data / "s_1.jsonl"
    path.write_bytes(path.read_bytes() + b'{"type":"leaf","entry_id":"e_1"}')
    store = FsStore(data)
    assert store.get_leaf("s_1") == "e_1"
    store.commit("s_1", Commit(entries=(message("e_3", "e_1"),), leaf="e_3", meta=meta("s_1", message_count=3)))
    assert b'{"type":"leaf","entry_id":"e_1"}\n{"type":"append"' in path.read_bytes()
    assert_clean(path)
    assert state(reread(data))["path"] == ["e_1", "e_3"]


def test_tail_repair_on_a_long_unterminated_line(data: Path) -> None:
    # Prevents: the tail scan stopping at its buffer size and truncating a valid record.
    store = seeded(data)
    big = message("e_3", "e_2", "x" * 200_000)
    path = data / "s_1.jsonl"
    path.write_bytes(path.read_bytes() + json.dumps({"type": "entry", "entry": big}).encode())
    store.close()
    store = FsStore(data)
    assert store.get_entry("s_1", "e_3") == big
    store.commit("s_1", Commit(leaf="e_3"))
    assert_clean(path)
    assert state(reread(data))["path"] == ["e_1", "e_2", "e_3"]


def test_invalid_utf8_line_is_skipped(data: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: one corrupt line hiding every record after it.
    seeded(data)
    path = data / "s_1.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines.insert(1, b'{"type":"leaf","entry_id":"\xff\xfe"}')
    path.write_bytes(b"\n".join(lines))
    with caplog.at_level(logging.WARNING, logger="session_manager.store.fs"):
        store = FsStore(data)
        assert state(store)["path"] == ["e_1", "e_2"]
    assert store.get_meta("s_1") == meta("s_1", message_count=2)
    # Line 2 of the file, or line 1 of what follows the part the index sidecar covers.
    assert any(re.search(r"line (2:|1 after byte \d+)", r.getMessage()) for r in caplog.records)


def test_garbage_lines_anywhere_are_skipped(data: Path) -> None:
    # Prevents: replay stopping at the first bad line.
    seeded(data)
    path = data / "s_1.jsonl"
    lines = path.read_bytes().split(b"\n")
    noisy = [b"\x00\x01", b"[]", b'{"type":"nope"}', b"   "]
    mixed = [x for pair in zip(noisy, lines, strict=False) for x in pair] + lines[len(noisy) :]
    path.write_bytes(b"\n".join(mixed))
    assert state(reread(data))["path"] == ["e_1", "e_2"]


# -- failed writes ------------------------------------------------------------------------


def failing_write(monkeypatch: pytest.MonkeyPatch, keep: int | None) -> list[int]:
    """Make the next os.write write ``keep`` bytes (``None``: nothing) then fail with ENOSPC."""
    real = os.write
    calls: list[int] = []

    def fake(fd: int, buf: Any) -> int:
        calls.append(len(buf))
        if keep:
            real(fd, bytes(buf[:keep]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", fake)
    return calls


@pytest.mark.parametrize("keep", [None, 1, 20, "all-but-newline"])
def test_failed_write_changes_nothing_and_is_repaired(
    data: Path, monkeypatch: pytest.MonkeyPatch, keep: int | str | None, caplog: pytest.LogCaptureFixture
) -> None:
    # Prevents: a half-written record left in the file, or a failed commit applied in memory.
    store = seeded(data)
    before = state(store)
    payload = encode_commit(Commit(entries=(message("e_3", "e_2"),), leaf="e_3", meta=meta("s_1", message_count=3)))
    n = len(payload) - 1 if keep == "all-but-newline" else keep
    assert n is None or isinstance(n, int)
    calls = failing_write(monkeypatch, n)
    with pytest.raises(StoreError, match="No space left"):
        next_append(store)
    assert calls
    monkeypatch.undo()
    assert state(store) == before
    # The next commit first repairs the tail left by the failure.
    store.commit("s_1", Commit(entries=(message("e_4", "e_2"),), leaf="e_4", meta=meta("s_1", message_count=3)))
    assert_clean(data / "s_1.jsonl")
    with caplog.at_level(logging.WARNING, logger="session_manager.store.fs"):
        again = reread(data)
        after = state(again)
    assert not caplog.records
    assert after == state(store)
    assert after["path"] == ["e_1", "e_2", "e_4"]
    # Even a write that landed a whole record (all but its newline) must not replay: it was reported failed.
    assert [e["id"] for e in after["entries"]] == ["e_1", "e_2", "e_4"]


def test_failed_write_leaves_no_record_to_replay(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a leaf move reported as failed coming back after a restart.
    store = seeded(data)
    payload = encode_commit(Commit(leaf="e_1"))
    failing_write(monkeypatch, len(payload) - 1)
    with pytest.raises(StoreError):
        store.commit("s_1", Commit(leaf="e_1"))
    monkeypatch.undo()
    store.commit("s_1", Commit(meta=meta("s_1", message_count=2, title="later")))
    assert store.get_leaf("s_1") == "e_2"
    again = reread(data)
    assert state(again) == state(store)
    assert again.get_leaf("s_1") == "e_2"


def test_failed_write_on_an_unterminated_file_keeps_the_older_record(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prevents: undoing a failed write also cutting the (valid, unterminated) record before it.
    seeded(data)
    path = data / "s_1.jsonl"
    path.write_bytes(path.read_bytes() + b'{"type":"leaf","entry_id":"e_1"}')
    store = FsStore(data)
    failing_write(monkeypatch, 5)
    with pytest.raises(StoreError):
        next_append(store)
    monkeypatch.undo()
    assert path.read_bytes().endswith(b'{"type":"leaf","entry_id":"e_1"}')
    store.commit("s_1", Commit(entries=(message("e_3", "e_1"),), leaf="e_3", meta=meta("s_1", message_count=3)))
    assert_clean(path)
    assert state(reread(data)) == state(store)
    assert state(store)["path"] == ["e_1", "e_3"]


def test_failed_write_surfaces_as_storage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a disk-full append reported as success, or as an unexpected exception type.
    sm = session_manager.open(tmp_path / "d", ids=SequentialIds(), clock=ManualClock(T0))
    sm.call("session::create", {})
    sm.call("session::append", {"session_id": "s_001", "message": user("one")})
    failing_write(monkeypatch, 10)
    with pytest.raises(SessionError) as info:
        sm.call("session::append", {"session_id": "s_001", "message": user("two")})
    assert info.value.code == "session/storage"
    monkeypatch.undo()
    sm.call("session::append", {"session_id": "s_001", "message": user("three")})
    sm.close()
    again = session_manager.open(tmp_path / "d", ids=SequentialIds(), clock=ManualClock(T0))
    got = again.call("session::messages", {"session_id": "s_001"})["messages"]
    assert [m["message"]["content"][0]["text"] for m in got] == ["one", "three"]
    meta_now = again.call("session::get", {"session_id": "s_001"})["meta"]
    assert meta_now["message_count"] == 2


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


# -- durability modes ---------------------------------------------------------------------


def count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    real = os.fsync
    calls: list[int] = []

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_fsync_mode_syncs_every_commit(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: durability="fsync" silently behaving like "flush" (lost on power failure).
    calls = count_fsyncs(monkeypatch)
    store = FsStore(data, durability="fsync")
    store.commit("s_1", Commit(meta=meta("s_1")))
    # The directory once for the first write after the open (a flush-mode owner before may have
    # left names unsynced), the directory entry of the new file, then the file.
    assert len(calls) == 3
    store.commit("s_1", Commit(entries=(message("e_1", None),), leaf="e_1", meta=meta("s_1", message_count=1)))
    assert len(calls) == 4
    store.put_attachment(attachment("s_1", "a_1", 2), [b"hi"])
    assert len(calls) == 9  # bytes, metadata, the folder, attachments/, data_dir
    store.delete_session("s_1")
    assert len(calls) == 10  # the data_dir entry removal


def test_flush_mode_never_fsyncs(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the default mode paying an fsync per append.
    calls = count_fsyncs(monkeypatch)
    store = seeded(data)
    store.put_attachment(attachment("s_1", "a_1", 2), [b"hi"])
    store.delete_session("s_1")
    assert calls == []


def test_unknown_durability_is_refused(data: Path) -> None:
    # Prevents: a typo in config ("fsynk") silently running without fsync.
    with pytest.raises(ValueError, match="durability"):
        FsStore(data, durability="fsynk")  # type: ignore[arg-type]


# -- atomicity of one commit ------------------------------------------------------------------


def cut_points(data: bytes) -> Iterator[int]:
    """Every way a crash can cut the write of ``data`` short of its last record.

    Losing only the final newline leaves a whole record, which replays (the
    commit happened); every shorter prefix must read as no commit at all.
    """
    yield from range(len(data) - 1)


@pytest.mark.parametrize(
    "make",
    [
        # append-many onto the leaf
        lambda: Commit(
            entries=(message("e_3", "e_2"), message("e_4", "e_3"), message("e_5", "e_4")),
            leaf="e_5",
            meta=meta("s_1", message_count=5, updated_at=T0 + 9),
        ),
        # append-many onto an explicit parent
        lambda: Commit(
            entries=(message("e_3", "e_1"), message("e_4", "e_3")),
            leaf="e_4",
            meta=meta("s_1", message_count=4, updated_at=T0 + 9),
        ),
        # a single append
        lambda: Commit(entries=(message("e_3", "e_2"),), leaf="e_3", meta=meta("s_1", message_count=3)),
    ],
)
def test_commit_cut_short_reads_as_not_happened(data: Path, make: Callable[[], Commit]) -> None:
    # Prevents: a crash mid-batch leaving the leaf moved without the meta (or the reverse).
    store = seeded(data)
    before = state(store)
    path = data / "s_1.jsonl"
    base = path.read_bytes()
    commit = make()
    payload = encode_commit(commit)
    store.commit("s_1", commit)
    after = state(store)
    assert path.read_bytes() == base + payload
    for cut in cut_points(payload):
        path.write_bytes(base + payload[:cut])
        got = state(reread(data))
        assert (got["meta"], got["leaf"], got["path"]) == (before["meta"], before["leaf"], before["path"]), cut
        assert got["meta"]["message_count"] == 2
    path.write_bytes(base + payload[:-1])
    assert state(reread(data)) == after
    path.write_bytes(base + payload)
    assert state(reread(data)) == after


@pytest.mark.parametrize(
    "make",
    [
        # update-message: a new revision of e_1 plus the meta's updated_at
        lambda: Commit(entries=(message("e_1", None, "edited", revision=1),),
                       meta=meta("s_1", message_count=2, updated_at=T0 + 9)),
        # set-active-leaf: the leaf move plus the meta's updated_at
        lambda: Commit(leaf="e_1", meta=meta("s_1", message_count=2, updated_at=T0 + 9)),
    ],
)
def test_two_line_commit_is_all_or_nothing(data: Path, make: Callable[[], Commit]) -> None:
    # Prevents: a crash between an update's entry line and its meta line (or a leaf move's)
    # replaying half a mutation.
    store = seeded(data)
    before = state(store)
    path = data / "s_1.jsonl"
    base = path.read_bytes()
    commit = make()
    store.commit("s_1", commit)
    after = state(store)
    full = path.read_bytes()
    assert len(full[len(base):].splitlines()) == 2
    for cut in cut_points(full[len(base):]):
        path.write_bytes(full[: len(base) + cut])
        assert state(reread(data)) == before, cut
        assert reread(data).list_metas() == [before["meta"]], cut
    path.write_bytes(full)
    assert state(reread(data)) == after
    assert reread(data).list_metas() == [after["meta"]]


def test_a_torn_commit_stays_out_when_later_commits_follow(data: Path) -> None:
    # Prevents: the surviving first line of a torn two-line commit being applied (or
    # swallowing the next commit's lines) once later writes land after it.
    seeded(data)
    path = data / "s_1.jsonl"
    base = path.read_bytes()
    torn = encode_commit(Commit(entries=(message("e_1", None, "lost", revision=1),),
                                meta=meta("s_1", message_count=2, updated_at=T0 + 5)))
    first_line = torn.split(b"\n")[0] + b"\n"
    path.write_bytes(base + first_line)
    reopened = FsStore(data)
    later = Commit(entries=(message("e_1", None, "kept", revision=1),),
                   meta=meta("s_1", message_count=2, updated_at=T0 + 7))
    reopened.commit("s_1", later)
    got = state(reread(data))
    assert [e["message"]["content"][0]["text"] for e in got["entries"]] == ["kept", "hi"]
    assert got["meta"]["updated_at"] == T0 + 7


def test_append_many_cut_short_through_the_api(tmp_path: Path) -> None:
    # Prevents: the service's append-many commit layout losing atomicity (checked end to end).
    where = tmp_path / "d"
    sm = session_manager.open(where, ids=SequentialIds(), clock=ManualClock(T0))
    sm.call("session::create", {})
    sm.call("session::append", {"session_id": "s_001", "message": user("one")})
    path = where / "s_001.jsonl"
    base = path.read_bytes()
    before = sm.call("session::get", {"session_id": "s_001"})
    sm.call("session::append-many", {"session_id": "s_001", "messages": [user("a"), user("b"), user("c")]})
    full = path.read_bytes()
    sm.close()
    for cut in cut_points(full):
        if cut < len(base):
            continue
        path.write_bytes(full[:cut])
        probe = session_manager.open(where, ids=SequentialIds(), clock=ManualClock(T0))
        assert probe.call("session::get", {"session_id": "s_001"}) == before
        assert [m["entry_id"] for m in probe.call("session::messages", {"session_id": "s_001"})["messages"]] == [
            "e_001"
        ]
        probe.close()


def test_fork_cut_short_leaves_no_session(tmp_path: Path) -> None:
    # Prevents: a crashed fork showing up as a session with a partial copy.
    where = tmp_path / "d"
    sm = session_manager.open(where, ids=SequentialIds(), clock=ManualClock(T0))
    sm.call("session::create", {})
    sm.call("session::append-many", {"session_id": "s_001", "messages": [user("a"), user("b")]})
    assert sm.call("session::fork", {"session_id": "s_001", "entry_id": "e_002"})["session_id"] == "s_002"
    sm.close()
    path = where / "s_002.jsonl"
    full = path.read_bytes()
    for cut in cut_points(full):
        path.write_bytes(full[:cut])
        probe = session_manager.open(where, ids=SequentialIds(), clock=ManualClock(T0))
        assert probe.call("session::get", {"session_id": "s_002"}) is None
        assert [s["session_id"] for s in probe.call("session::list", {})["sessions"]] == ["s_001"]
        probe.close()


# -- reference format compatibility -------------------------------------------------------------


def ref_line(**record: Any) -> str:
    """A line as the reference (serde_json) writes it: ``type`` first, compact."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def test_reference_file_replays(tmp_path: Path) -> None:
    # Prevents: a data_dir written by the reference (legacy three-line appends, commit markers,
    # rewrites) not loading here.
    where = tmp_path / "d"
    where.mkdir()
    m0 = meta("chat 42", title="ref", metadata={"owner": "u_1"})
    e1 = message("e_001", None, "one")
    e2 = message("e_002", "e_001", "two")
    e3 = message("e_003", "e_002", "three")
    e2_edit = message("e_002", "e_001", "two, edited", revision=1)
    text = "\n".join(
        [
            ref_line(type="meta", meta=m0),
            # legacy append: entry, leaf, meta as three records, then a commit marker
            ref_line(type="entry", entry=e1),
            ref_line(type="leaf", entry_id="e_001"),
            ref_line(type="meta", meta={**m0, "message_count": 1, "updated_at": T0 + 1}),
            ref_line(type="commit", entry_id="e_001"),
            # current append: one record
            ref_line(type="append", entry=e2, meta={**m0, "message_count": 2, "updated_at": T0 + 2}),
            ref_line(type="append", entry=e3, meta={**m0, "message_count": 3, "updated_at": T0 + 3}),
            # update-message: the entry rewritten, then the meta
            ref_line(type="entry", entry=e2_edit),
            ref_line(type="meta", meta={**m0, "message_count": 3, "updated_at": T0 + 4, "status": "working"}),
            ref_line(type="commit", entry_id="e_002"),
        ]
    )
    (where / "chat%2042.jsonl").write_text(text + "\n", encoding="utf-8")
    sm = session_manager.open(where, ids=SequentialIds(), clock=ManualClock(T0 + 10))
    got = sm.call("session::get", {"session_id": "chat 42"})["meta"]
    assert got == {**m0, "message_count": 3, "updated_at": T0 + 4, "status": "working"}
    items = sm.call("session::messages", {"session_id": "chat 42"})["messages"]
    assert [(i["entry_id"], i["message"]["content"][0]["text"]) for i in items] == [
        ("e_001", "one"),
        ("e_002", "two, edited"),
        ("e_003", "three"),
    ]
    assert sm.call("session::get-message", {"session_id": "chat 42", "entry_id": "e_002"})["entry"] == e2_edit
    assert [s["session_id"] for s in sm.call("session::list", {})["sessions"]] == ["chat 42"]
    # Appending continues the reference's chain, in the same file.
    appended = sm.call("session::append", {"session_id": "chat 42", "message": user("four")})
    assert appended["parent_id"] == "e_003"
    raw = (where / "chat%2042.jsonl").read_bytes()
    assert raw.startswith(text.encode("utf-8") + b"\n")
    assert_clean(where / "chat%2042.jsonl", "chat 42")


def test_written_files_use_only_reference_record_shapes(tmp_path: Path) -> None:
    # Prevents: our writer emitting a record type or field layout the reference cannot parse.
    where = tmp_path / "d"
    sm = session_manager.open(where, ids=SequentialIds(), clock=ManualClock(T0))
    sm.call("session::ensure", {"session_id": "chat/1", "metadata": {"owner": "u_1"}})
    sm.call("session::append", {"session_id": "chat/1", "message": user("a"), "origin": {"turn": 1}})
    sm.call("session::append", {"session_id": "chat/1", "custom": {"custom_type": "note", "data": [1]}})
    sm.call("session::append-many", {"session_id": "chat/1", "messages": [user("b"), user("c")]})
    sm.call("session::update-message", {"session_id": "chat/1", "entry_id": "e_001",
                                        "content": [{"type": "text", "text": "a2"}]})
    sm.call("session::set-active-leaf", {"session_id": "chat/1", "entry_id": "e_001"})
    sm.call("session::set-status", {"session_id": "chat/1", "status": "error", "reason": "boom"})
    sm.call("session::set-meta", {"session_id": "chat/1", "title": "t"})
    sm.call("session::set-draft", {"session_id": "chat/1", "draft": "later"})
    sm.call("session::fork", {"session_id": "chat/1", "entry_id": "e_003"})
    shapes = {
        "meta": {"type", "meta"},
        "entry": {"type", "entry"},
        "leaf": {"type", "entry_id"},
        "append": {"type", "entry", "meta"},
    }
    seen: set[str] = set()
    for name in ("chat%2F1.jsonl", "s_001.jsonl"):
        for raw in (where / name).read_bytes().split(b"\n")[:-1]:
            record = json.loads(raw)
            # "tx"/"tx_n" group the lines of one commit; the reference ignores unknown fields.
            assert set(record) - {"tx", "tx_n"} == shapes[record["type"]]
            assert next(iter(record)) == "type"
            seen.add(record["type"])
            if "entry" in record:
                assert set(record["entry"]) <= {"kind", "id", "parent_id", "timestamp", "revision", "origin",
                                                "message", "custom_type", "data"}
    assert seen == set(shapes)
    # Beside the logs only the owner's lock and the .index folder, whose names the reference never reads.
    assert sorted(os.listdir(where)) == [".index", ".session-manager.lock", "chat%2F1.jsonl", "s_001.jsonl"]


def test_a_lost_entry_line_leaves_the_rest_of_the_transcript_readable(tmp_path: Path) -> None:
    # Prevents: one corrupt line in the middle of a log making the whole session unreadable
    # (the reference answers session/storage for a broken chain; we read what is reachable).
    where = tmp_path / "d"
    sm = session_manager.open(where, ids=SequentialIds(), clock=ManualClock(T0))
    sm.call("session::create", {})
    for text in ("one", "two", "three"):
        sm.call("session::append", {"session_id": "s_001", "message": user(text)})
    sm.close()
    path = where / "s_001.jsonl"
    lines = path.read_bytes().split(b"\n")
    assert b'"id":"e_002"' in lines[2]
    lines[2] = b'{"type":"append","entry":{garbage'
    path.write_bytes(b"\n".join(lines))
    sm = session_manager.open(where, ids=SequentialIds(), clock=ManualClock(T0))
    page = sm.call("session::messages", {"session_id": "s_001"})
    assert [m["entry_id"] for m in page["messages"]] == ["e_003"]
    assert sm.call("session::get-message", {"session_id": "s_001", "entry_id": "e_001"})["entry"]["id"] == "e_001"
    assert sm.call("session::get", {"session_id": "s_001"})["meta"]["message_count"] == 3
    # The session keeps taking writes, and they chain from the leaf as before.
    appended = sm.call("session::append", {"session_id": "s_001", "message": user("four")})
    assert appended["parent_id"] == "e_003"


def _stream(where: Path, updates: int) -> Any:
    sm = session_manager.open(where, ids=SequentialIds(), clock=ManualClock(T0))
    sm.call("session::create", {"metadata": {"owner": "u_1"}})
    sm.call("session::append", {"session_id": "s_001", "message": user("q")})
    sm.call("session::append", {"session_id": "s_001", "message": {
        "role": "assistant", "content": [], "stop_reason": "end", "model": "m", "provider": "p", "timestamp": 1}})
    for i in range(updates):
        sm.call("session::update-message", {"session_id": "s_001", "entry_id": "e_002",
                                            "content": [{"type": "text", "text": "x" * (i + 1)}]})
    return sm


def _view(sm: Any) -> Any:
    return (sm.call("session::get", {"session_id": "s_001"}),
            sm.call("session::messages", {"session_id": "s_001", "include_custom": True}),
            sm.call("session::get-message", {"session_id": "s_001", "entry_id": "e_002"}))


def test_a_long_log_is_compacted_by_its_next_write_and_reads_back_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prevents: a long log (written by the reference, or before online compaction) staying
    # long, a load (a read) rewriting files, and a compaction that changes what the session
    # reads back or stops it taking writes.
    where = tmp_path / "d"
    monkeypatch.setattr(_rewrite, "RATIO", 10**9)  # written as a writer without compaction would
    sm = _stream(where, 400)
    monkeypatch.undo()
    before = _view(sm)
    sm.close()
    path = where / "s_001.jsonl"
    raw = path.read_bytes()
    assert len(raw.splitlines()) > 800
    sm = session_manager.open(where, clock=ManualClock(T0))  # production ids: no reuse of e_001
    assert _view(sm) == before
    assert path.read_bytes() == raw  # loading is reading
    assert before[2]["entry"]["revision"] == 400
    appended = sm.call("session::append", {"session_id": "s_001", "message": user("next")})
    assert appended["parent_id"] == "e_002"
    kinds = [json.loads(line)["type"] for line in path.read_bytes().splitlines()]
    # The reference's shapes; the meta once more at the end, for a cold list reading the tail.
    assert kinds == ["meta", "entry", "entry", "entry", "commit", "commit", "commit", "leaf", "meta"]
    assert_clean(path, "s_001")
    sm.close()
    sm = session_manager.open(where, ids=SequentialIds(), clock=ManualClock(T0))
    assert sm.call("session::get", {"session_id": "s_001"})["meta"]["message_count"] == 3
    assert [m["entry_id"] for m in sm.call("session::messages", {"session_id": "s_001"})["messages"]] == [
        "e_001", "e_002", appended["entry_id"]]


def test_a_short_log_is_left_as_written(tmp_path: Path) -> None:
    # Prevents: rewriting every file on every start (compaction is for mostly-superseded logs).
    where = tmp_path / "d"
    _stream(where, 20).close()
    path = where / "s_001.jsonl"
    raw = path.read_bytes()
    session_manager.open(where).call("session::get", {"session_id": "s_001"})
    assert path.read_bytes() == raw


def test_a_failed_compaction_keeps_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a rename or disk failure during compaction losing the session or leaving a temp file.
    where = tmp_path / "d"
    monkeypatch.setattr(_rewrite, "RATIO", 10**9)
    sm = _stream(where, 400)
    monkeypatch.undo()
    before = _view(sm)
    sm.close()
    path = where / "s_001.jsonl"
    raw = path.read_bytes()

    def refuse(src: Any, dst: Any) -> None:
        raise OSError(errno.EIO, "simulated rename failure")

    monkeypatch.setattr(os, "replace", refuse)
    sm = session_manager.open(where, ids=SequentialIds(), clock=ManualClock(T0))
    assert _view(sm) == before
    attempts: list[int] = []
    real_rewrite = _rewrite.rewrite
    monkeypatch.setattr(_rewrite, "rewrite", lambda *a, **k: attempts.append(1) or real_rewrite(*a, **k))
    sm.call("session::set-status", {"session_id": "s_001", "status": "working"})  # its commit compacts
    sm.call("session::set-status", {"session_id": "s_001", "status": "idle"})
    sm.call("session::set-status", {"session_id": "s_001", "status": "working"})
    assert attempts == [1]  # a failed rewrite is not retried on every commit
    assert path.read_bytes().startswith(raw) and len(path.read_bytes()) > len(raw)
    assert sorted(p.name for p in where.iterdir()) == [".index", ".session-manager.lock", "s_001.jsonl"]
    sm.close()
    monkeypatch.undo()
    again = session_manager.open(where, ids=SequentialIds(), clock=ManualClock(T0))
    assert again.call("session::get", {"session_id": "s_001"})["meta"]["status"] == "working"
    assert _view(again)[1:] == before[1:]
    again.close()
