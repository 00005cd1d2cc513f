"""One owner per data_dir, read-only inspection beside it, and reloads that
never put two stores on one directory. The cross-process tests run real
second processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import SessionError
from session_manager._worker.config_client import BuildError
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds
from session_manager.testing import FakeEngine as FakeIII
from tests.unit.test_configuration import START_MS, boot, fs

STORAGE = "session/storage"


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def _files(where: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under ``where``: inode, mtime and bytes (what "touches nothing" compares)."""
    out = {}
    for p in sorted(where.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[p.relative_to(where).as_posix()] = (st.st_ino, st.st_mtime_ns, p.read_bytes())
    return out


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


_HOLDER = """
    import sys, time, session_manager
    sm = session_manager.open(sys.argv[1])
    sm.call("session::ensure", {"session_id": "held"})
    print("ready", flush=True)
    time.sleep(60)
"""


# -- one writer --------------------------------------------------------------------------


def test_a_second_writable_open_in_this_process_fails_however_spelled(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: two stores of one process diverging on one directory (lost appends, resurrected deletes).
    where = tmp_path / "data"
    owner = session_manager.open(where, ids=SequentialIds(), clock=ManualClock(START_MS))
    owner.call("session::create", {})
    owner.call("session::append", {"session_id": "s_001", "message": _user("one")})
    (tmp_path / "link").symlink_to(where)
    monkeypatch.chdir(tmp_path)
    before = _files(where)
    for spelling in (str(where), f"{where}/", "./data", "data/../data", str(tmp_path / "link")):
        with pytest.raises(SessionError) as info:
            session_manager.open(spelling)
        assert info.value.code == STORAGE
        assert f"data_dir {spelling} is already open for writing by process {os.getpid()}" in str(info.value)
        # The refusal names both ways to run several processes, in one sentence.
        assert ("to run several processes, use sqlite:///path.db on one machine or postgresql://... across "
                "machines") in str(info.value)
    assert _files(where) == before  # the refused opens touched no file
    # The owner is unaffected, and once it closes the directory can be opened again.
    owner.call("session::append", {"session_id": "s_001", "message": _user("two")})
    owner.close()
    with session_manager.open(where) as again:
        assert again.call("session::get", {"session_id": "s_001"})["meta"]["message_count"] == 2


def test_another_process_cannot_open_it_and_sigkill_releases_the_lock(tmp_path: Path) -> None:
    # Prevents: a second process compacting or deleting under the owner; a crashed owner locking
    # the directory forever.
    where = tmp_path / "data"
    holder = _spawn(_HOLDER, str(where))
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        before = _files(where)
        with pytest.raises(SessionError) as info:
            session_manager.open(where)
        assert info.value.code == STORAGE and f"by process {holder.pid}" in str(info.value)
        assert _files(where) == before
        # Inspection works meanwhile.
        with session_manager.open(where, read_only=True) as ro:
            assert [m["session_id"] for m in ro.call("session::list", {})["sessions"]] == ["held"]
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    with session_manager.open(where) as sm:  # the kernel released the dead holder's lock
        assert sm.call("session::get", {"session_id": "held"}) is not None


_STREAMER = """
    import sys, session_manager
    where, acked = sys.argv[1], sys.argv[2]
    sm = session_manager.open(where)
    sm.call("session::ensure", {"session_id": "live"})
    reply = sm.call("session::append", {"session_id": "live", "message": {
        "role": "assistant", "content": [], "stop_reason": "end", "model": "m", "provider": "p",
        "timestamp": 1}})["entry_id"]
    for i in range(1, 401):
        sm.call("session::append", {"session_id": "live", "message": {
            "role": "user", "content": [{"type": "text", "text": str(i)}], "timestamp": 1}})
        sm.call("session::update-message", {"session_id": "live", "entry_id": reply,
                                            "content": [{"type": "text", "text": "x" * (i * 40)}]})
        with open(acked + ".tmp", "w") as f:
            f.write(str(i))
        import os
        os.replace(acked + ".tmp", acked)
    import time
    for _ in range(3000):  # stay the owner until the test has looked at the end state
        if os.path.exists(acked + ".stop"):
            break
        time.sleep(0.01)
    sm.close()
    print("done", flush=True)
"""


@pytest.mark.slow  # the slow lane (`pytest -m slow`): a soak (a streaming writer process, readers, a second writer)
def test_readers_and_a_second_writer_beside_a_streaming_writer_lose_nothing(tmp_path: Path) -> None:
    # Prevents: a reading process compacting on load and renaming its copy over the live log
    # (thousands of acknowledged appends gone), and a second writer interleaving with the first.
    where, acked = tmp_path / "data", tmp_path / "acked"
    writer = _spawn(_STREAMER, str(where), str(acked))
    try:
        checks = 0
        while writer.poll() is None:
            if not acked.exists():
                time.sleep(0.01)
                continue
            done = int(acked.read_text() or 0)
            with session_manager.open(where, read_only=True) as ro:
                page = ro.call("session::messages", {"session_id": "live", "limit": 500})["messages"]
                users = [m for m in page if m["message"]["role"] == "user"]
                assert len(users) >= done  # everything acknowledged before the open is there
                assert [m["message"]["content"][0]["text"] for m in users] == [
                    str(i) for i in range(1, len(users) + 1)]
            stop = tmp_path / "acked.stop"
            if not stop.exists() and (checks % 5 == 0 or done == 400):  # it owns the dir until told to stop
                with pytest.raises(SessionError, match="already open for writing"):
                    session_manager.open(where)
            checks += 1
            if done == 400:
                stop.touch()
        assert writer.stdout is not None and writer.stdout.read().strip() == "done", writer.stderr
    finally:
        if writer.poll() is None:
            writer.kill()
        writer.wait(10)
    assert checks > 3
    with session_manager.open(where) as sm:
        page = sm.call("session::messages", {"session_id": "live", "limit": 500})["messages"]
        assert [m["message"]["content"][0]["text"] for m in page[1:]] == [str(i) for i in range(1, 401)]
        assert sm.call("session::get", {"session_id": "live"})["meta"]["message_count"] == 401
        assert page[0]["message"]["content"][0]["text"] == "x" * 16000


# -- read-only ---------------------------------------------------------------------------


def test_read_only_never_writes_follows_the_writer_and_refuses_mutations(tmp_path: Path) -> None:
    # Prevents: an inspection tool repairing a torn tail, compacting, creating files, or serving
    # a stale copy of a log that has grown since it was read.
    where = tmp_path / "data"
    owner = session_manager.open(where, ids=SequentialIds(), clock=ManualClock(START_MS))
    owner.call("session::create", {"title": "t"})
    owner.call("session::append", {"session_id": "s_001", "message": _user("one")})
    owner.close()
    log = where / "s_001.jsonl"
    with log.open("ab") as f:
        f.write(b'{"type":"entry","entry":{"kind":"mes')  # a torn tail, as a crash leaves it
    ids = SequentialIds()
    ids.session_id(), ids.entry_id()  # the restarted owner continues after s_001 / e_001
    owner = session_manager.open(where, ids=ids, clock=ManualClock(START_MS))
    before = _files(where)
    ro = session_manager.open(where, read_only=True)
    assert ro.call("session::get", {"session_id": "s_001"})["meta"]["message_count"] == 1
    for fid, payload in [("session::create", {}), ("session::append", {"session_id": "s_001", "message": _user("x")}),
                         ("session::delete", {"session_id": "s_001"}),
                         ("session::set-status", {"session_id": "nope", "status": "done"})]:
        with pytest.raises(SessionError) as info:
            ro.call(fid, payload)
        assert info.value.code == STORAGE and "read-only" in str(info.value)
    assert _files(where) == before  # not a byte, inode or mtime changed; no file created
    # The writer repairs its own tail and goes on; the reader sees what it gained.
    owner.call("session::append", {"session_id": "s_001", "message": _user("two")})
    owner.call("session::create", {"title": "second"})
    texts = [m["message"]["content"][0]["text"]
             for m in ro.call("session::messages", {"session_id": "s_001"})["messages"]]
    assert texts == ["one", "two"]
    assert sorted(m["title"] for m in ro.call("session::list", {})["sessions"]) == ["second", "t"]
    owner.call("session::delete", {"session_id": "s_002"})
    assert ro.call("session::get", {"session_id": "s_002"}) is None
    assert [m["title"] for m in ro.call("session::list", {})["sessions"]] == ["t"]
    ro.close()
    owner.close()


def test_read_only_of_a_missing_directory_creates_nothing(tmp_path: Path) -> None:
    # Prevents: an inspection of a mistyped path creating an empty data_dir.
    with pytest.raises(SessionError) as info:
        session_manager.open(tmp_path / "missing", read_only=True)
    assert info.value.code == STORAGE and "does not exist" in str(info.value)
    assert list(tmp_path.iterdir()) == []


# -- reloads -----------------------------------------------------------------------------


def test_reloading_onto_the_same_directory_spelled_differently_is_a_no_op(tmp_path: Path) -> None:
    # Prevents: "X" -> "X/" (or ./X, or a symlink) building a second store on the directory and
    # replaying every entry to observers again.
    fake = FakeIII()
    host = boot(fake, seed=fs(tmp_path / "a"))
    try:
        for _ in range(3):
            fake.invoke("session::create", {})
        fake.invoke("session::append", {"session_id": "s_001", "message": _user("hi")})
        for fid in ("session::on-created", "session::on-message-added"):
            fake.add_observer(fid)
        host.emitter.flush()
        fake.triggers.clear()
        store = host.runtime.store
        (tmp_path / "alias").symlink_to(tmp_path / "a")
        for spelling in (f"{tmp_path / 'a'}/", f"{tmp_path}/./a", str(tmp_path / "alias")):
            fake.set_config(fs(spelling))
            assert host.runtime.store is store
            assert fake.invoke("session::config-status", {})["last_outcome"] == "applied"
        host.emitter.flush()
        assert fake.event_calls() == []
        assert fake.invoke("session::get", {"session_id": "s_001"})["meta"]["message_count"] == 1
    finally:
        host.close()


def test_reloading_onto_a_held_directory_keeps_the_running_store(tmp_path: Path) -> None:
    # Prevents: a reload onto another owner's directory half-swapping or taking the worker down.
    fake = FakeIII()
    host = boot(fake, seed=fs(tmp_path / "a"))
    other = session_manager.open(tmp_path / "b")
    try:
        fake.invoke("session::create", {"title": "kept"})
        before = host.runtime
        fake.set_config(fs(tmp_path / "b"))
        assert host.runtime is before
        status = fake.invoke("session::config-status", {})
        assert status["last_outcome"] == "rejected"
        assert f"already open for writing by process {os.getpid()}" in status["last_error"]
        assert fake.invoke("session::get", {"session_id": "s_001"})["meta"]["title"] == "kept"
    finally:
        other.close()
        host.close()


def test_a_swap_to_another_directory_releases_the_old_one(tmp_path: Path) -> None:
    # Prevents: the swapped-out fs store keeping its directory (and serving calls in flight) forever.
    fake = FakeIII()
    host = boot(fake, seed=fs(tmp_path / "a"))
    try:
        fake.invoke("session::create", {"title": "in a"})
        fake.set_config(fs(tmp_path / "b"))
        assert fake.invoke("session::get", {"session_id": "s_001"}) is None
        with session_manager.open(tmp_path / "a") as sm:  # a/ is free again
            assert sm.call("session::get", {"session_id": "s_001"})["meta"]["title"] == "in a"
        with pytest.raises(SessionError, match="already open for writing"):
            session_manager.open(tmp_path / "b")
    finally:
        host.close()
    with session_manager.open(tmp_path / "b"):  # and close() released b/
        pass


def test_booting_on_a_held_directory_fails_naming_the_holder(tmp_path: Path) -> None:
    # Prevents: a second worker starting on a live directory (the CLI exits 1 on BuildError).
    holder = session_manager.open(tmp_path / "a")
    try:
        fake = FakeIII()
        with pytest.raises(BuildError, match=f"already open for writing by process {os.getpid()}"):
            boot(fake, seed=fs(tmp_path / "a"))
        assert "session::create" not in fake.functions
    finally:
        holder.close()


_LOCKED_BEFORE_ITS_PID = """
    import fcntl, os, sys, time
    fd = os.open(os.path.join(sys.argv[1], ".session-manager.lock"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # an owner that has not written its pid yet
    print("ready", flush=True)
    time.sleep(60)
"""


def test_a_refused_open_names_the_process_holding_the_lock_not_the_file_text(tmp_path: Path) -> None:
    # Prevents: a writer that lost the race to open a data_dir naming the previous (dead) owner, or
    # "another process", because the winner had taken the flock but not yet written its pid.
    where = tmp_path / "data"
    session_manager.open(where).close()
    stale = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True).stdout.strip()
    (where / ".session-manager.lock").write_text(f"{stale}\n")  # the earlier owner's pid, now gone
    holder = _spawn(_LOCKED_BEFORE_ITS_PID, str(where))
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        before = _files(where)
        with pytest.raises(SessionError) as info:
            session_manager.open(where)
        assert info.value.code == STORAGE
        assert f"data_dir {where} is already open for writing by process {holder.pid};" in str(info.value)
        assert _files(where) == before  # the refused open touched no file
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    with session_manager.open(where) as sm:  # free again once the holder is gone
        assert sm.call("session::list", {})["sessions"] == []
