"""Adversarial tests of the flush WAL laid ahead (core.size_wal / begin / _wal_passed: zeros past
the WAL's end under the write lock, a step at a time): several stores and processes on one file,
short-lived writers beside a long-lived one, a small disk, crashes in the middle of a step (over a
WAL restarted with an older salt's frames past its end, and over one an erasure truncated to
nothing), another process's TRUNCATE checkpoint racing a step, snapshots held over a restart,
durability switched back and forth, a file-size limit. Every acknowledged write must read back,
the file must check sound, the WAL stay bounded. No timing asserts."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.store import Commit
from session_manager.store.sqlite import SqliteSettings, SqliteStore, core
from tests.unit.test_sqlite_processes import ROOT, chain_ids, spawn
from tests.unit.test_sqlite_wal_ahead import _FRAME, _META, _append, _entry, _grown_under_a_snapshot, _small

_MIB = 1 << 20


def _count(store: SqliteStore, sid: str) -> Any:
    meta = store.get_meta(sid)
    assert meta is not None
    return meta["message_count"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_two_stores_writing_a_little_lay_one_step_not_each_others_steps(tmp_path: Path) -> None:
    # Prevents: a store taking the WAL's size moved by another store's step for SQLite's writes
    # and laying a step of its own past it, and the other the same back: two stores of one file
    # making 80 small commits (~250 frames, 1 MiB) laid the WAL to its bound (33 MB of zeros).
    path = tmp_path / "two.db"
    a = SqliteStore(SqliteSettings(path=str(path)))
    b = SqliteStore(SqliteSettings(path=str(path)))
    try:
        a.commit("s", Commit(meta=_META))
        b.commit("t", Commit(meta={**_META, "session_id": "t"}))
        for i in range(40):
            a.commit("s", Commit(meta={**_META, "message_count": i}))
            b.commit("t", Commit(meta={**_META, "session_id": "t", "message_count": i}))
        assert Path(f"{path}-wal").stat().st_size < 2 * _MIB
        assert _count(a, "s") == 39 and _count(b, "t") == 39
    finally:
        a.close()
        b.close()


_ONE_WRITE = """
import sys
import threading
from session_manager.store import Commit
from session_manager.store.sqlite import SqliteSettings, SqliteStore, core
store = SqliteStore(SqliteSettings(path=sys.argv[1]))
store.commit(sys.argv[2], Commit(meta={"session_id": sys.argv[2], "title": "", "description": "", "status": "idle",
                                      "created_at": 1, "updated_at": 1, "message_count": 0}))
store.close()
"""


def test_short_lived_writers_beside_a_long_lived_store_lay_one_step_between_them(tmp_path: Path) -> None:
    # Prevents: each process's first write laying a step past the WAL's end however little of
    # it SQLite's frames fill (one commit per process, a CLI call beside a running worker): the
    # WAL doubled by each (1, 2, 4, 8 MiB ...) up to its bound, with zeros nobody writes over.
    path = tmp_path / "cli.db"
    worker = SqliteStore(SqliteSettings(path=str(path)))  # holds the file open: the WAL stays
    try:
        worker.commit("s", Commit(meta=_META))
        for n in range(3):
            subprocess.run([sys.executable, "-c", _ONE_WRITE, str(path), f"cli{n}"], check=True, cwd=ROOT,
                           env=_env())
        assert Path(f"{path}-wal").stat().st_size < 2 * _MIB
        assert [worker.get_meta(f"cli{n}") is not None for n in range(3)] == [True] * 3
    finally:
        worker.close()


_UNTIL_FULL = """
import os, subprocess, sys
from session_manager.store import Commit
from session_manager.store.sqlite import SqliteSettings, SqliteStore, core
from tests.unit.test_sqlite_wal_ahead import _META, _append
base, durability, size = sys.argv[1:4]
for mode in ("off", "on"):
    mnt = os.path.join(base, mode)
    os.makedirs(mnt)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mnt], check=True)
    core._WAL_STEP = (0, 0) if mode == "off" else (1 << 20, 4 << 20)  # off: SQLite's own growth alone
    core._WAL_SIZED_PAGES = 0 if mode == "off" else 1100  # (and no fsync sizing)
    store = SqliteStore(SqliteSettings(path=os.path.join(mnt, "f.db"), durability=durability))
    store.commit("s", Commit(meta=_META))
    n = 0
    try:
        while True:
            _append(store, n)
            n += 1
            if n % 10 == 0:  # as the follower's passive checkpoint once a second would
                try:
                    store.db.conn().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except Exception:
                    pass  # (the file cannot grow: the WAL keeps the pages)
    except Exception as e:
        assert "full" in str(e), e
    print(mode, n, flush=True)
    store.close()
