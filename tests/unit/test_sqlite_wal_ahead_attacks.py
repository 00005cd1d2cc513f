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
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from session_manager.store import Commit
from session_manager.store.sqlite import SqliteSettings, SqliteStore
from tests.unit.test_sqlite_processes import ROOT
from tests.unit.test_sqlite_wal_ahead import _META, _append

_FRAME = 24 + 4096
_MIB = 1 << 20


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
        assert a.get_meta("s")["message_count"] == 39 and b.get_meta("t")["message_count"] == 39
    finally:
        a.close()
        b.close()


_ONE_WRITE = """
import sys
from session_manager.store import Commit
from session_manager.store.sqlite import SqliteSettings, SqliteStore
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
base = sys.argv[1]
for mode in ("off", "on"):
    mnt = os.path.join(base, mode)
    os.makedirs(mnt)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", mnt], check=True)
    core._WAL_STEP = (0, 0) if mode == "off" else (1 << 20, 4 << 20)  # off: SQLite's own growth alone
    store = SqliteStore(SqliteSettings(path=os.path.join(mnt, "f.db")))
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
def test_steps_never_take_the_room_a_small_disk_needs_for_the_database(tmp_path: Path) -> None:
    # Prevents: zeros laid ahead taking a nearly full disk's last free space, which the database
    # file needs when a checkpoint copies the WAL back: the checkpoints fail, the WAL cannot
    # restart, and appends that fit on the disk without the step are refused (3 MiB tmpfs: 484
    # appends of 3 KB against 633 with SQLite's own growth alone).
    out = subprocess.run(["unshare", "-rm", sys.executable, "-c", _UNTIL_FULL, str(tmp_path)], cwd=ROOT,
                         env=_env(), capture_output=True, text=True, check=True).stdout
    counts = dict((mode, int(n)) for mode, n in (line.split() for line in out.splitlines()))
    assert counts["off"] > 100 and counts["on"] >= counts["off"]
