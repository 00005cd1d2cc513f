"""The fs store under conditions real deployments meet: long streams, exact
numbers, failed deletes, odd files, bad callers, symlinks, long ids and
case-insensitive file systems."""

from __future__ import annotations

import errno
import gc
import logging
import os
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import SessionError
from session_manager._service.core import stripe
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds
from session_manager.store import FsStore
from session_manager.store.fs._fileops import Ops, StrPath
from session_manager.testing import FakeEngine as FakeIII
from tests.unit.test_configuration import boot, fs

T0 = 1_000_000
INVALID, STORAGE = "session/invalid_request", "session/storage"


def _open(where: Path, **kw: Any) -> session_manager.SessionManager:
    return session_manager.open(where, ids=kw.pop("ids", SequentialIds()), clock=ManualClock(T0), **kw)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def _assistant() -> dict[str, Any]:
    return {"role": "assistant", "content": [], "stop_reason": "end", "model": "m", "provider": "p", "timestamp": 1}


def _tree(where: Path) -> dict[str, bytes]:
    return {p.relative_to(where).as_posix(): p.read_bytes() for p in sorted(where.rglob("*")) if p.is_file()}


def _code(call: Any) -> SessionError:
    with pytest.raises(SessionError) as info:
        call()
    return info.value


# -- bounded logs --------------------------------------------------------------------------


@pytest.mark.slow  # the slow lane (`pytest -m slow`): a soak
def test_a_3000_update_stream_keeps_the_log_within_3x_the_final_message(tmp_path: Path) -> None:
    # Prevents: a streamed reply growing the log quadratically until a restart (46.6 MB for a
    # 30 KB reply).
    where = tmp_path / "d"
    sm = _open(where)
    sm.call("session::create", {})
    sm.call("session::append", {"session_id": "s_001", "message": _user("q")})
    sm.call("session::append", {"session_id": "s_001", "message": _assistant()})
    log = where / "s_001.jsonl"
    worst = 0.0
    text = ""
    for _ in range(3000):
        text += "token 789 "
        sm.call("session::update-message", {"session_id": "s_001", "entry_id": "e_002",
                                            "content": [{"type": "text", "text": text}]})
        size = log.stat().st_size
        assert size <= 3 * len(text) + 64 * 1024, (len(text), size)
        worst = max(worst, size / len(text))
    final = sm.call("session::get-message", {"session_id": "s_001", "entry_id": "e_002"})["entry"]
    assert final["message"]["content"][0]["text"] == text and final["revision"] == 3000
    sm.close()
    again = _open(where)
    assert again.call("session::get-message", {"session_id": "s_001", "entry_id": "e_002"})["entry"] == final
    assert again.call("session::get", {"session_id": "s_001"})["meta"]["message_count"] == 2
    again.close()
    assert not [p for p in where.iterdir() if p.name.endswith(".compact")]  # no temp left behind


# -- exact values --------------------------------------------------------------------------


def test_numbers_and_text_round_trip_exactly_across_a_restart(tmp_path: Path) -> None:
    # Prevents: 2**70 + 1 reading back as 1.1805916207174113e+21 after a restart, 3.0 turning into 3.
    where = tmp_path / "d"
    metadata = {"big": 2**70 + 1, "neg": -(2**64) - 3, "i64": -(2**63) - 1, "float": 3.0, "tiny": 5e-324,
                "text": "é\u2028\U0001f600\x00", "digits": "1234567890123456789012345"}
    with _open(where) as sm:
        sm.call("session::create", {"metadata": metadata})
        sm.call("session::append", {"session_id": "s_001", "custom": {"custom_type": "n", "data": metadata}})
    with _open(where) as sm:
        got = sm.call("session::get", {"session_id": "s_001"})["meta"]["metadata"]
        data = sm.call("session::messages", {"session_id": "s_001", "include_custom": True})["messages"][0]
    for value in (got, data["custom"]["data"]):
        assert value == metadata
        assert {k: type(v) for k, v in value.items()} == {k: type(v) for k, v in metadata.items()}


