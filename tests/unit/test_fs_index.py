"""The fs store with its index sidecars: reference-written directories, crashes
between the log write and the index write, lazy bodies, the sessions index."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import session_manager
from session_manager.store import Commit, FsStore
from session_manager.store.fs import _fileops, _sidecar
from session_manager.store.fs._records import encode_commit
from session_manager.testing.contract import message, meta
from tests.unit.index_views import oracle, view


def reference_log(n: int) -> bytes:
    """What the reference writes: one append line per message, no tx, no sidecar."""
    out = [encode_commit(Commit(meta=meta("s_1")))]
    parent = None
    for i in range(n):
        eid = f"e_{i}"
        out.append(encode_commit(Commit(entries=(message(eid, parent, f"m{i}"),), leaf=eid,
                                        meta=meta("s_1", message_count=i + 1))))
        parent = eid
    return b"".join(out)


def test_a_reference_written_dir_opens_and_gains_an_index(tmp_path: Path) -> None:
    # Prevents: a data_dir from the reference (no .index) failing to open, or never getting faster.
    log = tmp_path / "s_1.jsonl"
    log.write_bytes(reference_log(30))
    store = FsStore(tmp_path)
    assert view(store, "s_1") == oracle(log, "s_1")
    idx = tmp_path / ".index" / "s_1.idx"
    assert _sidecar.decode_index(idx.read_bytes(), "s_1") is not None
    assert log.read_bytes() == reference_log(30)  # the log itself is never touched by indexing
    store.close()
    again = FsStore(tmp_path)
    loaded = _sidecar.load(str(log), str(idx), "s_1", _fileops.pread_file(str(log)))
    assert loaded.from_index and loaded.index_current
    assert view(again, "s_1") == oracle(log, "s_1")
    again.close()


def test_a_cold_get_message_is_one_log_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: reading one entry of an indexed session decoding (or reading) the whole log.
    (tmp_path / "s_1.jsonl").write_bytes(reference_log(200))
    FsStore(tmp_path).close()
    store = FsStore(tmp_path)
    store.get_meta("s_1")  # loads the session through its index
    reads: list[int] = []
    real = os.pread

    def counting(fd: int, n: int, offset: int) -> bytes:
        reads.append(n)
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", counting)
    assert store.get_entry("s_1", "e_17") == message("e_17", "e_16", "m17")
    assert len(reads) == 1 and reads[0] < 400
    assert store.get_entry("s_1", "e_17") == message("e_17", "e_16", "m17")
    assert len(reads) == 1  # decoded once, then served from memory
    monkeypatch.undo()
    store.close()


def test_an_index_write_that_fails_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a failed (or crashed) sidecar write losing, inventing or hiding an acknowledged entry.
    store = FsStore(tmp_path)
    store.commit("s_1", Commit(meta=meta("s_1")))

    def broken(path: str, data: bytes) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Path(path + ".tmp").write_bytes(data[: len(data) // 2])  # torn, never renamed
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_sidecar, "write_index", broken)
    parent = None
    for i in range(40):
        store.commit("s_1", Commit(entries=(message(f"e_{i}", parent),), leaf=f"e_{i}",
                                   meta=meta("s_1", message_count=i + 1)))
        parent = f"e_{i}"
    before = view(store, "s_1")
    store.close()
    monkeypatch.undo()
    log = tmp_path / "s_1.jsonl"
    reopened = FsStore(tmp_path)
    assert view(reopened, "s_1") == oracle(log, "s_1") == before
    assert len(reopened.entries("s_1")) == 40
    reopened.close()


CHILD = textwrap.dedent("""
    import sys
    import session_manager
    from session_manager.store.fs import _logfiles
    _logfiles.SAVE_MIN_BYTES = 64 * 1024  # sidecar rewrites every ~150 appends: the kill lands amid several
    sm = session_manager.open(sys.argv[1], durability=sys.argv[2])
    sid = sm.call("session::ensure", {"session_id": "s_1", "title": "t"})["session"]["session_id"]
    i = 0
    while True:
        r = sm.call("session::append", {"session_id": sid, "entry_id": f"e_{i}",
                                        "message": {"role": "user", "content": [{"type": "text", "text": "x" * 300}],
                                                    "timestamp": 1}})
        print(r["entry_id"], flush=True)
        i += 1
