"""Group commit in fsync mode: appends to one session from several threads share an fsync,
and none is answered (nor its event delivered) before an fsync covering its bytes returned."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.errors import STORAGE, SessionError, StoreError
from session_manager.store import Commit, FsStore
from session_manager.store.fs._records import decode_record
from session_manager.testing.contract import message as entry
from session_manager.testing.contract import meta

WRITERS = 8


def assert_told_after_sync(log: Path, history: list[tuple[str, Any]]) -> None:
    """Each ``("answer" | "event", entry_id)`` in ``history`` comes after a ``("durable", size)``
    covering the end of that entry's line in ``log``."""
    ends: dict[str, int] = {}
    offset = 0
    for line in log.read_bytes().splitlines(keepends=True):
        offset += len(line)
        if b'"type":"append"' in line:
            ends[line.split(b'"id":"')[1].split(b'"')[0].decode()] = offset
    durable = 0
    for what, value in history:
        if what == "durable":
            durable = max(durable, value)
        elif what in ("answer", "event"):
            assert ends[value] <= durable, f"{what} for {value} before its bytes were synced"


def message(i: int) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": f"m{i}"}], "timestamp": i}


class Disk:
    """``os.fsync`` watched: the first sync of the log blocks until released (and fails if told to);
    ``history`` records, in order, each sync's covered size and each answer."""

    def __init__(self, log: Path, fail_first: bool = False) -> None:
        self.log, self.fail_first = log, fail_first
        self.real = os.fsync
        self.lock = threading.Lock()
        self.history: list[tuple[str, Any]] = []
        self.syncs = 0
        self.started = threading.Event()
        self.release = threading.Event()

    def fsync(self, fd: int) -> None:
        if not os.path.samestat(os.fstat(fd), os.stat(self.log)):
            self.real(fd)  # a directory or another file
            return
        covered = os.fstat(fd).st_size  # what was written before this sync started
        with self.lock:
            self.syncs += 1
            first = self.syncs == 1
        if first:
            self.started.set()
            assert self.release.wait(10)
            if self.fail_first:
                raise OSError(errno.EIO, "Input/output error")
        self.real(fd)
        with self.lock:
            self.history.append(("durable", covered))

    def note(self, what: str, value: Any) -> None:
        with self.lock:
            self.history.append((what, value))


@pytest.fixture
def store_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "d"


def appending(sm: session_manager.SessionManager, sid: str, disk: Disk) -> Callable[[int], None]:
    def append(i: int) -> None:
        try:
            out = sm.call("session::append", {"session_id": sid, "message": message(i)})
        except SessionError as e:
            disk.note("failed", e.code)
            return
        disk.note("answer", out["entry_id"])

    return append


def run_queued(append: Callable[[int], None], disk: Disk, log: Path, lines_before: int) -> None:
    """Writer 0 starts a sync that blocks; the others write meanwhile (queued on the session's lock,
    then waiting for a sync); the first sync is released only once all of them have written."""
    first = threading.Thread(target=append, args=(0,))
    first.start()
    assert disk.started.wait(10)
    rest = [threading.Thread(target=append, args=(i,)) for i in range(1, WRITERS)]
    for t in rest:
        t.start()
    # Until every writer's line is in the file (none durable yet); bounded, so a store that syncs
    # under the session's lock (the others cannot write) fails the assertions instead of hanging.
    waited = threading.Event()
    for _ in range(2000):
        if len(log.read_bytes().splitlines()) >= lines_before + WRITERS or waited.wait(0.005):
            break
    disk.release.set()
    for t in [first, *rest]:
        t.join(10)
        assert not t.is_alive()


