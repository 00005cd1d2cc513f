"""The open's listing of data_dir, reused by the first list only while the
directory's stamp proves no entry was created, removed or renamed since."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.store import Commit, FsStore, _opened_listing
from session_manager.store._fsio import Ops, StrPath
from session_manager.store._records import encode_commit
from tests.unit.store_contract import meta


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
    monkeypatch.setattr(_opened_listing, "_now", lambda: time.time_ns() + 2 * _opened_listing.RACY_NS)


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


def test_a_directory_changed_just_before_the_open_is_listed_again(tmp_path: Path) -> None:
    # Prevents: a stamp younger than the timestamp granularity being trusted (a create in the same
    # clock tick as the listing could leave the directory's mtime unchanged).
    ids = _build(tmp_path)
    _foreign_log(tmp_path, "s_foreign")  # data_dir changed a moment ago: its stamp is racy
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