""")


@pytest.mark.slow  # the slow lane (`pytest -m slow`): a SIGKILL loop (3 writer processes per durability)
@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_a_crash_between_log_and_index_writes_never_loses_or_invents(tmp_path: Path, durability: str) -> None:
    # Prevents: a SIGKILL between the log write and the sidecar write (or inside either) losing an
    # acknowledged append, or making one up, on the next open through the index.
    where = tmp_path / "d"
    acked: list[str] = []
    for round_ in range(3):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(where), durability],
                                 stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
        assert child.stdout is not None
        deadline = time.monotonic() + 10
        seen: list[str] = []
        # Long enough for several amortized sidecar rewrites (SAVE_MIN_BYTES shrunk above).
        while len(seen) < 400 + 300 * round_ and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            seen.append(line.strip())
        child.send_signal(signal.SIGKILL)
        child.wait()
        acked.extend(seen)
        log = where / "s_1.jsonl"
        store = FsStore(where)
        stored = view(store, "s_1")
        assert stored == oracle(log, "s_1")
        ids = set(stored["entries"])
        assert set(acked) <= ids  # nothing acknowledged is lost
        attempted = {f"e_{i}" for i in range(len(seen) + 1)}  # ids restart at e_0 each round, idempotently
        assert ids <= attempted | set(acked)  # nothing is invented
        store.close()


def test_the_sessions_index_never_changes_what_list_says(tmp_path: Path) -> None:
    # Prevents: a stale or damaged sessions index showing an old meta or hiding a session.
    sm = session_manager.open(tmp_path)
    ids = [sm.call("session::create", {"title": f"t{i}"})["session_id"] for i in range(5)]
    sm.close()
    with session_manager.open(tmp_path) as sm:
        first = sm.call("session::list", {})["sessions"]
    sessions_file = tmp_path / ".index" / "sessions.list"
    assert sessions_file.exists()
    # Behind its back: a log rewritten by another writer (the reference appends a meta line).
    log = tmp_path / f"{ids[2]}.jsonl"
    renamed = {**next(m for m in first if m["session_id"] == ids[2]), "title": "renamed elsewhere"}
    with log.open("ab") as f:
        f.write(encode_commit(Commit(meta=renamed)))
    with session_manager.open(tmp_path) as sm:
        listed = sm.call("session::list", {})["sessions"]
    assert [m for m in listed if m["session_id"] == ids[2]] == [renamed]
    good = sessions_file.read_bytes()
    for damaged in (b"", good[:-5], good[:40] + b"X" + good[41:]):
        sessions_file.write_bytes(damaged)
        with session_manager.open(tmp_path) as sm:
            assert sm.call("session::list", {})["sessions"] == listed


def test_saving_the_index_of_a_session_without_a_log_is_quietly_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: "index not written (No such file)" warnings each time a session whose log does not
    # exist (a fork dropped from memory mid-commit, a failed first write) leaves the cache: noise
    # that buries the warnings that matter.
    store = FsStore(tmp_path)
    store.commit("s_1", Commit(entries=(message("e_1", None),), leaf="e_1", meta=meta("s_1", message_count=1)))
    store.close()
    store = FsStore(tmp_path)
    assert store.get_leaf("s_1") == "e_1"  # loaded lazily from its index
    state = store._sessions["s_1"]
    (tmp_path / "s_1.jsonl").unlink()  # the log gone from under it
    files = store._files.files("s_1")
    files.saved = -1
    with caplog.at_level(logging.WARNING, logger="session_manager.store.fs"):
        store._files.save("s_1", state)
    assert files.saved == -1 and "index not written" not in caplog.text
    store.close()