@pytest.mark.parametrize(("value", "field"), [
    (float("nan"), "metadata.x.0"), (float("inf"), "metadata.x.0"), (float("-inf"), "metadata.x.0"),
    ("bad\ud800", "metadata.x.0"),
])
def test_values_json_cannot_carry_are_refused_naming_the_field(tmp_path: Path, value: Any, field: str) -> None:
    # Prevents: NaN stored as null (and echoed as a non-JSON token), a surrogate failing mid-write.
    where = tmp_path / "d"
    sm = _open(where)
    sm.call("session::create", {})
    seen: list[Any] = []
    sm.observe({"function_id": "session::on-meta-updated"}, seen.append)
    before = _tree(where)
    error = _code(lambda: sm.call("session::set-meta", {"session_id": "s_001", "metadata": {"x": [value]}}))
    assert error.code == INVALID and str(error).startswith(f"{INVALID}: {field}:")
    assert _tree(where) == before and seen == []
    assert "metadata" not in sm.call("session::get", {"session_id": "s_001"})["meta"]
    sm.close()


# -- delete is whole or not at all -----------------------------------------------------------


class FailingOps(Ops):
    """Real os calls, except one that fails (by name of the call and a path fragment)."""

    def __init__(self) -> None:
        self.fail: tuple[str, str] | None = None

    def _check(self, call: str, path: Path) -> None:
        if self.fail is not None and self.fail[0] == call and self.fail[1] in str(path):
            raise OSError(errno.EIO, "simulated I/O error")

    def replace(self, src: Path, dst: Path) -> None:
        self._check("replace", dst)
        super().replace(src, dst)

    def unlink(self, path: Path) -> None:
        self._check("unlink", path)
        super().unlink(path)


def _with_attachment(where: Path, ops: Ops) -> session_manager.SessionManager:
    sm = session_manager.open(store=FsStore(where, ops=ops), ids=SequentialIds(), clock=ManualClock(T0))
    sm.call("session::create", {})
    sm.call("session::append", {"session_id": "s_001", "message": _user("hi")})
    sm.call("session::put-attachment", {"session_id": "s_001", "name": "a.txt", "mime": "text/plain",
                                        "data": "aGk="})
    return sm


def _readable(sm: session_manager.SessionManager) -> None:
    assert [m["session_id"] for m in sm.call("session::list", {})["sessions"]] == ["s_001"]
    assert sm.call("session::get-attachment", {"session_id": "s_001", "attachment_id": "a_001"})["data"] == "aGk="
    assert len(sm.call("session::messages", {"session_id": "s_001"})["messages"]) == 1


def test_a_delete_failing_before_its_commit_point_leaves_the_session_whole(tmp_path: Path) -> None:
    # Prevents: the log unlinked, then a failure on attachments/: session/storage while the session
    # is half gone and its attachment files orphaned.
    where, ops = tmp_path / "d", FailingOps()
    sm = _with_attachment(where, ops)
    before = _tree(where)
    deleted: list[Any] = []
    sm.observe({"function_id": "session::on-deleted"}, deleted.append)
    ops.fail = ("replace", "s_001.jsonl~deleted")  # renaming the log aside (the commit point) fails
    error = _code(lambda: sm.call("session::delete", {"session_id": "s_001"}))
    assert error.code == STORAGE and str(where) not in str(error)
    assert _tree(where) == before and deleted == []
    _readable(sm)
    sm.close()
    with session_manager.open(where) as again:
        _readable(again)


