"""Adversarial tests of the sqlite fsync WAL sizing (core.size_wal: zeros written past the WAL's
end under the write lock): processes of both durabilities on one file, another process's
TRUNCATE checkpoints, a crash part way through the sizing after a hot switch from flush, with
another process's snapshot held over it; and the append's entries inserted under the session
key its own read brought, racing another process's delete and re-create. Every acknowledged
write must read back, the file must check sound. No timing asserts: waits are bounded only to end a hung test."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import session_manager
from tests.unit.test_sqlite_processes import ROOT, chain_ids, spawn


def _sound(uri: str) -> None:
    with session_manager.open(uri) as sm:
        store: Any = sm.service.store
        assert store.db.conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_four_processes_of_mixed_durability_form_one_chain_on_a_sound_file(tmp_path: Path) -> None:
    # Prevents: a fsync process sizing the WAL (zeros past its end) while a flush process of
    # the same file appends frames, or a flush process's commits lost or misread past zeros:
    # 2 flush + 2 fsync processes x 250 appends to one session must form one chain of 1,000.
    uri = f"sqlite:///{tmp_path / 'mixed.db'}"
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id
    kinds = ["flush", "fsync", "flush", "fsync"]
    procs = [spawn("append", uri, sid, f"p{n}", "250", kind) for n, kind in enumerate(kinds)]
    acked: list[str] = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0
        acked += out.split()
    assert len(acked) == 1000
    path, stored, count = chain_ids(uri, sid)
    assert len(path) == 1000 and stored == 1000 and count == 1000
    assert sorted(path) == sorted(acked)
    for n in range(4):
        assert [e for e in path if e.startswith(f"p{n}-")] == [f"p{n}-{i}" for i in range(250)]
    _sound(uri)


def test_truncate_checkpoints_by_another_process_amid_fsync_appends_lose_nothing_acknowledged(
        tmp_path: Path) -> None:
    # Prevents: a WAL truncated to nothing by another process's checkpoint (TRUNCATE) under a
    # fsync writer that sized it once: later frames written past a stale size, zeros read as
    # frames, or an acknowledged commit lost when the writer is then killed (no close).
    file = tmp_path / "t.db"
    uri = f"sqlite:///{file}"
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id
    p = spawn("forever", uri, sid, "w", "fsync")
    assert p.stdout is not None
    acked: list[str] = [p.stdout.readline().strip()]
    reader = threading.Thread(target=lambda: acked.extend(line.strip() for line in p.stdout or ()))
    reader.start()
    truncated = 0
    other = sqlite3.connect(file, timeout=30)
    try:
        while truncated < 30 or len(acked) < 60:
            busy, _, _ = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            truncated += int(busy == 0)
            assert p.poll() is None
    finally:
        other.close()
        p.kill()
        p.wait(timeout=30)
        reader.join(timeout=30)
    acked = [a for a in acked if a]
    path, stored, count = chain_ids(uri, sid)
    assert set(acked) <= set(path) and len(path) - len(acked) <= 1  # (the one in flight: in or out)
    assert len(path) == stored == count
    assert path[: len(acked)] == acked
    _sound(uri)


_CRASH_IN_SIZING = """
import os, signal, sys
import session_manager
uri, sid = sys.argv[1], sys.argv[2]
sm = session_manager.open(uri)  # flush
for i in range(20):
    sm.append(sid, message={"role": "user", "content": [{"type": "text", "text": str(i)}], "timestamp": 1},
              entry_id=f"e{i}")
    print(f"e{i}", flush=True)
