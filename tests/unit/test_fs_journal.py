"""The fs store's write-ahead journal (``durability="fsync"``, :mod:`session_manager.store.fs._journal`).

An fsync-mode append writes its lines to the session's log without syncing it and the same
bytes into the journal, which is synced. A power loss is simulated by copying data_dir while
the store is still open and cutting every log back to the size its last ``fsync`` left on
disk (what the page cache held beyond is lost): reopened, every acknowledged write is there,
exactly once, byte for byte as the live log has it.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.errors import StoreError
from session_manager.store import Commit, FsStore
from session_manager.store.fs import _background, _descriptors, _journal, _rewrite
from session_manager.testing.contract import message, meta


class _SyncedSizes:
    """``os`` for the store's modules, recording each file's size at its every ``fsync``
    (what a power loss cannot take away), keyed by inode."""

    def __init__(self) -> None:
        self.sizes: dict[int, int] = {}
        self.fsyncs = 0
        self.fdatasyncs = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)
        st = os.fstat(fd)
        self.sizes[st.st_ino] = st.st_size
        self.fsyncs += 1

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)
        self.fdatasyncs += 1


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Iterator[_SyncedSizes]:
    recorder = _SyncedSizes()
    for module in (_journal, _descriptors, _rewrite, _background):
        monkeypatch.setattr(module, "os", recorder)
    yield recorder


def power_loss(data: Path, synced: _SyncedSizes, into: Path) -> Path:
    """data_dir as a power loss now would leave it: each log cut back to its last synced size
    (a log never synced keeps only its name: the fsync mode syncs a new log's name first)."""
    shutil.copytree(data, into, ignore=shutil.ignore_patterns(".session-manager.lock"))
    for log in data.glob("*.jsonl"):
        keep = synced.sizes.get(log.stat().st_ino, 0)
        with open(into / log.name, "r+b") as f:
            f.truncate(keep)
    return into


def chain(store: FsStore, session_id: str, count: int, start: int = 1) -> None:
    """Commit ``count`` messages to ``session_id`` (created first when ``start`` is 1)."""
    if start == 1:
        store.commit(session_id, Commit(meta=meta(session_id)))
    for i in range(start, start + count):
        parent = f"{session_id}_e{i - 1}" if i > 1 else None
        store.commit(session_id, Commit(entries=(message(f"{session_id}_e{i}", parent),), leaf=f"{session_id}_e{i}",
                                        meta=meta(session_id, message_count=i)))


def ids(store: FsStore, session_id: str) -> list[str]:
    return sorted(e["id"] for e in store.entries(session_id))


def records_to_replay(path: Path) -> int:
    """Valid journal records newer than its checkpoint (what an open would replay)."""
    journal = _journal.Journal(str(path.parent), _journal.Ops())
    raw = path.read_bytes()
    _, checkpointed = _journal._read_slots(raw[:_journal.DATA_START])
    count, pos = 0, _journal.DATA_START
    while pos + _journal._RECORD.size <= len(raw):
        magic, seq, offset, length, name_len, crc = _journal._RECORD.unpack_from(raw, pos)
        head = pos + _journal._RECORD.size
        if magic == _journal._RECORD_MAGIC and crc == _journal._record_crc(
                seq, offset, raw[head:head + name_len], raw[head + name_len:head + name_len + length]):
            count += seq > checkpointed
            pos += _journal._aligned(_journal._RECORD.size + name_len + length)
        else:
            pos += _journal.BLOCK
    del journal
    return count


def test_power_loss_after_journaled_writes_loses_nothing_acknowledged(tmp_path: Path, synced: _SyncedSizes) -> None:
    # Prevents: an fsync-mode write acknowledged while its bytes sat unsynced in the log's page
    # cache and nowhere else on disk (the journal record missing, or not replayed at open).
    data = tmp_path / "data"
    store = FsStore(data, durability="fsync")
    chain(store, "s_1", 12)
    chain(store, "s_2", 5)
    live = {name: (data / name).read_bytes() for name in ("s_1.jsonl", "s_2.jsonl")}
    crashed = power_loss(data, synced, tmp_path / "crashed")
    assert (crashed / "s_1.jsonl").stat().st_size < len(live["s_1.jsonl"])  # the journal, not the log, held them
    store.close()
    reopened = FsStore(crashed, durability="fsync")
    try:
        assert ids(reopened, "s_1") == sorted(f"s_1_e{i}" for i in range(1, 13))
        assert ids(reopened, "s_2") == sorted(f"s_2_e{i}" for i in range(1, 6))
        assert reopened.get_meta("s_1")["message_count"] == 12  # type: ignore[index]
        for name, body in live.items():
            assert (crashed / name).read_bytes() == body  # exactly once, byte for byte
    finally:
        reopened.close()
    assert records_to_replay(crashed / _journal.NAME) == 0


def test_power_loss_with_garbage_past_the_synced_end_is_repaired(tmp_path: Path, synced: _SyncedSizes) -> None:
    # Prevents: replay trusting a log whose unsynced tail came back as zeros or half-written
    # (a record's bytes not at their offset must be written there, not skipped as "present").
    data = tmp_path / "data"
    store = FsStore(data, durability="fsync")
    chain(store, "s_1", 6)
    live = (data / "s_1.jsonl").read_bytes()
    crashed = power_loss(data, synced, tmp_path / "crashed")
    store.close()
    cut = (crashed / "s_1.jsonl").stat().st_size
    with open(crashed / "s_1.jsonl", "r+b") as f:
        f.seek(cut)
        f.write(live[cut:cut + 40] + bytes(100))  # part of the lost bytes, then zeros
    reopened = FsStore(crashed)
    try:
        assert ids(reopened, "s_1") == sorted(f"s_1_e{i}" for i in range(1, 7))
        assert (crashed / "s_1.jsonl").read_bytes()[:len(live)] == live
    finally:
        reopened.close()


def test_a_torn_journal_record_is_skipped_and_the_others_applied(tmp_path: Path, synced: _SyncedSizes) -> None:
    # Prevents: replay stopping at the first bad record (losing every later one), or applying
    # a record whose checksum fails.
    data = tmp_path / "data"
    store = FsStore(data, durability="fsync")
    chain(store, "s_1", 2)
    store._d.journal.checkpoint()  # type: ignore[union-attr]
    chain(store, "s_1", 3, start=3)  # records: e3, e4, e5
    chain(store, "s_2", 2)
    crashed = power_loss(data, synced, tmp_path / "crashed")
    store.close()
    journal = crashed / _journal.NAME
    raw = bytearray(journal.read_bytes())
    second = raw.index(_journal._RECORD_MAGIC, _journal.DATA_START + 1)  # e4's record
    raw[second + _journal._RECORD.size + 20] ^= 0xFF  # a byte of its body: checksum fails
    journal.write_bytes(bytes(raw))
    reopened = FsStore(crashed)
    try:
        got = ids(reopened, "s_1")
        assert "s_1_e3" in got and "s_1_e4" not in got
        assert {"s_1_e1", "s_1_e2"} <= set(got)
        assert "s_1_e5" in got  # after the bad record: applied all the same
        assert ids(reopened, "s_2") == ["s_2_e1", "s_2_e2"]
    finally:
        reopened.close()


def test_ring_wraps_with_checkpoints_over_many_sessions(tmp_path: Path, synced: _SyncedSizes,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the ring overwriting records whose logs were not synced yet (a wrap with no
    # checkpoint), or a checkpoint that syncs some logs and forgets others.
    monkeypatch.setattr(_journal, "SIZE", 32 * 1024)
    data = tmp_path / "data"
    store = FsStore(data, durability="fsync")
    sessions = [f"s_{n}" for n in range(25)]
    for sid in sessions:
        store.commit(sid, Commit(meta=meta(sid)))
    for i in range(1, 9):
        for sid in sessions:
            parent = f"{sid}_e{i - 1}" if i > 1 else None
            store.commit(sid, Commit(entries=(message(f"{sid}_e{i}", parent),), leaf=f"{sid}_e{i}",
                                     meta=meta(sid, message_count=i)))
    journal = store._d.journal
    assert journal is not None and journal.checkpoints >= 3  # wrapped, more than once
    crashed = power_loss(data, synced, tmp_path / "crashed")
    live = {sid: (data / f"{sid}.jsonl").read_bytes() for sid in sessions}
    store.close()
    reopened = FsStore(crashed)
    try:
        for sid in sessions:
            assert ids(reopened, sid) == sorted(f"{sid}_e{i}" for i in range(1, 9))
            assert (crashed / f"{sid}.jsonl").read_bytes() == live[sid]
    finally:
        reopened.close()


def test_compaction_and_delete_between_journaled_writes(tmp_path: Path, synced: _SyncedSizes) -> None:
    # Prevents: a journal record of a log written before a compaction (or a delete) being
    # replayed into the rewritten log (or bringing a deleted session back): a rewrite, rename
    # aside or truncation checkpoints first.
    data = tmp_path / "data"
    store = FsStore(data, durability="fsync")
    chain(store, "s_1", 6)
    chain(store, "gone", 3)
    for _ in range(3):  # superseded metas: something for the compaction to drop
        store.commit("s_1", Commit(meta=meta("s_1", message_count=6, title="retitled")))
    assert store.compact("s_1")
    chain(store, "s_1", 2, start=7)
    assert store.delete_session("gone")
    chain(store, "s_3", 2)
    live = (data / "s_1.jsonl").read_bytes()
    crashed = power_loss(data, synced, tmp_path / "crashed")
    store.close()
    reopened = FsStore(crashed)
    try:
        assert ids(reopened, "s_1") == sorted(f"s_1_e{i}" for i in range(1, 9))
        assert (crashed / "s_1.jsonl").read_bytes() == live
        assert reopened.get_meta("gone") is None and not (crashed / "gone.jsonl").exists()
        assert ids(reopened, "s_3") == ["s_3_e1", "s_3_e2"]
    finally:
        reopened.close()


def test_concurrent_writers_share_journal_syncs_and_lose_nothing(tmp_path: Path, synced: _SyncedSizes) -> None:
    # Prevents: a writer answered by another's journal sync that ran before its record was
    # written (a lost write under concurrency), or records of one log applied out of order.
    data = tmp_path / "data"
    store = FsStore(data, durability="fsync")
    threads, per = 6, 15
    for n in range(3):
        store.commit(f"t_{n}", Commit(meta=meta(f"t_{n}")))
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def write(t: int) -> None:
        try:
            barrier.wait()
            sid = f"t_{t % 3}"
            for i in range(per):
                store.commit(sid, Commit(entries=(message(f"w{t}_{i}", None),), leaf=f"w{t}_{i}"))
        except BaseException as e:
            errors.append(e)

    workers = [threading.Thread(target=write, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    crashed = power_loss(data, synced, tmp_path / "crashed")
    live = {n: (data / f"t_{n}.jsonl").read_bytes() for n in range(3)}
    store.close()
    reopened = FsStore(crashed)
    try:
        for n in range(3):
            want = sorted(f"w{t}_{i}" for t in range(threads) if t % 3 == n for i in range(per))
            assert ids(reopened, f"t_{n}") == want
            assert (crashed / f"t_{n}.jsonl").read_bytes() == live[n]
    finally:
        reopened.close()


_FOLLOWER = textwrap.dedent("""
    import sys
    from session_manager.store import FsStore
    store = FsStore(sys.argv[1], read_only=True)
    print(" ".join(sorted(e["id"] for e in store.entries("s_1"))), flush=True)
""")


def test_a_read_only_follower_in_another_process_sees_journaled_writes_at_once(tmp_path: Path) -> None:
    # Prevents: the journal holding an acknowledged write's bytes where only this process (or a
    # replay) finds them: the log itself has them, unsynced, before the write is answered.
    data = tmp_path / "data"
    store = FsStore(data, durability="fsync")
    try:
        chain(store, "s_1", 3)
        out = subprocess.run([sys.executable, "-c", _FOLLOWER, str(data)], capture_output=True, text=True,
                             cwd=str(Path(__file__).parents[2]), timeout=60, check=True)
        assert out.stdout.split() == ["s_1_e1", "s_1_e2", "s_1_e3"]
    finally:
        store.close()


_KILLED = textwrap.dedent("""
    import sys
    from session_manager.store import Commit, FsStore
    from session_manager.testing.contract import message, meta
    store = FsStore(sys.argv[1], durability="fsync")
    store.commit("s_1", Commit(meta=meta("s_1")))
    i = 0
    while True:
        i += 1
        store.commit("s_1", Commit(entries=(message(f"e{i}", None),), leaf=f"e{i}"))
        print(f"e{i}", flush=True)
""")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_sigkill_mid_stream_keeps_every_acknowledged_write_once(tmp_path: Path) -> None:
    # Prevents: a killed writer's journal replaying a record twice (an entry duplicated) or over
    # bytes already there, or an open that fails on what a kill left.
    data = tmp_path / "data"
    child = subprocess.Popen([sys.executable, "-c", _KILLED, str(data)], stdout=subprocess.PIPE, text=True,
                             cwd=str(Path(__file__).parents[2]))
    acked: list[str] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            acked.append(line.strip())
            if len(acked) == 40:
                break
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    assert records_to_replay(data / _journal.NAME) > 0  # a kill leaves records (no checkpoint ran)
    store = FsStore(data)
    try:
        got = [e["id"] for e in store.entries("s_1")]
        assert set(acked) <= set(got) and len(got) == len(set(got))
        lines = (data / "s_1.jsonl").read_bytes().split(b"\n")
        written = [line for line in lines if line]
        assert len(written) == len(set(written))  # no line replayed twice
    finally:
        store.close()


def test_a_clean_close_leaves_nothing_to_replay(tmp_path: Path) -> None:
    # Prevents: a cleanly closed data_dir whose logs lack what the journal holds (a reference
    # worker opening it next would miss those writes).
    data = tmp_path / "data"
    store = FsStore(data, durability="fsync")
    chain(store, "s_1", 5)
    assert records_to_replay(data / _journal.NAME) == 5 + 1
    store.close()
    assert records_to_replay(data / _journal.NAME) == 0
    journal = _journal.Journal(str(data), _journal.Ops())
    assert journal.replay() == 0


def test_the_logs_are_the_reference_format_byte_for_byte(tmp_path: Path) -> None:
    # Prevents: the journal changing a log's bytes (a header, padding, a reordering): a data_dir
    # written in fsync mode must be the same files flush mode writes.
    written = {}
    for durability in ("flush", "fsync"):
        data = tmp_path / durability
        store = FsStore(data, durability=durability)  # type: ignore[arg-type]
        chain(store, "s_1", 4)
        chain(store, "s%2F..%2Fx", 2)
        store.close()
        written[durability] = {p.name: p.read_bytes() for p in data.glob("*.jsonl")}
    assert written["flush"] == written["fsync"] and len(written["flush"]) == 2


@pytest.mark.parametrize("name", ["../evil.jsonl", "sub/../../evil.jsonl", "{abs}", "x.txt", ".session-manager.lock"])
def test_a_record_naming_a_file_outside_data_dir_is_skipped(tmp_path: Path, name: str) -> None:
    # Prevents: a crafted or corrupt journal making replay write outside data_dir, or into a
    # file that is not a session log.
    data = tmp_path / "data"
    store = FsStore(data, durability="fsync")
    chain(store, "s_1", 1)  # (the journal file is laid at the first journaled write)
    store.close()
    (data / "sub").mkdir()
    body = b'{"type":"meta"}\n'
    encoded = name.format(abs=tmp_path / "evil.jsonl").encode()
    header = _journal._RECORD.pack(_journal._RECORD_MAGIC, 99, 0, len(body), len(encoded),
                                   _journal._record_crc(99, 0, encoded, body))
    with open(data / _journal.NAME, "r+b") as f:
        f.seek(_journal.DATA_START)
        f.write(header + encoded + body)
    (tmp_path / "evil.jsonl").write_bytes(b"")
    (data / "x.txt").write_bytes(b"")
    store = FsStore(data)
    store.close()
    assert (tmp_path / "evil.jsonl").read_bytes() == b"" and (data / "x.txt").read_bytes() == b""
    assert body not in (data / ".session-manager.lock").read_bytes()


def test_checkpoint_slots_alternate_and_a_torn_one_falls_back(tmp_path: Path) -> None:
    # Prevents: a torn checkpoint write losing the last good one (records replayed twice or
    # not at all): two slots, the newer valid one wins.
    head = bytearray(_journal.DATA_START)
    head[0:_journal._SLOT.size] = _journal._slot_bytes(4, 40)
    head[_journal.BLOCK:_journal.BLOCK + _journal._SLOT.size] = _journal._slot_bytes(5, 50)
    assert _journal._read_slots(bytes(head)) == (5, 50)
    head[_journal.BLOCK + 10] ^= 0xFF
    assert _journal._read_slots(bytes(head)) == (4, 40)
    assert struct.calcsize("<4sQQI") == _journal._SLOT.size


class _FailingDatasync(_SyncedSizes):
    """:class:`_SyncedSizes` whose ``fdatasync`` (the journal's sync) fails while ``fail`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def fdatasync(self, fd: int) -> None:
        if self.fail:
            raise OSError(errno.EIO, "Input/output error")
        super().fdatasync(fd)


def test_a_failed_journal_sync_fails_its_writer_and_nothing_of_it_replays(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a write answered session/storage because the journal's sync failed coming back
    # at the next open (its record replayed over the truncated log), or the store refusing every
    # later write (they sync their logs themselves from then on, durable all the same).
    recorder = _FailingDatasync()
    monkeypatch.setattr(_journal, "os", recorder)
    monkeypatch.setattr(_descriptors, "os", recorder)
    data = tmp_path / "data"
    store = FsStore(data, durability="fsync")
    chain(store, "s_1", 2)
    recorder.fail = True
    with pytest.raises(StoreError):
        chain(store, "s_1", 1, start=3)
    recorder.fail = False
    assert ids(store, "s_1") == ["s_1_e1", "s_1_e2"]
    chain(store, "s_1", 1, start=3)  # the plain path: the log's own fsync
    assert ids(store, "s_1") == ["s_1_e1", "s_1_e2", "s_1_e3"]
    crashed = power_loss(data, recorder, tmp_path / "crashed")
    live = (data / "s_1.jsonl").read_bytes()
    store.close()
    reopened = FsStore(crashed)
    try:
        assert ids(reopened, "s_1") == ["s_1_e1", "s_1_e2", "s_1_e3"]
        assert (crashed / "s_1.jsonl").read_bytes() == live
    finally:
        reopened.close()
    again = FsStore(data)
    try:
        assert ids(again, "s_1") == ["s_1_e1", "s_1_e2", "s_1_e3"]
    finally:
        again.close()


def test_fsync_mode_syncs_the_journal_not_the_log(tmp_path: Path, synced: _SyncedSizes) -> None:
    # Prevents: the journal written and the log fsynced anyway (both costs), or neither synced
    # (durability="fsync" silently behaving like "flush").
    store = FsStore(tmp_path / "data", durability="fsync")
    chain(store, "s_1", 1)
    fsyncs, datasyncs = synced.fsyncs, synced.fdatasyncs
    chain(store, "s_1", 3, start=2)
    assert synced.fsyncs == fsyncs and synced.fdatasyncs == datasyncs + 3
    store.close()


def test_a_compaction_after_a_switch_to_flush_checkpoints_first(tmp_path: Path, synced: _SyncedSizes) -> None:
    # Prevents: records of fsync-mode writes (their logs unsynced) outliving a switch to flush and
    # then replayed, at the next open, into the log a flush-mode compaction wrote in its place.
    data = tmp_path / "data"
    store = FsStore(data, durability="fsync")
    chain(store, "s_1", 6)
    store.durability = "flush"
    for _ in range(3):
        store.commit("s_1", Commit(meta=meta("s_1", message_count=6, title="retitled")))
    assert store.compact("s_1")
    live = (data / "s_1.jsonl").read_bytes()
    crashed = power_loss(data, synced, tmp_path / "crashed")
    store.close()
    reopened = FsStore(crashed)
    try:
        assert ids(reopened, "s_1") == sorted(f"s_1_e{i}" for i in range(1, 7))
        assert (crashed / "s_1.jsonl").read_bytes() == live
    finally:
        reopened.close()


def test_threads_appending_through_the_service_share_journal_syncs(tmp_path: Path, synced: _SyncedSizes) -> None:
    # Prevents: the service's path (a mutation scope, the sync owed to settle) answering before
    # the journal's sync covering its record returned: under a power loss an answered append lost.
    data = tmp_path / "data"
    sm = session_manager.open(data, durability="fsync")
    sids = [sm.call("session::create", {})["session_id"] for _ in range(3)]
    answered: list[tuple[str, str]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def append(t: int) -> None:
        try:
            for i in range(10):
                sid = sids[(t + i) % 3]
                out = sm.call("session::append", {"session_id": sid, "message": {
                    "role": "user", "content": [{"type": "text", "text": f"t{t} m{i}"}], "timestamp": 1}})
                with lock:
                    answered.append((sid, out["entry_id"]))
        except BaseException as e:  # (reported below)
            errors.append(e)

    workers = [threading.Thread(target=append, args=(t,)) for t in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    crashed = power_loss(data, synced, tmp_path / "crashed")
    sm.close()
    reopened = FsStore(crashed)
    try:
        for sid in sids:
            stored = ids(reopened, sid)
            assert sorted(e for s, e in answered if s == sid) == stored
    finally:
        reopened.close()


def test_a_compaction_syncs_its_own_log_not_every_log_the_journal_holds(tmp_path: Path, synced: _SyncedSizes) -> None:
    # Prevents: every compaction (a streamed reply's come every few KB) paying an fsync of each
    # log written since the last checkpoint, all writers stalled behind it: a barrier record for
    # the one log replaced, its log synced, the others left to the journal.
    data = tmp_path / "data"
    store = FsStore(data, durability="fsync")
    for n in range(8):
        chain(store, f"o_{n}", 2)
    chain(store, "s_1", 3)
    for _ in range(3):
        store.commit("s_1", Commit(meta=meta("s_1", message_count=3, title="retitled")))
    others = {(data / f"o_{n}.jsonl").stat().st_ino for n in range(8)}
    synced.sizes.clear()
    assert store.compact("s_1")
    assert not others & set(synced.sizes)  # no other log synced
    live = {p.name: p.read_bytes() for p in data.glob("*.jsonl")}
    crashed = power_loss(data, synced, tmp_path / "crashed")
    store.close()
    reopened = FsStore(crashed)
    try:
        for name, body in live.items():
            assert (crashed / name).read_bytes() == body
        assert ids(reopened, "s_1") == ["s_1_e1", "s_1_e2", "s_1_e3"]
    finally:
        reopened.close()