def test_appends_waiting_on_one_session_share_fsyncs_and_answer_only_once_durable(
        store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: one fsync per append when appends queue on a session (group commit unwired), and an
    # answer or an event that reaches the caller before the fsync covering its entry returned.
    sm = session_manager.open(store_dir, durability="fsync")
    sid = sm.call("session::create", {"title": "g"})["session_id"]
    log = sm.service.store.file_path(sid)  # type: ignore[attr-defined]
    disk = Disk(log)
    sm.observe({"function_id": "session::on-message-added"}, lambda ev: disk.note("event", ev["entry_id"]))
    monkeypatch.setattr(os, "fsync", disk.fsync)
    run_queued(appending(sm, sid, disk), disk, log, len(log.read_bytes().splitlines()))
    monkeypatch.undo()

    answers = [v for what, v in disk.history if what == "answer"]
    assert len(answers) == WRITERS
    # One sync for the first writer, then the ones that wrote while it ran share (at most) two more.
    assert 2 <= disk.syncs <= 3
    assert_told_after_sync(log, disk.history)
    assert sum(1 for what, _ in disk.history if what == "event") == WRITERS
    # The appends chained one after another (no fork), all counted.
    messages = sm.call("session::messages", {"session_id": sid})["messages"]
    assert len(messages) == WRITERS and sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 8
    sm.close()
    again = session_manager.open(store_dir)
    assert again.call("session::messages", {"session_id": sid})["messages"] == messages
    again.close()


def test_a_failed_shared_fsync_fails_every_writer_it_was_to_cover_and_nothing_of_theirs_stays(
        store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: writers answered "stored" (or failed but replaying after a restart, or still shown by the
    # store or its list) when the fsync meant to make them durable failed while they were queued on it.
    sm = session_manager.open(store_dir, durability="fsync")
    sid = sm.call("session::create", {"title": "g"})["session_id"]
    kept = sm.call("session::append", {"session_id": sid, "message": message(100)})["entry_id"]
    sm.call("session::list", {})  # the catalog is built: it must drop the undone metas too
    log = sm.service.store.file_path(sid)  # type: ignore[attr-defined]
    before = log.read_bytes()
    disk = Disk(log, fail_first=True)
    monkeypatch.setattr(os, "fsync", disk.fsync)
    run_queued(appending(sm, sid, disk), disk, log, len(before.splitlines()))
    monkeypatch.undo()

    outcomes = [(what, v) for what, v in disk.history if what in ("answer", "failed")]
    assert outcomes == [("failed", STORAGE)] * WRITERS
    assert log.read_bytes() == before  # every unsynced write undone
    assert [m["entry_id"] for m in sm.call("session::messages", {"session_id": sid})["messages"]] == [kept]
    assert sm.call("session::get", {"session_id": sid})["meta"]["message_count"] == 1
    listed = {s["session_id"]: s for s in sm.call("session::list", {})["sessions"]}
    assert listed[sid]["message_count"] == 1
    # The store writes on: a new descriptor, durable again, chained on the surviving leaf.
    later = sm.call("session::append", {"session_id": sid, "message": message(200)})
    assert later["parent_id"] == kept
    reread = FsStore(store_dir, read_only=True)
    assert [e["id"] for e in reread.path(sid, reread.get_leaf(sid))] == [kept, later["entry_id"]]
    sm.close()
    again = session_manager.open(store_dir)
    assert [m["entry_id"] for m in again.call("session::messages", {"session_id": sid})["messages"]] == [
        kept, later["entry_id"]]
    again.close()


def test_a_compaction_waits_for_owed_fsyncs_and_never_outlives_a_failed_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a compaction snapshot (fsynced, renamed over the log) carrying an entry whose own fsync
    # then fails -- reported failed yet replayed after a restart.
    for fails in (False, True):
        store = FsStore(tmp_path / f"d{fails}", durability="fsync")
        store.commit("s_1", Commit(meta=meta("s_1")))
        with store.mutation(("s_1",)):  # what the service does: the fsync is owed to settle()
            store.commit("s_1", Commit(entries=(entry("e_1", None),), leaf="e_1", meta=meta("s_1", message_count=1)))
        if fails:
            def eio(fd: int) -> None:
                raise OSError(errno.EIO, "Input/output error")

            monkeypatch.setattr(os, "fsync", eio)
        assert store.compact("s_1") is not fails
        with pytest.raises(StoreError) if fails else contextlib.nullcontext():
            store.settle()
        monkeypatch.undo()
        expected = [] if fails else ["e_1"]
        assert [e["id"] for e in store.entries("s_1")] == expected
        store.close()
        again = FsStore(tmp_path / f"d{fails}")
        assert [e["id"] for e in again.entries("s_1")] == expected
        again.close()



def test_an_undone_write_that_owed_a_newline_leaves_the_tail_for_the_next_write_to_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: undoing a write that began with the newline a valid unterminated last record was owed,
    # then appending straight after that record (two records on one line: both lost to replay).
    store = FsStore(tmp_path / "d", durability="fsync")
    store.commit("s_1", Commit(meta=meta("s_1")))
    store.close()
    log = tmp_path / "d" / "s_1.jsonl"
    log.write_bytes(log.read_bytes().rstrip(b"\n"))  # a valid last record without its newline
    before = log.read_bytes()
    store = FsStore(tmp_path / "d", durability="fsync")

    def eio(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    with store.mutation(("s_1",)):
        store.commit("s_1", Commit(entries=(entry("e_1", None),), leaf="e_1", meta=meta("s_1", message_count=1)))
    monkeypatch.setattr(os, "fsync", eio)
    with pytest.raises(StoreError):
        store.settle()
    monkeypatch.undo()
    assert log.read_bytes() == before
    store.commit("s_1", Commit(entries=(entry("e_2", None),), leaf="e_2", meta=meta("s_1", message_count=1)))
    lines = log.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(decode_record(line, "s_1") is not None for line in lines[:-1])
    store.close()
    again = FsStore(tmp_path / "d")
    assert [e["id"] for e in again.entries("s_1")] == ["e_2"]
    again.close()


def test_a_write_owed_an_fsync_when_durability_turns_to_flush_is_still_synced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a hot reload from fsync to flush, landing between an append's write and its wait,
    # answering that append without the fsync it was promised (and leaving its descriptor pinned).
    store = FsStore(tmp_path / "d", durability="fsync")
    store.commit("s_1", Commit(meta=meta("s_1")))
    log = str(store.file_path("s_1"))
    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_size)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with store.mutation(("s_1",)):
        store.commit("s_1", Commit(entries=(entry("e_1", None),), leaf="e_1", meta=meta("s_1", message_count=1)))
    store.durability = "flush"  # the reload
    store.settle()
    size = os.path.getsize(log)
    assert synced == [size]  # one sync, covering the owed write
    assert store._fds._slots[log].pins == 0
    store.settle()  # nothing is owed twice
    assert synced == [size]
    store.close()
    again = FsStore(tmp_path / "d")
    assert [e["id"] for e in again.entries("s_1")] == ["e_1"]
    again.close()