def test_a_delete_failing_after_its_commit_point_stands_and_the_next_open_finishes_it(tmp_path: Path) -> None:
    # Prevents: a committed delete answered as failed, or leftovers of it orphaned for good.
    where, ops = tmp_path / "d", FailingOps()
    sm = _with_attachment(where, ops)
    ops.fail = ("unlink", "s_001.jsonl~deleted")  # the last cleanup step fails
    assert sm.call("session::delete", {"session_id": "s_001"}) == {"deleted": True}
    assert sm.call("session::get", {"session_id": "s_001"}) is None
    assert sm.call("session::list", {})["sessions"] == []
    assert (where / "s_001.jsonl~deleted").exists()
    with session_manager.open(where, read_only=True) as ro:  # a reader treats it as gone already
        assert ro.call("session::get", {"session_id": "s_001"}) is None
    sm.close()
    session_manager.open(where).close()
    assert sorted(_tree(where)) == [".session-manager.lock"]
    assert [p.name for p in (where / "attachments").iterdir()] == []


class DirSyncFailingOps(Ops):
    """Real os calls, except that opening ``fail_dir`` (the directory fsync's open) fails."""

    def __init__(self) -> None:
        self.fail_dir: str | None = None

    def open(self, path: StrPath, flags: int, mode: int = 0o644) -> int:
        if self.fail_dir is not None and os.fspath(path) == self.fail_dir:
            raise OSError(errno.EMFILE, "Too many open files")
        return super().open(path, flags, mode)


def test_a_delete_whose_directory_sync_fails_leaves_the_session_whole(tmp_path: Path) -> None:
    # Prevents: durability "fsync", the directory fsync after the log's rename aside failing (EMFILE):
    # the delete answered session/storage with the log left aside, the session still served from the
    # cache, the next append creating a fresh log (its index pointing at the old log's offsets), and
    # the next open finishing the "failed" delete: every earlier entry lost, the session unreadable.
    where, ops = tmp_path / "d", DirSyncFailingOps()
    sm = session_manager.open(store=FsStore(where, ops=ops, durability="fsync"), ids=SequentialIds(),
                              clock=ManualClock(T0))
    sm.call("session::create", {})
    sm.call("session::append", {"session_id": "s_001", "message": _user("hi")})
    sm.call("session::put-attachment", {"session_id": "s_001", "name": "a.txt", "mime": "text/plain",
                                        "data": "aGk="})
    before = _tree(where)
    ops.fail_dir = os.fspath(where)
    error = _code(lambda: sm.call("session::delete", {"session_id": "s_001"}))
    ops.fail_dir = None
    assert error.code == STORAGE
    assert _tree(where) == before
    _readable(sm)
    sm.call("session::append", {"session_id": "s_001", "message": _user("again")})
    sm.close()
    with session_manager.open(where) as again:
        _readable_with(again, 2)


def _readable_with(sm: session_manager.SessionManager, messages: int) -> None:
    assert [m["session_id"] for m in sm.call("session::list", {})["sessions"]] == ["s_001"]
    assert sm.call("session::get-attachment", {"session_id": "s_001", "attachment_id": "a_001"})["data"] == "aGk="
    assert len(sm.call("session::messages", {"session_id": "s_001"})["messages"]) == messages


def test_a_crash_between_the_two_renames_is_undone_at_the_next_open(tmp_path: Path) -> None:
    # Prevents: a session whose attachments were moved aside (not yet deleted) losing them.
    where = tmp_path / "d"
    sm = _with_attachment(where, Ops())
    sm.close()
    os.rename(where / "attachments" / "s_001", where / "attachments" / "s_001~deleted")  # step 1 only
    with session_manager.open(where) as again:
        _readable(again)
    assert not (where / "attachments" / "s_001~deleted").exists()


# -- odd files never stall the store ----------------------------------------------------------


class UnreadableOps(Ops):
    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        if os.path.basename(path) == "locked.jsonl":
            raise PermissionError(errno.EACCES, "Permission denied")
        return super().open(path, flags, mode)


