"""The flush store's WAL laid ahead of SQLite's writes (core.size_wal: zeros past the WAL's end
under the write lock, a step at a time, up to the frames the WAL holds before a checkpoint):
the steps happen and stop at that bound, a process that writes a few times lays one step, a
crash over a WAL laid ahead keeps every commit, and a step never touches frames a snapshot
still reads. Small bounds (monkeypatched) so a few hundred commits cross several steps."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.store import Commit
from session_manager.store.sqlite import SqliteSettings, SqliteStore, core

_FRAME = 24 + 4096
_META = {"session_id": "s", "title": "", "description": "", "status": "idle", "created_at": 1, "updated_at": 1,
         "message_count": 0}


def _entry(i: int) -> Any:
    return {"kind": "message", "id": f"e{i}", "parent_id": f"e{i - 1}" if i else None, "timestamp": i,
            "revision": 0, "message": {"role": "user", "content": [{"type": "text", "text": "x" * 3000}],
                                       "timestamp": 1}}


def _append(store: SqliteStore, i: int) -> None:
    store.commit("s", Commit(entries=(_entry(i),), leaf=f"e{i}", meta={**_META, "message_count": i + 1}))


def _small(monkeypatch: pytest.MonkeyPatch) -> int:
    """Bounds small enough for a test: a checkpoint every 400 pages, steps of 64-256 KiB; the
    most the WAL is laid to."""
    monkeypatch.setattr(core, "_WAL_PAGES", {"NORMAL": 400, "FULL": 1000})
    monkeypatch.setattr(core, "_WAL_STEP", (64 << 10, 256 << 10))
    return 32 + 500 * _FRAME


def _grown_under_a_snapshot(store: SqliteStore, other: SqliteStore, wal: Path, past: int) -> tuple[Any, int]:
    """Session "s" made by ``store``, a snapshot taken by ``other`` (every frame after it stays: the
    WAL cannot restart), then ``store``'s appends until the WAL is larger than ``past`` bytes: the
    reader holding the snapshot (its transaction open) and the number of appends."""
    store.commit("s", Commit(meta=_META))
    reader = other.db.conn()
    reader.execute("BEGIN")
    assert other.get_meta("s") is not None
    i = 0
    while wal.stat().st_size <= past:
        _append(store, i)
        i += 1
    return reader, i


def test_a_flush_wal_is_laid_ahead_in_steps_then_overwritten_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the flush WAL extended by SQLite one frame at a time until its first checkpoint
    # (each extension a cost to the file system: the steps lost), or laid further once it
    # cycles (checkpointed and restarted, it is overwritten in place: no step is due).
    most = _small(monkeypatch)
    path = tmp_path / "a.db"
    wal = Path(f"{path}-wal")
    store = SqliteStore(SqliteSettings(path=str(path)))
    try:
        store.commit("s", Commit(meta=_META))
        sizes = [wal.stat().st_size]
        assert sizes[0] >= 64 << 10  # the first step, at the first write
        for i in range(300):  # ~2,400 frames: the WAL restarted every ~400
            _append(store, i)
            sizes.append(wal.stat().st_size)
        assert len(set(sizes)) > 3 and max(sizes) <= most  # laid further as SQLite wrote past each step
        assert len(set(sizes[-150:])) == 1  # cycling: overwritten in place
        assert any((size - 32) % _FRAME for size in sizes)  # (zeros past the frames: not SQLite's own size)
        assert [e["id"] for e in store.entries("s")] == [f"e{i}" for i in range(300)]
        assert store.db.conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        store.close()


def test_the_steps_stop_at_what_the_wal_holds_before_a_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: zeros laid past the frames the WAL holds before a checkpoint restarts it (disk
    # spent on zeros nothing overwrites), or the stat still taken once the WAL is past them: a
    # snapshot held keeps the WAL from restarting, so SQLite's own frames grow past the bound.
    most = _small(monkeypatch)
    path = tmp_path / "b.db"
    wal = Path(f"{path}-wal")
    store = SqliteStore(SqliteSettings(path=str(path)))
    other = SqliteStore(SqliteSettings(path=str(path)))
    try:
        reader, i = _grown_under_a_snapshot(store, other, wal, most + 20 * _FRAME)
        assert not store.db.wal_ahead  # past the bound: no more looking
        assert (wal.stat().st_size - 32) % _FRAME == 0  # SQLite's frames end the file: no zeros past them
        reader.execute("COMMIT")
        assert [e["id"] for e in other.entries("s")] == [f"e{n}" for n in range(i)]
    finally:
        store.close()
        other.close()


def test_a_process_writing_a_few_times_lays_one_step_not_the_whole_wal(tmp_path: Path) -> None:
    # Prevents: a short-lived writer (a CLI call) paying for the ~33 MB the WAL of a busy store
    # grows to: three commits lay no step (SQLite's own frames short of a quarter step, 256 KiB).
    path = tmp_path / "few.db"
    store = SqliteStore(SqliteSettings(path=str(path)))
    try:
        store.commit("s", Commit(meta=_META))
        for i in range(3):
            _append(store, i)
        size = Path(f"{path}-wal").stat().st_size
        assert size < (1 << 20) and (size - 32) % _FRAME == 0
    finally:
        store.close()


def test_a_crash_over_a_flush_wal_laid_ahead_keeps_every_commit(tmp_path: Path) -> None:
    # Prevents: zeros laid past the flush WAL's frames misread when the file is recovered after a
    # crash (the process gone, its WAL never checkpointed): a commit lost, or zeros taken as frames.
    path = tmp_path / "c.db"
    script = (
        "import os\n"
        "from session_manager.store import Commit\n"
        "from session_manager.store.sqlite import SqliteSettings, SqliteStore, core\n"
        "core._WAL_STEP = (64 << 10, 256 << 10)\n"
        f"store = SqliteStore(SqliteSettings(path={str(path)!r}))\n"
        f"meta = {_META!r}\n"
        "store.commit('s', Commit(meta=meta))\n"
        "for i in range(150):\n"
        "    e = {'kind': 'message', 'id': f'e{i}', 'parent_id': f'e{i - 1}' if i else None, 'timestamp': i,"
        " 'revision': 0, 'message': {'role': 'user', 'content': [{'type': 'text', 'text': 'x' * 3000}],"
        " 'timestamp': 1}}\n"
        "    store.commit('s', Commit(entries=(e,), leaf=e['id'], meta={**meta, 'message_count': i + 1}))\n"
        "assert store.db.wal_ahead\n"
        "os._exit(0)  # no close: the WAL stays as a crash leaves it\n")
    subprocess.run([sys.executable, "-c", script], check=True, cwd=Path(__file__).resolve().parents[2])
    with session_manager.open(f"sqlite:///{path}") as sm:
        store: Any = sm.service.store
        assert store.db.conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert [e["id"] for e in store.path("s", store.get_leaf("s"))] == [f"e{i}" for i in range(150)]
        assert store.get_meta("s")["message_count"] == 150


def test_a_step_never_touches_frames_a_snapshot_still_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a step laid over frames another connection's snapshot still reads (zeros go past
    # the file's end only), or a zeroed tail read back as frames: a reader holds its snapshot
    # while another store of the same file writes through several steps.
    _small(monkeypatch)
    path = tmp_path / "r.db"
    wal = Path(f"{path}-wal")
    first = SqliteStore(SqliteSettings(path=str(path)))
    second = SqliteStore(SqliteSettings(path=str(path)))
    try:
        first.commit("s", Commit(meta=_META))
        for i in range(20):
            _append(first, i)
        reader = first.db.conn()
        reader.execute("BEGIN")  # held over the steps: no checkpoint can restart the WAL meanwhile
        assert len(first.entries("s")) == 20
        laid = wal.stat().st_size
        for i in range(20, 120):
            _append(second, i)
        assert wal.stat().st_size > laid
        assert [e["id"] for e in first.entries("s")] == [f"e{i}" for i in range(20)]
        reader.execute("COMMIT")
        assert [e["id"] for e in first.entries("s")] == [f"e{i}" for i in range(120)]
        assert first.db.conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        first.close()
        second.close()