"""


def _namespaces() -> bool:
    """Whether this process may mount a tmpfs in a user and mount namespace of its own."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _namespaces(), reason="needs unshare -rm and a tmpfs mount (a small disk)")
@pytest.mark.parametrize(("durability", "size"), [("flush", "3m"), ("fsync", "8m")])
def test_steps_never_take_the_room_a_small_disk_needs_for_the_database(
        tmp_path: Path, durability: str, size: str) -> None:
    # Prevents: zeros laid ahead taking a nearly full disk's last free space, which the database
    # file needs when a checkpoint copies the WAL back: the checkpoints fail, the WAL cannot
    # restart, and appends that fit on the disk without the step are refused (3 MiB tmpfs: 484
    # appends of 3 KB against 633 with SQLite's own growth alone; fsync, its WAL sized once to
    # 1,100 frames, on 8 MiB: 1,033 against 1,902).
    out = subprocess.run(["unshare", "-rm", sys.executable, "-c", _UNTIL_FULL, str(tmp_path), durability, size],
                         cwd=ROOT,
                         env=_env(), capture_output=True, text=True, check=True).stdout
    counts = dict((mode, int(n)) for mode, n in (line.split() for line in out.splitlines()))
    assert counts["off"] > 100 and counts["on"] >= counts["off"]


_KILLED_IN_A_STEP = """
import os, signal, sys
from session_manager.store import Commit
from session_manager.store.sqlite import SqliteSettings, SqliteStore, core
from tests.unit.test_sqlite_wal_ahead import _META, _append
path = sys.argv[1]
core._WAL_PAGES = {"NORMAL": 400, "FULL": 1000}
core._WAL_STEP = (0, 0)  # (SQLite's own growth until the step killed: its frames end the file)
store = SqliteStore(SqliteSettings(path=path))
store.commit("s", Commit(meta=_META))

def salt() -> bytes:
    with open(path + "-wal", "rb") as f:
        return f.read(24)[16:24]

for i in range(60):
    _append(store, i)
    print(f"e{i}", flush=True)
first = salt()  # then the WAL restarted short of its frames: an older salt's frames lie past them
store.db.conn().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
for i in range(60, 70):
    _append(store, i)
    print(f"e{i}", flush=True)
assert salt() != first and (os.path.getsize(path + "-wal") - 32) % 4120 == 0
core._WAL_STEP = (64 << 10, 256 << 10)
store.db.wal_short = True  # a step due at the next write (as after a durability reload)
write = os.pwrite

def half(fd, data, offset):
    if bytes(data[:64]) == bytes(64) and len(data) > 4096:  # the step's zeros: half of them, then killed
        write(fd, data[:len(data) // 2], offset)
        print("killed in the step", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return write(fd, data, offset)

os.pwrite = half
_append(store, 1000)
print("not killed", flush=True)
"""


def test_a_kill_in_the_middle_of_a_step_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    # Prevents: a WAL whose step was cut short by SIGKILL (zeros half written past its end)
    # misrecovered: past frames of the current salt then an older salt's (a WAL restarted short
    # of its file): an acknowledged commit lost, zeros or stale frames taken as frames, or the
    # file unsound. (A step from offset 0, before SQLite's header, right after an erasure's
    # truncation, is never laid: test_a_store_erasing_every_few_writes_lays_no_step_after_each_truncation.)
    path = tmp_path / "k.db"
    child = subprocess.run([sys.executable, "-c", _KILLED_IN_A_STEP, str(path)], cwd=ROOT, env=_env(),
                           capture_output=True, text=True, timeout=60)
    lines = child.stdout.split()
    assert child.returncode == -9 and lines[-1] == "step", child.stderr
    acked = [line for line in lines if line.startswith("e")]
    assert acked == [f"e{i}" for i in range(70)]
    store = SqliteStore(SqliteSettings(path=str(path)))
    try:
        assert store.db.conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert [e["id"] for e in store.path("s", store.get_leaf("s"))] == acked  # (the one in flight: never begun)
        assert _count(store, "s") == len(acked)
        _append(store, len(acked))  # and it takes writes again, over the half-laid step
        assert len(store.entries("s")) == len(acked) + 1
    finally:
        store.close()


