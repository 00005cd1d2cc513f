"""The fs store's append path: where each write says its entry landed, and
the sizes it charges to compaction, without an fstat or a second encode per write."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from session_manager.errors import StoreError
from session_manager.store import Commit, FsStore
from session_manager.store.fs._lazy import LazyEntries
from session_manager.testing.contract import message, meta


def _append(store: FsStore, eid: str, parent: str | None, count: int) -> None:
    store.commit("s_1", Commit(entries=(message(eid, parent),), leaf=eid, meta=meta("s_1", message_count=count)))


def _reread_bodies(store: FsStore) -> list[Any]:
    """Every entry read back from the log through the offsets the writes noted."""
    state = store._sessions.get("s_1")
    assert state is not None and isinstance(state.entries, LazyEntries)
    state.entries.drop_bodies()
    return [store.get_entry("s_1", f"e_{i}") for i in range(1, 6)]


def test_noted_offsets_stay_right_across_a_failed_write_and_a_compaction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a kept end-of-file offset going stale (after a write that failed half way, its truncation,
    # or a compaction's new file) so a body is later read from the wrong bytes.
    store = FsStore(tmp_path / "d")
    store.commit("s_1", Commit(meta=meta("s_1")))
    _append(store, "e_1", None, 1)
    _append(store, "e_2", "e_1", 2)
    real = os.write

    def half(fd: int, buf: Any) -> int:
        real(fd, bytes(buf[:7]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half)
    with pytest.raises(StoreError):
        _append(store, "e_3", "e_2", 3)
    monkeypatch.undo()
    _append(store, "e_3", "e_2", 3)
    expected = [message(f"e_{i}", f"e_{i - 1}" if i > 1 else None) for i in range(1, 4)]
    assert _reread_bodies(store)[:3] == expected
    assert store.compact("s_1")
    _append(store, "e_4", "e_3", 4)
    _append(store, "e_5", "e_4", 5)
    expected += [message("e_4", "e_3"), message("e_5", "e_4")]
    assert _reread_bodies(store) == expected
    store.close()
    again = FsStore(tmp_path / "d")
    assert [again.get_entry("s_1", f"e_{i}") for i in range(1, 6)] == expected
    again.close()


def test_each_write_reports_where_it_starts_without_asking_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: an fstat per append coming back (the kept end is the offset), while the first write to a
    # descriptor still asks the file.
    store = FsStore(tmp_path / "d")
    store.commit("s_1", Commit(meta=meta("s_1")))
    real, asked = os.fstat, []

    def counting(fd: int) -> os.stat_result:
        asked.append(fd)
        return real(fd)

    monkeypatch.setattr(os, "fstat", counting)
    for i in range(1, 6):
        _append(store, f"e_{i}", f"e_{i - 1}" if i > 1 else None, i)
    monkeypatch.undo()
    # (The one fstat a commit makes is of the held lock file: "is data_dir still mine", issue 29.)
    lock = os.stat(tmp_path / "d" / ".session-manager.lock")
    assert [fd for fd in asked if not os.path.samestat(real(fd), lock)] == []
    assert _reread_bodies(store) == [message(f"e_{i}", f"e_{i - 1}" if i > 1 else None) for i in range(1, 6)]
    store.close()