def test_a_fifo_a_directory_and_an_unreadable_file_named_jsonl_are_skipped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: a FIFO hanging session::list forever under the store-wide lock (stalling every
    # call), a directory or unreadable file failing list for everyone.
    where = tmp_path / "d"
    with _open(where) as sm:
        sm.call("session::create", {"title": "fine"})
    os.mkfifo(where / "fifo.jsonl")
    (where / "dir.jsonl").mkdir()
    (where / "locked.jsonl").write_bytes(b"{}\n")
    (where / "link.jsonl").symlink_to(where / "s_001.jsonl")
    sm = session_manager.open(store=FsStore(where, ops=UnreadableOps()), ids=SequentialIds(),
                              clock=ManualClock(T0))
    result: list[Any] = []
    with caplog.at_level(logging.WARNING, logger="session_manager.store.fs"):
        worker = threading.Thread(target=lambda: result.append(sm.call("session::list", {})))
        worker.start()
        worker.join(10)
        assert not worker.is_alive(), "session::list hung on a FIFO"
        sm.call("session::list", {})
        sm.call("session::list", {"limit": 1})
    assert [m["title"] for m in result[0]["sessions"]] == ["fine"]
    warned = [r.getMessage() for r in caplog.records]
    for name in ("fifo.jsonl", "dir.jsonl", "locked.jsonl", "link.jsonl"):
        assert sum(name in w for w in warned) == 1, (name, warned)  # once, however often listed
    assert not any(str(where) in w for w in warned)
    for sid in ("fifo", "dir", "locked", "link"):
        for fid in ("session::get", "session::messages"):
            error = _code(lambda fid=fid, sid=sid: sm.call(fid, {"session_id": sid}))
            assert error.code == STORAGE and str(where) not in str(error)
    assert sm.call("session::get", {"session_id": "s_001"})["meta"]["title"] == "fine"
    sm.close()


class BlockingOps(Ops):
    """Opening one log waits until released: a slow disk."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        if os.path.basename(path) == "slow.jsonl":
            self.entered.set()
            self.release.wait(10)
        return super().open(path, flags, mode)


def test_a_cold_list_reading_files_never_blocks_other_calls(tmp_path: Path) -> None:
    # Prevents: a cold list holding the store-wide lock across its file reads (every call waited).
    where = tmp_path / "d"
    with _open(where) as sm:
        sm.call("session::create", {"title": "warm"})
        sm.call("session::ensure", {"session_id": "slow"})
    ops = BlockingOps()
    sm = session_manager.open(store=FsStore(where, ops=ops), ids=SequentialIds(), clock=ManualClock(T0))
    sm.call("session::get", {"session_id": "s_001"})  # warm
    listed: list[Any] = []
    lister = threading.Thread(target=lambda: listed.append(sm.call("session::list", {})))
    lister.start()
    try:
        assert ops.entered.wait(10)
        assert sm.call("session::get", {"session_id": "s_001"})["meta"]["title"] == "warm"
        sm.call("session::set-status", {"session_id": "s_001", "status": "working"})
        assert lister.is_alive()  # still reading, and the calls above did not wait for it
    finally:
        ops.release.set()
        lister.join(10)
    assert {m["session_id"]: m["status"] for m in listed[0]["sessions"]} == {"s_001": "working", "slow": "idle"}
    sm.close()


# -- bounded resources ----------------------------------------------------------------------


@pytest.mark.slow  # the slow lane (`pytest -m slow`): a soak
def test_20000_calls_on_unknown_ids_retain_under_1_mib(tmp_path: Path) -> None:
    # Prevents: one lock kept forever per id ever named (12.9 MB for 60,000 unknown ids, so
    # ~4.3 MB for these 20,000: four times the limit).
    sm = _open(tmp_path / "d")
    sm.call("session::create", {})
    for i in range(200):  # warm up caches that are not per-id
        _code(lambda i=i: sm.call("session::set-status", {"session_id": f"warm-{i}", "status": "done"}))
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        for i in range(20_000):
            fid = ("session::set-status", "session::append", "session::get")[i % 3]
            payload: dict[str, Any] = {"session_id": f"unknown-{i}"}
            if fid == "session::set-status":
                payload["status"] = "done"
            elif fid == "session::append":
                payload["message"] = _user("x")
            try:
                sm.call(fid, payload)
            except SessionError as e:
                assert e.code == "session/not_found"
        gc.collect()
        now, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert now - base < 1024 * 1024, now - base
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [".index", ".session-manager.lock", "s_001.jsonl"]
    assert sorted(p.name for p in (tmp_path / "d" / ".index").iterdir()) == ["s_001.idx"]  # none per unknown id
    sm.close()


def test_an_oversized_batch_or_request_is_refused_before_any_work(tmp_path: Path) -> None:
    # Prevents: one append-many of 10^6 entries taking 58 s and 7.6 GB before anything checked it.
    where = tmp_path / "d"
    sm = _open(where, max_request_bytes=16384, max_batch_entries=100)
    sm.call("session::create", {})
    before = _tree(where)
    batch = [_user("m")] * 100_000
    gc.collect()
    tracemalloc.start()
    try:
        error = _code(lambda: sm.call("session::append-many", {"session_id": "s_001", "messages": batch}))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.code == INVALID and "messages: 100000 entries exceed max_batch_entries (100)" in str(error)
    assert peak < 2 * 1024 * 1024 + 100_000 * 120, peak  # the payload's copy, not its validation
    error = _code(lambda: sm.call("session::append", {"session_id": "s_001", "message": _user("x" * 20000)}))
    assert error.code == INVALID and "exceed max_request_bytes (16384)" in str(error)
    assert _tree(where) == before
    sm.call("session::append-many", {"session_id": "s_001", "messages": [_user("ok")] * 100})  # at the limit
    sm.close()


def test_the_request_limits_hot_reload_on_the_worker(tmp_path: Path) -> None:
    # Prevents: limits that need a restart, or that the worker's config does not know.
    fake = FakeIII()
    host = boot(fake, seed=fs(tmp_path / "a"))
    try:
        fake.invoke("session::create", {})
        fake.invoke("session::append-many", {"session_id": "s_001", "messages": [_user("a")] * 3})
        fake.set_config(fs(tmp_path / "a", max_batch_entries=2, max_request_bytes=300))
        with pytest.raises(Exception, match="max_batch_entries"):
            fake.invoke("session::append-many", {"session_id": "s_001", "messages": [_user("a")] * 3})
        with pytest.raises(Exception, match="max_request_bytes"):
            fake.invoke("session::append", {"session_id": "s_001", "message": _user("y" * 400)})
        assert fake.invoke("session::get", {"session_id": "s_001"})["meta"]["message_count"] == 3
    finally:
        host.close()


def _stripe(sid: str) -> int:
    return stripe(sid)  # the service's own rule, so the ids chosen below do share stripes


def _same_stripe(sid: str) -> str:
    n = 0
    while _stripe(f"x{n}") != _stripe(sid) or f"x{n}" == sid:
        n += 1
    return f"x{n}"


class ChosenIds(SequentialIds):
    def __init__(self, sessions: list[str]) -> None:
        super().__init__()
        self._sessions = sessions
        self._guard = threading.Lock()

    def session_id(self) -> str:
        with self._guard:
            return self._sessions.pop(0) if self._sessions else super().session_id()


def test_forks_whose_ids_share_stripes_never_deadlock(tmp_path: Path) -> None:
    # Prevents: striped session locks deadlocking fork (which locks source and new id) when two
    # forks cross stripes, or when a fork's new id shares the source's stripe.
    a = "src-a"
    b = "src-b"
    sm = _open(tmp_path / "d")
    for sid in (a, b):
        sm.call("session::ensure", {"session_id": sid})
        sm.call("session::append", {"session_id": sid, "message": _user(sid), "entry_id": f"m-{sid}"})
    # New ids on a's stripe or b's, in turn: forks of a and of b cross each other's stripes,
    # and some land on their own source's stripe.
    on_a, on_b, n = [], [], 0
    while len(on_a) < 100 or len(on_b) < 100:
        cand = f"f{n}"
        if _stripe(cand) == _stripe(a) and len(on_a) < 100:
            on_a.append(cand)
        elif _stripe(cand) == _stripe(b) and len(on_b) < 100:
            on_b.append(cand)
        n += 1
    assert _stripe(_same_stripe(a)) == _stripe(a)
    assert all(sm.service.session_lock(x) is sm.service.session_lock(a) for x in on_a)
    assert all(sm.service.session_lock(x) is sm.service.session_lock(b) for x in on_b)
    sm.service.core.ids = ChosenIds([x for pair in zip(on_a, on_b, strict=True) for x in pair])
    errors: list[BaseException] = []

    def forker(source: str) -> None:
        try:
            for _ in range(100):
                sm.call("session::fork", {"session_id": source, "entry_id": f"m-{source}"})
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=forker, args=(s,)) for s in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "fork deadlocked"
    assert errors == []
    metas = sm.call("session::list", {"limit": 500})["sessions"]
    assert len(metas) == 202
    assert sorted(m["forked_from"] for m in metas if "forked_from" in m) == [a] * 100 + [b] * 100
    sm.close()


# -- ids, paths and symlinks ------------------------------------------------------------------


def test_ids_too_long_for_a_file_name_are_invalid_requests_stating_the_limit(tmp_path: Path) -> None:
    # Prevents: a 250-character id answering session/storage with the absolute path in the text.
    where = tmp_path / "d"
    sm = _open(where)
    limit = 255 - len(".jsonl~deleted")
    for sid in ("a" * 250, "会" * 28, "b" * (limit + 1)):
        for fid in ("session::ensure", "session::get", "session::delete"):
            error = _code(lambda fid=fid, sid=sid: sm.call(fid, {"session_id": sid}))
            assert error.code == INVALID and f"allows {limit}" in str(error), str(error)
            assert str(where) not in str(error) and sid not in str(error)
    fits = "c" * limit  # the longest id: stored, compacted, deleted like any other
    sm.call("session::ensure", {"session_id": fits})
    sm.call("session::append", {"session_id": fits, "message": _user("x")})
    assert sm.call("session::delete", {"session_id": fits}) == {"deleted": True}
    # Nothing of it is left: the .index folder (its sidecar included) holds nothing more.
    assert not list((where / ".index").iterdir())
    names = sorted(p.name for p in where.iterdir() if p.name != ".index")
    assert names == [".session-manager.lock", "attachments"] or names == [".session-manager.lock"]
    sm.close()


def test_a_symlinked_attachments_folder_is_never_written_or_deleted_through(tmp_path: Path) -> None:
    # Prevents: session::delete removing a folder outside data_dir through a symlinked attachments/.
    where, outside = tmp_path / "d", tmp_path / "outside"
    sm = _open(where)
    sm.call("session::create", {})
    (outside / "s_001").mkdir(parents=True)
    (outside / "s_001" / "precious.json").write_text("{}")
    (where / "attachments").symlink_to(outside)
    error = _code(lambda: sm.call("session::delete", {"session_id": "s_001"}))
    assert error.code == STORAGE and "symbolic link" in str(error)
    error = _code(lambda: sm.call("session::put-attachment", {"session_id": "s_001", "name": "a", "mime": "",
                                                                 "data": "aGk="}))
    assert error.code == STORAGE and "symbolic link" in str(error)
    assert (outside / "s_001" / "precious.json").read_text() == "{}"
    assert sm.call("session::get", {"session_id": "s_001"}) is not None  # whole, not half deleted
    sm.close()


# -- case-insensitive file systems --------------------------------------------------------------


class CaseFoldingOps(Ops):
    """A case-insensitive, case-preserving file system over a real directory (as macOS's
    default): a name under ``root`` reaches an existing entry whose name differs only in case,
    so "Chat.jsonl" and "chat.jsonl" are one file, and listings keep the case it was made with."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _fold(self, path: Any) -> Path:
        try:
            rel = Path(path).relative_to(self.root)
        except ValueError:
            return Path(path)
        out = self.root
        for part in rel.parts:
            try:
                existing = [n for n in os.listdir(out) if n.lower() == part.lower()]
            except OSError:
                existing = []
            out = out / (existing[0] if existing else part)
        return out

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        return super().open(self._fold(path), flags, mode)

    def stat(self, path: Path) -> os.stat_result:
        return super().stat(self._fold(path))

    def lstat(self, path: Path) -> os.stat_result:
        return super().lstat(self._fold(path))

    def listdir(self, path: Path) -> list[str]:
        return super().listdir(self._fold(path))

    def replace(self, src: Path, dst: Path) -> None:
        super().replace(self._fold(src), self._fold(dst))

    def unlink(self, path: Path) -> None:
        super().unlink(self._fold(path))

    def mkdir(self, path: Path) -> None:
        super().mkdir(self._fold(path))

    def rmdir(self, path: Path) -> None:
        super().rmdir(self._fold(path))


def test_on_a_case_insensitive_file_system_ids_differing_in_case_never_share_a_file(tmp_path: Path) -> None:
    # Prevents: "Chat" and "chat" sharing one file on macOS/Windows, and deleting chat deleting Chat.
    where = tmp_path / "d"
    where.mkdir()
    store = FsStore(where, ops=CaseFoldingOps(where))
    assert store.case_insensitive  # detected through the os calls, not configured
    assert not FsStore(tmp_path / "plain").case_insensitive
    sm = session_manager.open(store=store, ids=SequentialIds(), clock=ManualClock(T0))
    sm.call("session::ensure", {"session_id": "Chat", "title": "upper"})
    sm.call("session::put-attachment", {"session_id": "Chat", "name": "a", "mime": "", "data": "aGk="})
    for sid in ("chat", "CHAT"):
        error = _code(lambda sid=sid: sm.call("session::ensure", {"session_id": sid}))
        assert error.code == INVALID and "case-insensitive" in str(error)
    assert sm.call("session::get", {"session_id": "chat"}) is None
    assert sm.call("session::delete", {"session_id": "chat"}) == {"deleted": False}
    assert sm.call("session::get", {"session_id": "Chat"})["meta"]["title"] == "upper"
    sm.close()
    again = session_manager.open(store=FsStore(where, ops=CaseFoldingOps(where)))  # the index is rebuilt
    assert _code(lambda: again.call("session::ensure", {"session_id": "chat"})).code == INVALID
    assert again.call("session::delete", {"session_id": "Chat"}) == {"deleted": True}
    again.call("session::ensure", {"session_id": "chat"})  # the name is free once Chat is gone
    assert again.call("session::list-attachments", {"session_id": "chat"})["attachments"] == []
    again.close()


def test_a_delete_never_compacts_on_the_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: deleting a long, not yet loaded session first rewriting its whole log.
    from session_manager.store.fs import _rewrite

    where = tmp_path / "d"
    monkeypatch.setattr(_rewrite, "RATIO", 10**9)  # a long log, as an older writer left it
    with _open(where) as sm:
        sm.call("session::create", {})
        sm.call("session::append", {"session_id": "s_001", "message": _assistant()})
        for i in range(300):
            sm.call("session::update-message", {"session_id": "s_001", "entry_id": "e_001",
                                                "content": [{"type": "text", "text": "x" * (i + 200)}]})
    monkeypatch.undo()
    rewrites: list[str] = []
    real = _rewrite.rewrite
    monkeypatch.setattr(_rewrite, "rewrite", lambda *a, **k: rewrites.append(a[1]) or real(*a, **k))
    store = FsStore(where)
    store.delete_session("s_001")
    assert rewrites == []
    assert store.get_meta("s_001") is None and not (where / "s_001.jsonl").exists()
    store.close()