_TRUNCATE = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=0)
busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
print(busy, os.path.getsize(sys.argv[1] + "-wal"))
conn.close()
"""


def test_another_process_truncating_the_wal_in_the_middle_of_a_step_is_held_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a step laid while another process's TRUNCATE checkpoint cuts the WAL to nothing
    # (zeros then written at a stale offset, a hole before them, SQLite's next frames misplaced):
    # the step runs under the write lock, which a TRUNCATE checkpoint needs too, so it is busy
    # and the WAL keeps its size; the commits read back and a TRUNCATE afterwards goes through.
    monkeypatch.setattr(core, "_WAL_STEP", (64 << 10, 256 << 10))  # (a step due at the first write)
    path = tmp_path / "t.db"
    store = SqliteStore(SqliteSettings(path=str(path)))
    seen: list[tuple[int, int]] = []
    write = os.pwrite

    def racing(fd: int, data: Any, offset: int) -> int:
        if not seen:
            out = subprocess.run([sys.executable, "-c", _TRUNCATE, str(path)], capture_output=True, text=True,
                                 check=True).stdout.split()
            seen.append((int(out[0]), int(out[1])))
        return write(fd, data, offset)

    try:
        before = Path(f"{path}-wal").stat().st_size  # (the schema's frames: SQLite's own end)
        assert before and (before - 32) % _FRAME == 0
        monkeypatch.setattr(os, "pwrite", racing)
        store.commit("s", Commit(meta=_META))  # the first write: a step
        assert seen and seen[0][0] == 1 and seen[0][1] >= before  # busy: nothing truncated
        assert Path(f"{path}-wal").stat().st_size >= before + (64 << 10)
        for i in range(31):
            _append(store, i)
        monkeypatch.setattr(os, "pwrite", write)
        assert [e["id"] for e in store.entries("s")] == [f"e{i}" for i in range(31)]
        out = subprocess.run([sys.executable, "-c", _TRUNCATE, str(path)], capture_output=True, text=True,
                             check=True).stdout.split()
        assert out == ["0", "0"]  # (no lock held now: truncated)
        _append(store, 31)  # over a WAL cut to nothing under the store: a step from its new end
        assert store.db.conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert [e["id"] for e in store.entries("s")] == [f"e{i}" for i in range(32)]
    finally:
        store.close()


def test_flush_writers_a_killed_one_truncating_checkpoints_and_held_snapshots_lose_nothing(tmp_path: Path) -> None:
    # Prevents: processes laying steps of one WAL while another process cuts it to nothing
    # (TRUNCATE), checkpoints it back (PASSIVE) and holds snapshots over it, and a writer is
    # killed over zeros it laid: an acknowledged append lost or doubled, a snapshot changed
    # under its reader, the WAL grown past its bound, the file unsound.
    file = tmp_path / "m.db"
    uri = f"sqlite:///{file}"
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id
    writers = [spawn("append", uri, sid, f"p{n}", "120") for n in range(2)]
    doomed = spawn("forever", uri, sid, "k")
    assert doomed.stdout is not None
    killed: list[str] = [doomed.stdout.readline().strip()]
    other = sqlite3.connect(file, timeout=30)
    reader = sqlite3.connect(file, timeout=30)
    rounds = 0
    try:
        while rounds < 30 or any(w.poll() is None for w in writers):
            rounds += 1
            if rounds % 3 == 0:  # a snapshot held over the others' steps, commits and checkpoints
                reader.execute("BEGIN")
                before = reader.execute("SELECT count(*), max(rowid) FROM entries").fetchone()
                for _ in range(5):
                    other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    assert reader.execute("SELECT count(*), max(rowid) FROM entries").fetchone() == before
                reader.execute("COMMIT")
            else:
                other.execute(f"PRAGMA wal_checkpoint({'TRUNCATE' if rounds % 3 == 1 else 'PASSIVE'})").fetchall()
            if rounds == 20:
                doomed.kill()
            assert Path(f"{file}-wal").stat().st_size <= 32 + 8100 * _FRAME
    finally:
        other.close()
        reader.close()
        doomed.kill()
        doomed.wait(timeout=30)
    killed += [line.strip() for line in doomed.stdout if line.strip()]
    acked = list(killed)
    for w in writers:
        out, _ = w.communicate(timeout=120)
        assert w.returncode == 0
        acked += out.split()
    path, stored, count = chain_ids(uri, sid)
    assert set(acked) <= set(path) and len(path) - len(acked) <= 1  # (the one in flight: in or out)
    assert len(path) == stored == count
    for prefix in ("p0", "p1", "k"):
        mine = [e for e in path if e.startswith(f"{prefix}-")]
        assert mine[: len([a for a in acked if a.startswith(f"{prefix}-")])] == \
            [a for a in acked if a.startswith(f"{prefix}-")]
    with session_manager.open(uri) as sm:
        store: Any = sm.service.store
        assert store.db.conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_durability_switched_back_and_forth_beside_another_writer_keeps_the_wal_bounded_and_sound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a hot reload flush -> fsync -> flush sizing the WAL again at each switch on top
    # of the steps (the WAL laid past both bounds, or the fsync sizing left unsynced), or a
    # commit lost or misread over zeros laid under the other durability, beside another store.
    _small(monkeypatch)
    path = tmp_path / "d.db"
    wal = Path(f"{path}-wal")
    store = SqliteStore(SqliteSettings(path=str(path)))
    other = SqliteStore(SqliteSettings(path=str(path)))
    try:
        store.commit("s", Commit(meta=_META))
        other.commit("t", Commit(meta={**_META, "session_id": "t"}))
        for i in range(240):
            if i % 20 == 0:
                store.db.durability = "fsync" if (i // 20) % 2 else "flush"
            _append(store, i)
            other.commit("t", Commit(meta={**_META, "session_id": "t", "message_count": i}))
            assert wal.stat().st_size <= 32 + 1100 * _FRAME  # (the larger bound: the fsync sizing)
        assert [e["id"] for e in store.entries("s")] == [f"e{i}" for i in range(240)]
        assert _count(other, "t") == 239
        assert store.db.conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        store.close()
        other.close()


def test_a_read_only_snapshot_taken_over_a_checkpointed_wal_holds_over_its_restart_and_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a reader whose snapshot needs no WAL frame (all copied back: SQLite lets the WAL
    # restart under it) served pages of the restarted WAL or the zeros laid past it: a stale
    # snapshot changed, or later reads missing commits.
    _small(monkeypatch)
    path = tmp_path / "ro.db"
    store = SqliteStore(SqliteSettings(path=str(path)))
    try:
        store.commit("s", Commit(meta=_META))
        for i in range(50):
            _append(store, i)
        store.db.conn().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        ro = SqliteStore(SqliteSettings(path=str(path), read_only=True))
        try:
            reader = ro.db.conn()
            reader.execute("BEGIN")
            assert len(ro.entries("s")) == 50
            for i in range(50, 400):  # the WAL restarts (past 400 pages) and is laid further
                _append(store, i)
            assert len(ro.entries("s")) == 50 and _count(ro, "s") == 50
            reader.execute("COMMIT")
            assert [e["id"] for e in ro.entries("s")] == [f"e{i}" for i in range(400)]
        finally:
            ro.close()
        assert store.db.conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        store.close()


_FILE_LIMIT = """
import resource, sys
from session_manager.errors import StoreError
from session_manager.store.sqlite import SqliteSettings, SqliteStore, core
from tests.unit.test_sqlite_wal_ahead import _append
core._WAL_STEP = (64 << 10, 256 << 10) if sys.argv[2] == "on" else (0, 0)  # off: SQLite's own growth
store = SqliteStore(SqliteSettings(path=sys.argv[1]))
resource.setrlimit(resource.RLIMIT_FSIZE, (700 << 10, 700 << 10))  # a step runs into it part way
i = 0
try:
    while i < 1000:
        _append(store, i)
        print(f"e{i}", flush=True)
        i += 1
