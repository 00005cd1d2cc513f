"""The sqlite adapter under real processes: appends from several processes
form one chain with an exact count, a writer killed at random instants loses
nothing it acknowledged, and a reader process sees every acknowledged write."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import session_manager

ROOT = Path(__file__).resolve().parents[2]


def spawn(*args: str, stdin: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.sqlite_procs", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stdin=subprocess.PIPE if stdin else None,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def chain_ids(uri: str, sid: str) -> tuple[list[str], int, int]:
    """The active path's entry ids, the stored entry count and message_count."""
    with session_manager.open(uri) as sm:
        store = sm.service.store
        path = [e["id"] for e in store.path(sid, store.get_leaf(sid))]
        meta = store.get_meta(sid)
        assert meta is not None
        return path, len(store.entries(sid)), meta["message_count"]


def test_four_processes_appending_to_one_session_form_one_chain(tmp_path: Path) -> None:
    # Prevents: two processes reading the same leaf and both appending onto it (a fork
    # nobody asked for), or a lost / doubled message_count under cross-process contention.
    uri = f"sqlite:///{tmp_path / 's.db'}"
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id
    procs = [spawn("append", uri, sid, f"p{n}", "250") for n in range(4)]
    acked: list[str] = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        acked += out.split()
    assert len(acked) == 1000
    path, stored, count = chain_ids(uri, sid)
    assert len(path) == 1000 and stored == 1000 and count == 1000
    assert sorted(path) == sorted(acked)  # every entry is on the one chain, each once
    for n in range(4):  # each process's appends keep their own order along the chain
        mine = [e for e in path if e.startswith(f"p{n}-")]
        assert mine == [f"p{n}-{i}" for i in range(250)]


def test_idempotent_entry_ids_hold_across_processes(tmp_path: Path) -> None:
    # Prevents: the same entry_id appended twice when two processes replay it at once.
    uri = f"sqlite:///{tmp_path / 'i.db'}"
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id
    procs = [spawn("append", uri, sid, "same", "100") for _ in range(3)]
    for p in procs:
        p.communicate(timeout=300)
        assert p.returncode == 0
    path, stored, count = chain_ids(uri, sid)
    assert path == [f"same-{i}" for i in range(100)] and stored == 100 and count == 100


@pytest.mark.slow  # the slow lane (`pytest -m slow`): a SIGKILL loop (5 writer processes)
@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_sigkill_at_random_instants_loses_nothing_acknowledged(tmp_path: Path, durability: str) -> None:
    # Prevents: an acknowledged append lost (or the file corrupted) when its process is killed
    # mid-write; a crash may lose only the append in flight. (fsync: each writer is killed over
    # a WAL file sized past its frames with zeros, core.size_wal, which the next open recovers.)
    uri = f"sqlite:///{tmp_path / 'k.db'}"
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id
    rng = random.Random(23)
    acked: list[str] = []
    for round_ in range(5):
        p = spawn("forever", uri, sid, f"r{round_}", durability)
        assert p.stdout is not None
        got: list[str] = [p.stdout.readline().strip()]  # the writer is up and appending
        reader = threading.Thread(target=lambda out=p.stdout, got=got: got.extend(line.strip() for line in out))
        reader.start()
        time.sleep(rng.random() * 0.5)  # then a random instant mid-stream
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        reader.join(timeout=30)
        assert got[0] == f"r{round_}-0"
        acked += got
    path, stored, count = chain_ids(uri, sid)
    assert set(acked) <= set(path)
    assert len(path) == stored == count  # one chain, the count exact (the one in flight wholly in or out)
    assert len(path) - len(acked) <= 5
    with session_manager.open(uri) as sm:
        store: Any = sm.service.store
        assert store.db.conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_reader_process_sees_every_acknowledged_write(tmp_path: Path) -> None:
    # Prevents: a committed append invisible to another process's next read (a stale snapshot).
    uri = f"sqlite:///{tmp_path / 'r.db'}"
    with session_manager.open(uri) as sm:
        sid = sm.create().session_id
    writer = spawn("append", uri, sid, "w", "200")
    reader = spawn("read", uri, sid, stdin=True)
    assert writer.stdout is not None and reader.stdin is not None and reader.stdout is not None
    answers: list[str] = []
    for line in writer.stdout:  # each id as soon as the writer has it acknowledged
        reader.stdin.write(line)
        reader.stdin.flush()
        answers.append(reader.stdout.readline().strip())
    writer.wait(timeout=60)
    reader.stdin.close()
    reader.wait(timeout=60)
    assert answers == [f"ok w-{i}" for i in range(200)]
