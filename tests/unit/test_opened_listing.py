"""The open's listing of data_dir, reused by the first list only while the
directory's stamp proves no entry was created, removed or renamed since."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import session_manager
from session_manager.store import Commit, FsStore
from session_manager.store.fs import _open_listing, _sessions_index
from session_manager.store.fs._fileops import Ops, StrPath
from session_manager.store.fs._records import encode_commit
from session_manager.testing.contract import meta


class CountingOps(Ops):
    """The real calls, counting the listings of data_dir itself."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = os.fspath(data_dir)
        self.listings = 0

    def listdir(self, path: StrPath) -> list[str]:
        self.listings += os.fspath(path) == self.data_dir
        return super().listdir(path)

    def scandir_logs(self, path: StrPath, suffix: str,
                     listed: list[str] | None = None) -> tuple[list[str], list[os.stat_result | OSError]]:
        self.listings += listed is None
        return super().scandir_logs(path, suffix, listed)


def _build(where: Path, count: int = 5) -> list[str]:
    with session_manager.open(where) as sm:
        ids = [sm.call("session::create", {"title": f"t{i}"})["session_id"] for i in range(count)]
        sm.call("session::list", {})  # the sessions index matches every log
    return ids


def _old_enough(monkeypatch: pytest.MonkeyPatch, where: Path) -> None:
    """As if the open came long after data_dir last changed (instead of sleeping
    past RACY_NS); the mtime is put back an hour, so any later change moves it."""
    hour = 3600 * 10**9
    old = time.time_ns() - hour
    os.utime(where, ns=(old, old))
    monkeypatch.setattr(_open_listing, "_now", lambda: time.time_ns() + 2 * _open_listing.RACY_NS)


def _listed(store: FsStore) -> list[str]:
    sm = session_manager.open(store=store)
    try:
        return sorted(m["session_id"] for m in sm.call("session::list", {"limit": 1000})["sessions"])
    finally:
        sm.close()


def _truth(where: Path) -> list[str]:
    """Every session, with no sessions index at all (each log read)."""
    (where / ".index" / "sessions.list").unlink(missing_ok=True)
    with session_manager.open(where, read_only=True) as ro:
        return sorted(m["session_id"] for m in ro.call("session::list", {"limit": 1000})["sessions"])


def _foreign_log(where: Path, session_id: str) -> None:
    """A log written as the Rust reference writes one (no lock, no index)."""
    new = meta(session_id, title="from the reference", created_at=10, updated_at=10**15)
    (where / f"{session_id}.jsonl").write_bytes(encode_commit(Commit(meta=new)))


def test_an_open_and_its_first_list_list_data_dir_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a cold open + list paying for two listings of a directory of 10k logs.
    ids = _build(tmp_path)
    _old_enough(monkeypatch, tmp_path)
    ops = CountingOps(tmp_path)
    store = FsStore(tmp_path, ops=ops)
    assert _listed(store) == sorted(ids) == _truth(tmp_path)
    assert ops.listings == 1


@pytest.mark.parametrize("change", ["create", "delete", "rename"])
def test_a_log_another_writer_changes_after_the_open_is_listed_as_the_directory_holds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    # Prevents: the first list trusting the open's names after a writer that takes no lock (the
    # reference) created, deleted or renamed a log between the open and that list.
    ids = _build(tmp_path)
    _old_enough(monkeypatch, tmp_path)
    ops = CountingOps(tmp_path)
    store = FsStore(tmp_path, ops=ops)
    if change == "create":
        _foreign_log(tmp_path, "s_foreign")
    elif change == "delete":
        (tmp_path / f"{ids[0]}.jsonl").unlink()
    else:
        (tmp_path / f"{ids[0]}.jsonl").rename(tmp_path / f"{ids[0]}.jsonl.old")
    listed = _listed(store)
    expected = sorted([*ids, "s_foreign"] if change == "create" else ids[1:])
    assert listed == expected == _truth(tmp_path)
    assert ops.listings == 2  # the first list listed again


def test_a_session_this_store_creates_before_its_first_list_is_listed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the open's names hiding a session the store itself created before any list
    # (no list was running, so only the listing can show its log).
    ids = _build(tmp_path)
    _old_enough(monkeypatch, tmp_path)
    store = FsStore(tmp_path)
    sm = session_manager.open(store=store)
    new = sm.call("session::create", {"title": "new"})["session_id"]
    got = sorted(m["session_id"] for m in sm.call("session::list", {"limit": 1000})["sessions"])
    sm.close()
    assert got == sorted([*ids, new]) == _truth(tmp_path)