except StoreError as e:
    print("refused", flush=True)
"""


def test_a_file_size_limit_met_in_the_middle_of_a_step_fails_no_call_the_wal_could_hold(tmp_path: Path) -> None:
    # Prevents: a step cut short by RLIMIT_FSIZE (a short write, then EFBIG; SIGXFSZ ignored)
    # raised out of begin (a call failing that SQLite could still take over the zeros laid), or
    # the acknowledged appends lost: the appends are refused (session/storage) only where they
    # are without the steps, once SQLite's own frames meet the limit.
    acked: dict[str, list[str]] = {}
    for mode in ("off", "on"):
        path = tmp_path / mode / "l.db"
        store = SqliteStore(SqliteSettings(path=str(path)))
        store.commit("s", Commit(meta=_META))
        store.close()
        out = subprocess.run([sys.executable, "-c", _FILE_LIMIT, str(path), mode], cwd=ROOT, env=_env(),
                             capture_output=True, text=True, timeout=60)
        lines = out.stdout.split()
        assert out.returncode == 0 and lines[-1] == "refused", out.stderr
        acked[mode] = lines[:-1]
        store = SqliteStore(SqliteSettings(path=str(path)))
        try:
            assert [e["id"] for e in store.path("s", store.get_leaf("s"))] == acked[mode]
            assert store.db.conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            store.close()
    assert len(acked["off"]) > 10 and acked["on"] == acked["off"]


def test_a_store_erasing_every_few_writes_lays_no_step_after_each_truncation(tmp_path: Path) -> None:
    # Prevents: a step laid at the first write after each erasure's TRUNCATE checkpoint (the WAL
    # cut to nothing, the step due again): a store deleting a session every few writes wrote
    # 1 MiB of zeros per cycle for a few frames (create, 3 appends, delete: 1,423 -> 1,618 us CPU).
    path = tmp_path / "e.db"
    wal = Path(f"{path}-wal")
    store = SqliteStore(SqliteSettings(path=str(path)))
    try:
        for k in range(10):
            sid = f"s{k}"
            store.commit(sid, Commit(meta={**_META, "session_id": sid}))
            for i in range(3):
                store.commit(sid, Commit(entries=(_entry(i),), leaf=f"e{i}",
                                         meta={**_META, "session_id": sid, "message_count": i + 1}))
            size = wal.stat().st_size
            assert k == 0 or (size - 32) % _FRAME == 0  # SQLite's own frames end the WAL: no zeros laid
            assert store.delete_session(sid)
            assert wal.stat().st_size == 0
    finally:
        store.close()


def test_a_wal_cut_back_by_journal_size_limit_is_not_laid_again_each_cycle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a fight with SQLite's own cut: a WAL grown past journal_size_limit under a held
    # snapshot is cut back to the limit at the first commit after it restarts, and a step laid
    # past the limit again would be cut again at every restart (zeros written and freed each
    # cycle). The cut leaves the WAL at the limit (not a whole number of frames): no step; its
    # size then stays put over further cycles.
    most = _small(monkeypatch)
    limit = 3 << 20
    monkeypatch.setattr(core, "WAL_LIMIT_BYTES", limit)
    path = tmp_path / "j.db"
    wal = Path(f"{path}-wal")
    store = SqliteStore(SqliteSettings(path=str(path)))
    other = SqliteStore(SqliteSettings(path=str(path)))
    try:
        reader, i = _grown_under_a_snapshot(store, other, wal, limit + 20 * _FRAME)
        reader.execute("COMMIT")
        assert most < limit
        sizes = []
        for _ in range(4):  # four cycles: checkpointed, restarted (and cut at its first commit), refilled
            store.db.conn().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            for _ in range(60):
                _append(store, i)
                i += 1
                sizes.append(wal.stat().st_size)
        assert set(sizes) == {limit}
        assert [e["id"] for e in other.entries("s")] == [f"e{n}" for n in range(i)]
    finally:
        store.close()
        other.close()


def test_threads_of_one_store_writing_through_steps_and_restarts_lose_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a step laid by one thread's write transaction while another thread of the same
    # store (its own connection) writes frames, or the store's step state (mark, counter) raced
    # into laying over frames: four threads append through several steps and WAL restarts.
    most = _small(monkeypatch)
    path = tmp_path / "th.db"
    store = SqliteStore(SqliteSettings(path=str(path)))
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            sid = f"t{n}"
            store.commit(sid, Commit(meta={**_META, "session_id": sid}))
            for i in range(60):
                store.commit(sid, Commit(entries=(_entry(i),), leaf=f"e{i}",
                                         meta={**_META, "session_id": sid, "message_count": i + 1}))
        except BaseException as e:  # (reported below)
            errors.append(e)

    try:
        threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors
        for n in range(4):
            assert [e["id"] for e in store.entries(f"t{n}")] == [f"e{i}" for i in range(60)]
            assert _count(store, f"t{n}") == 60
        size = Path(f"{path}-wal").stat().st_size  # (past the bound: SQLite's own frames, its
        assert size <= most or (size - 32) % _FRAME == 0  # checkpoints starved by the threads' reads)
        assert store.db.conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        store.close()