sm.service.store.durability = "fsync"  # a hot reload: the next write sizes the WAL
real = os.pwrite
def half(fd, data, offset):  # the sizing's zeros half written, unsynced, then the process dies
    real(fd, data[: len(data) // 2], offset)
    print("sizing", flush=True)
    sys.stdin.readline()  # (the parent reads its snapshot meanwhile)
    os.kill(os.getpid(), signal.SIGKILL)
os.pwrite = half
sm.append(sid, message={"role": "user", "content": [{"type": "text", "text": "x"}], "timestamp": 1},
          entry_id="lost")
print("not killed", flush=True)
"""


def test_a_crash_part_way_through_sizing_after_a_switch_from_flush_keeps_every_acknowledged_write(
        tmp_path: Path) -> None:
    # Prevents: a WAL whose sizing was cut short by a crash (zeros half written, not synced,
    # right after a hot switch flush -> fsync) misrecovered: an acknowledged flush commit lost,
    # zeros taken as frames, or a snapshot another process held over the sizing changed.
    file = tmp_path / "c.db"
    uri = f"sqlite:///{file}"
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id
    held = sqlite3.connect(file, timeout=30)
    child = subprocess.Popen([sys.executable, "-c", _CRASH_IN_SIZING, uri, sid], cwd=ROOT, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdin is not None
    try:
        acked = [child.stdout.readline().strip() for _ in range(20)]
        assert acked == [f"e{i}" for i in range(20)]
        held.execute("BEGIN")
        before = held.execute("SELECT count(*) FROM entries").fetchone()
        assert child.stdout.readline().strip() == "sizing"
        assert held.execute("SELECT count(*) FROM entries").fetchone() == before
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.wait(timeout=60) == -9
        assert held.execute("SELECT count(*) FROM entries").fetchone() == before
        held.execute("COMMIT")
        assert before[0] == 20
    finally:
        held.close()
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    path, stored, count = chain_ids(uri, sid)
    assert path == acked and stored == 20 and count == 20
    _sound(uri)
    with session_manager.open(uri, durability="fsync") as sm:  # and it takes fsync writes again
        sm.append(sid, message={"role": "user", "content": [{"type": "text", "text": "y"}], "timestamp": 1},
                  entry_id="after")
    path, stored, count = chain_ids(uri, sid)
    assert path == [*acked, "after"] and stored == count == 21
    _sound(uri)


def test_a_wal_removed_under_a_running_fsync_store_is_never_made_again_by_the_sizing(tmp_path: Path) -> None:
    # Prevents: the sizing (core.size_wal) creating a WAL file where SQLite's was removed (a
    # file beside the database that its connections never read: zeros in it, or frames read
    # from it by a later open), or failing the writes: the connections keep writing their open
    # WAL, and a clean close checkpoints every acknowledged write into the database.
    file = tmp_path / "d.db"
    uri = f"sqlite:///{file}"
    wal = Path(str(file) + "-wal")
    with session_manager.open(uri, durability="fsync") as sm:
        sid = sm.create().session_id
        for i in range(5):
            sm.append(sid, message={"role": "user", "content": [{"type": "text", "text": str(i)}], "timestamp": 1},
                      entry_id=f"e{i}")
        assert wal.stat().st_size > 0
        wal.unlink()
        store: Any = sm.service.store
        store.db.wal_short = True  # as after a TRUNCATE checkpoint: sized again at the next write
        for i in range(5, 10):
            sm.append(sid, message={"role": "user", "content": [{"type": "text", "text": str(i)}], "timestamp": 1},
                      entry_id=f"e{i}")
        assert not wal.exists()
        assert [e["id"] for e in store.path(sid, store.get_leaf(sid))] == [f"e{i}" for i in range(10)]
    path, stored, count = chain_ids(uri, sid)
    assert path == [f"e{i}" for i in range(10)] and stored == count == 10
    _sound(uri)


_APPEND_THROUGH_DELETES = """
import sys
import session_manager
uri, sid = sys.argv[1], sys.argv[2]
with session_manager.open(uri, durability=sys.argv[3]) as sm:
    i = 0
    for _ in sys.stdin:  # one append per line; the session may be gone meanwhile
        try:
            sm.append(sid, message={"role": "user", "content": [{"type": "text", "text": str(i)}], "timestamp": 1},
                      entry_id=f"a{i}")
            print("ok", flush=True)
        except session_manager.SessionError as e:
            print("refused", e.code, flush=True)
        i += 1
"""


def test_appends_racing_another_process_deleting_and_recreating_the_session_leave_no_orphan_entries(
        tmp_path: Path) -> None:
    # Prevents: an append inserting its entries under a session key (sessions.sk) not read in
    # its own transaction: after another process deleted the session and made it again under the
    # same id (a new key), entries under a key no session has, or a count that disagrees.
    file = tmp_path / "o.db"
    uri = f"sqlite:///{file}"
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id
    children = [subprocess.Popen([sys.executable, "-c", _APPEND_THROUGH_DELETES, uri, sid, kind], cwd=ROOT,
                                 text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                for kind in ("flush", "fsync")]
    answers: list[str] = []
    try:
        with session_manager.open(uri) as sm:
            for _ in range(40):
                for child in children:
                    assert child.stdin is not None and child.stdout is not None
                    child.stdin.write("go\n")
                    child.stdin.flush()
                sm.call("session::delete", {"session_id": sid})
                sm.ensure(sid)
                for child in children:
                    assert child.stdout is not None
                    answers.append(child.stdout.readline().strip())
    finally:
        for child in children:
            assert child.stdin is not None
            child.stdin.close()
            child.wait(timeout=60)
    assert all(a == "ok" or a.startswith("refused") for a in answers), answers
    assert "ok" in answers
    conn = sqlite3.connect(file)
    try:
        orphans = conn.execute("SELECT count(*) FROM entries e"
                               " WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.sk = e.sk)").fetchone()[0]
    finally:
        conn.close()
    assert orphans == 0
    path, stored, count = chain_ids(uri, sid)
    assert len(path) == stored == count
    _sound(uri)