def test_a_directory_changed_just_before_the_open_is_listed_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a stamp younger than the timestamp granularity being trusted (a create in the same
    # clock tick as the listing could leave the directory's mtime unchanged).
    ids = _build(tmp_path)
    _foreign_log(tmp_path, "s_foreign")  # data_dir changed a moment ago: its stamp is racy
    changed = tmp_path.stat().st_mtime_ns
    monkeypatch.setattr(_open_listing, "_now", lambda: changed + 1)  # (however slow the box)
    ops = CountingOps(tmp_path)
    store = FsStore(tmp_path, ops=ops)
    assert store._opened is not None and store._opened.stamp is None
    assert _listed(store) == sorted([*ids, "s_foreign"]) == _truth(tmp_path)
    assert ops.listings == 2


def test_an_open_that_recovers_leftovers_lists_again_at_the_first_list(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the open's names reused after the open itself changed data_dir (removing a rewrite
    # temp or finishing a delete moves the stamp the names were taken under).
    ids = _build(tmp_path)
    (tmp_path / f"{ids[0]}.jsonl.compact").write_bytes(b"cut short")
    (tmp_path / f"{ids[1]}.jsonl").rename(tmp_path / f"{ids[1]}.jsonl~deleted")  # a delete past its commit
    _old_enough(monkeypatch, tmp_path)
    ops = CountingOps(tmp_path)
    store = FsStore(tmp_path, ops=ops)
    assert store._opened is None
    assert _listed(store) == sorted(set(ids) - {ids[1]}) == _truth(tmp_path)
    assert not (tmp_path / f"{ids[0]}.jsonl.compact").exists()
    assert not (tmp_path / f"{ids[1]}.jsonl~deleted").exists()
    assert ops.listings == 2


def test_only_the_first_list_uses_the_opened_listing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the open's names kept (memory) or consulted after the catalog exists.
    _build(tmp_path)
    _old_enough(monkeypatch, tmp_path)
    store = FsStore(tmp_path)
    assert store._opened is not None and store._opened.stamp is not None
    sm: Any = session_manager.open(store=store)
    sm.call("session::list", {"limit": 1})
    assert store._opened is None
    sm.close()


def _stamped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A data_dir whose sessions index records the stamp its names were listed under
    (a cold open + list long after the last change records it)."""
    ids = _build(tmp_path)
    _old_enough(monkeypatch, tmp_path)
    with session_manager.open(tmp_path) as sm:
        sm.call("session::list", {})
    stamp = _open_listing.stamp_of(Ops(), os.fspath(tmp_path))
    assert stamp is not None and _sessions_index.read_stamp(tmp_path / ".index" / "sessions.list") == stamp
    return ids


def test_an_open_whose_index_vouches_for_data_dir_lists_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a cold open + list listing a directory of 10k logs that has not changed since its
    # sessions index was written (the index's names are its entries).
    ids = _stamped(tmp_path, monkeypatch)
    ops = CountingOps(tmp_path)
    store = FsStore(tmp_path, ops=ops)
    assert _listed(store) == sorted(ids) == _truth(tmp_path)
    assert ops.listings == 0


@pytest.mark.parametrize("change", ["append", "replace"])
def test_a_log_the_reference_rewrote_behind_a_stamped_index_is_listed_as_the_log_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    # Prevents: the stamp (which vouches for data_dir's names only) standing in for each log's own
    # check: an append or a rename over a log changes no name the index records.
    ids = _stamped(tmp_path, monkeypatch)
    log = tmp_path / f"{ids[2]}.jsonl"
    renamed = meta(ids[2], title="renamed by the reference", updated_at=10**15)
    if change == "append":
        with log.open("ab") as f:
            f.write(encode_commit(Commit(meta=renamed)))
    else:
        tmp = tmp_path / "elsewhere" / "log"
        tmp.parent.mkdir()
        tmp.write_bytes(encode_commit(Commit(meta=renamed)))
        os.replace(tmp, log)  # a rename into data_dir: its stamp moves too
    with session_manager.open(tmp_path) as sm:
        first = sm.call("session::list", {"limit": 1})["sessions"][0]
    assert first["session_id"] == ids[2] and first["title"] == "renamed by the reference"
    with session_manager.open(tmp_path, read_only=True) as ro:
        assert ro.call("session::list", {"limit": 1})["sessions"][0] == first


@pytest.mark.parametrize("change", ["create", "delete", "temp"])
def test_an_entry_changed_behind_a_stamped_index_makes_the_open_list_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    # Prevents: an open trusting the index's names (and skipping the leftovers' cleanup) after a log
    # was created or deleted, or a rewrite temp was left, while no store owned data_dir.
    ids = _stamped(tmp_path, monkeypatch)
    temp = tmp_path / f"{ids[0]}.jsonl.compact"
    expected = sorted(ids)
    if change == "create":
        _foreign_log(tmp_path, "s_foreign")
        expected = sorted([*ids, "s_foreign"])
    elif change == "delete":
        (tmp_path / f"{ids[1]}.jsonl").unlink()
        expected = sorted(set(ids) - {ids[1]})
    else:
        temp.write_bytes(b"cut short by a kill")
    ops = CountingOps(tmp_path)
    store = FsStore(tmp_path, ops=ops)
    assert ops.listings == 1 and not temp.exists()
    assert _listed(store) == expected == _truth(tmp_path)


def test_a_delete_cut_short_in_attachments_is_finished_under_a_stamped_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the stamp of data_dir standing in for attachments/, whose folder asides (a delete
    # killed before its commit point) change no entry of data_dir.
    (tmp_path / "attachments").mkdir(parents=True)
    ids = _stamped(tmp_path, monkeypatch)
    folder = tmp_path / "attachments" / ids[0]
    aside = folder.with_name(folder.name + "~deleted")
    aside.mkdir()
    (aside / "a.bin").write_bytes(b"kept")
    assert _sessions_index.read_stamp(tmp_path / ".index" / "sessions.list") == _open_listing.stamp_of(
        Ops(), os.fspath(tmp_path))  # the open takes the vouched path
    with session_manager.open(tmp_path):
        pass
    assert (folder / "a.bin").read_bytes() == b"kept" and not aside.exists()


@pytest.mark.parametrize("skipped", ["not a file", "not an encoded id"])
def test_a_log_the_first_list_could_not_use_keeps_every_open_listing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, skipped: str) -> None:
    # Prevents: a stamp recorded over a listing with a skipped log (not a regular file, unreadable),
    # which would leave it unlooked-at by every later open instead of warned about and retried.
    ids = _build(tmp_path)
    if skipped == "not a file":
        (tmp_path / "s_dir.jsonl").mkdir()
    else:
        (tmp_path / "bad%zz.jsonl").write_bytes(b"")
    _old_enough(monkeypatch, tmp_path)
    for _ in range(2):
        ops = CountingOps(tmp_path)
        assert _listed(FsStore(tmp_path, ops=ops)) == sorted(ids)
        assert ops.listings == 1
    assert _sessions_index.read_stamp(tmp_path / ".index" / "sessions.list") is None


def test_an_index_replaced_between_the_open_and_the_first_list_is_not_vouched_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the first list taking the names of an index other than the one whose stamp the open
    # checked (an older copy put back meanwhile names logs data_dir no longer holds).
    ids = _stamped(tmp_path, monkeypatch)
    index = tmp_path / ".index" / "sessions.list"
    ops = CountingOps(tmp_path)
    store = FsStore(tmp_path, ops=ops)
    index.unlink()
    assert _listed(store) == sorted(ids) == _truth(tmp_path)
    assert ops.listings == 1


def test_an_older_index_put_back_between_the_open_and_the_first_list_is_not_vouched_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the first list trusting the names of an index whose stamp is not the one the open
    # checked (a copy from before a session was created names one log fewer).
    ids = _stamped(tmp_path, monkeypatch)
    index = tmp_path / ".index" / "sessions.list"
    older = index.read_bytes()
    _foreign_log(tmp_path, "s_later")
    _old_enough(monkeypatch, tmp_path)
    with session_manager.open(tmp_path) as sm:
        sm.call("session::list", {})  # stamped under the new names
    store = FsStore(tmp_path)
    assert store._opened is not None and store._opened.logs is None  # vouched for by the new index
    index.write_bytes(older)
    assert _listed(store) == sorted([*ids, "s_later"]) == _truth(tmp_path)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


@pytest.mark.parametrize("also", ["nothing", "create", "delete"])
def test_the_index_saved_at_close_vouches_for_the_names_the_close_listed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, also: str) -> None:
    # Prevents: every reopen after a session of appends listing data_dir again (the close's index
    # carrying no stamp), and a stamp from the close naming logs other than data_dir's.
    ids = _stamped(tmp_path, monkeypatch)
    appended = ids[3]
    with session_manager.open(tmp_path) as sm:
        sm.call("session::list", {})
        if also == "create":
            ids.append(sm.call("session::create", {"title": "new"})["session_id"])
        elif also == "delete":
            sm.call("session::delete", {"session_id": ids.pop(0)})
        sm.call("session::append", {"session_id": appended, "message": _user("later")})
    stamp = _open_listing.stamp_of(Ops(), os.fspath(tmp_path))
    assert _sessions_index.read_stamp(tmp_path / ".index" / "sessions.list") == stamp
    ops = CountingOps(tmp_path)
    store = FsStore(tmp_path, ops=ops)
    sm = session_manager.open(store=store)
    got = sm.call("session::list", {"limit": 1000})["sessions"]
    sm.close()
    assert ops.listings == 0
    assert sorted(m["session_id"] for m in got) == sorted(ids) == _truth(tmp_path)
    assert {m["session_id"]: m for m in got}[appended]["message_count"] == 1  # its meta as the close saw it


def test_a_close_that_finds_leftovers_records_no_stamp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the close's stamp vouching for a data_dir that holds a rewrite temp (the next open
    # would skip removing it).
    ids = _stamped(tmp_path, monkeypatch)
    temp = tmp_path / f"{ids[0]}.jsonl.compact"
    with session_manager.open(tmp_path) as sm:
        sm.call("session::list", {})
        sm.call("session::append", {"session_id": ids[3], "message": _user("later")})
        temp.write_bytes(b"as a kill mid-rewrite leaves it")
    assert _sessions_index.read_stamp(tmp_path / ".index" / "sessions.list") is None
    with session_manager.open(tmp_path):
        assert not temp.exists()


def test_a_close_whose_index_misses_a_listed_log_records_no_stamp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the close stamping names it has no record for (a log the reference created while
    # this store was open): the next open would never list it.
    ids = _stamped(tmp_path, monkeypatch)
    with session_manager.open(tmp_path) as sm:
        sm.call("session::list", {})
        sm.call("session::append", {"session_id": ids[3], "message": _user("later")})
        _foreign_log(tmp_path, "s_foreign")
    assert _sessions_index.read_stamp(tmp_path / ".index" / "sessions.list") is None
    ops = CountingOps(tmp_path)
    assert _listed(FsStore(tmp_path, ops=ops)) == sorted([*ids, "s_foreign"]) == _truth(tmp_path)
    assert ops.listings == 1


@pytest.fixture(scope="module")
def stamped_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]], bytes]:
    where = tmp_path_factory.mktemp("stamped") / "d"
    with pytest.MonkeyPatch.context() as mp:
        _stamped(where, mp)
    with session_manager.open(where, read_only=True) as ro:
        expected = ro.call("session::list", {"limit": 1000})["sessions"]
    return where, expected, (where / ".index" / "sessions.list").read_bytes()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_damaged_stamped_index_never_changes_the_list(
        stamped_dir: tuple[Path, list[dict[str, Any]], bytes], data: st.DataObject) -> None:
    # Prevents: an open acting on a damaged index because its (unchecked) first bytes still carry
    # data_dir's stamp: the first list must still check the whole index, and list the truth.
    where, expected, good = stamped_dir
    index = where / ".index" / "sessions.list"
    how = data.draw(st.sampled_from(["flip", "truncate", "garbage"]))
    if how == "flip":
        at = data.draw(st.integers(0, len(good) - 1))
        index.write_bytes(good[:at] + bytes([good[at] ^ data.draw(st.integers(1, 255))]) + good[at + 1 :])
    elif how == "truncate":
        index.write_bytes(good[: data.draw(st.integers(0, len(good) - 1))])
    else:
        index.write_bytes(good[:48] + data.draw(st.binary(max_size=64)))  # the stamp kept, the rest not
    with session_manager.open(where) as sm:
        assert sm.call("session::list", {"limit": 1000})["sessions"] == expected
    with session_manager.open(where, read_only=True) as ro:
        assert ro.call("session::list", {"limit": 1000})["sessions"] == expected
    index.write_bytes(good)


def test_the_first_list_stamps_the_index_in_place_and_only_the_file_it_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a first list rewriting the whole index (3 MiB at 10k logs) only to stamp it, and a
    # stamp written into an index that replaced the one whose names the list checked.
    _build(tmp_path)
    _old_enough(monkeypatch, tmp_path)
    index = tmp_path / ".index" / "sessions.list"
    before, inode = index.read_bytes(), index.stat().st_ino
    assert _sessions_index.read_stamp(index) is None
    with session_manager.open(tmp_path) as sm:
        sm.call("session::list", {})
    stamp = _open_listing.stamp_of(Ops(), os.fspath(tmp_path))
    assert stamp is not None and _sessions_index.read_stamp(index) == stamp
    head = len(_sessions_index.MAGIC) + 32
    assert index.stat().st_ino == inode and index.read_bytes()[head:] == before[head:]
    read = _sessions_index.read(index)
    assert read is not None and read.stamp == stamp
    replacement = index.with_name("other")
    replacement.write_bytes(before)  # unstamped, as another writer's index
    os.replace(replacement, index)
    _sessions_index.restamp(index, read, stamp)
    assert index.read_bytes() == before


@pytest.mark.parametrize("seconds", ["whole", "fractional"])
def test_a_stamp_in_whole_seconds_must_be_older_than_the_coarsest_granularity(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seconds: str) -> None:
    # Prevents: a file system that keeps whole seconds (FAT's 2 s) given the margin of one that
    # keeps sub-second times: a change in the same 2 s could leave its stamp unchanged.
    _build(tmp_path)
    hour_ago = (time.time_ns() // 10**9 - 3600) * 10**9 + (0 if seconds == "whole" else 123_456_789)
    os.utime(tmp_path, ns=(hour_ago, hour_ago))  # (its ctime is now)
    while not tmp_path.stat().st_ctime_ns % 10**9:  # now fell on a whole second (a clock tick in 250)
        time.sleep(0.01)
        os.utime(tmp_path, ns=(hour_ago, hour_ago))
    monkeypatch.setattr(_open_listing, "_now", lambda: time.time_ns() + 10**9)  # a second later
    store = FsStore(tmp_path)
    assert store._opened is not None
    assert (store._opened.stamp is None) == (seconds == "whole")
    store.close()


def test_a_fifo_in_place_of_the_sessions_index_blocks_no_open_get_or_list(tmp_path: Path) -> None:
    # Prevents: the open reading the index's stamp through a FIFO put in its place (or any
    # non-regular file): the open, and so every get, blocked forever waiting for a writer.
    ids = _build(tmp_path)
    index_file = tmp_path / ".index" / "sessions.list"
    index_file.unlink()
    os.mkfifo(index_file)
    got: dict[str, Any] = {}

    def use() -> None:
        with session_manager.open(tmp_path) as sm:
            got["get"] = sm.call("session::get", {"session_id": ids[0]})["meta"]["session_id"]
            got["list"] = sorted(m["session_id"] for m in sm.call("session::list", {"limit": 1000})["sessions"])

    worker = threading.Thread(target=use, daemon=True)
    worker.start()
    worker.join(20)  # (only a hang ever takes this long: then the FIFO is opened to release it)
    hung = worker.is_alive()
    if hung:
        for _ in range(3):  # each blocked open of the FIFO is released by a writer's open + close
            with contextlib.suppress(OSError):
                os.close(os.open(index_file, os.O_WRONLY | os.O_NONBLOCK))
            worker.join(5)
    assert not hung
    assert got == {"get": ids[0], "list": sorted(ids)}
    assert sorted(ids) == _truth(tmp_path)


class WholeSecondOps(Ops):
    """data_dir seen as a file system keeping whole seconds (FAT, HFS+, ext4 with
    128-byte inodes, SFTP) would show it: its times truncated to the second."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = os.fspath(data_dir)

    def stat(self, path: StrPath) -> os.stat_result:
        st = super().stat(path)
        if os.fspath(path) != self.data_dir:
            return st
        whole = {f"st_{t}time_ns": getattr(st, f"st_{t}time_ns") // 10**9 * 10**9 for t in "amc"}
        return os.stat_result(tuple(st)[:10], whole)


def test_a_log_created_in_the_second_of_a_whole_second_stamp_is_listed_whatever_the_clock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a whole-second stamp trusted because the clock read it as 2 s old -- the clock was
    # stepped back since, or the file system's clock (a server's) lags ours: a log created in that
    # same second leaves data_dir's stamp unchanged, and every later open lists without it.
    for _ in range(5):  # (retried if the second ended between the two changes: a slow box)
        where = tmp_path / f"try{_}"
        where.mkdir()
        ids = _build(where)
        time.sleep(1 - time.time() % 1 + 0.01)  # the start of a second: the next steps share it
        (where / "probe").touch()
        (where / "probe").unlink()  # data_dir changes in second X
        monkeypatch.setattr(_open_listing, "_now", lambda: time.time_ns() + 3 * 10**9)  # X + 3 s, it says
        store = FsStore(where, ops=WholeSecondOps(where))
        _listed(store)
        monkeypatch.setattr(_open_listing, "_now", time.time_ns)
        _foreign_log(where, "s_foreign")  # the reference, still in second X
        if time.time_ns() // 10**9 == where.stat().st_ctime_ns // 10**9:
            break
    assert _listed(FsStore(where, ops=WholeSecondOps(where))) == sorted([*ids, "s_foreign"]) == _truth(where)
