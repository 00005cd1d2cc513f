"""Attacks on the version in the LangGraph saver's index token (review 16): ``session_token``'s
``(created_at, leaf, version)`` and ``version_after``. A saver must not serve a stale index
(another writer's checkpoint missed) nor derive its index again on every read: another
writer's commits racing this saver's own (real threads), the fs cache's kept versions past
their bound, a read-only fs follower over a log whose last record has no newline, and two
processes over one sqlite file."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")

import session_manager
from session_manager.adapters.langgraph import SessionManagerSaver
from session_manager.store.fs import FsStore, _versions
from session_manager.store.memory import MemoryStore
from tests.unit.test_adapter_attacks_review13_langgraph import checkpoint, put_chain, two, x_of
from tests.unit.test_adapter_langgraph import config


def ids(saver: SessionManagerSaver, thread: str) -> list[str]:
    return sorted(t.config["configurable"]["checkpoint_id"] for t in saver.list(config(thread)))


def counting_entries(store: Any) -> list[str]:
    calls: list[str] = []
    real = store.entries_held  # (the saver's read of every entry)
    store.entries_held = lambda *a: calls.append("entries") or real(*a)
    return calls


# -- real threads: another writer's commits between this saver's own ------------------------------


@pytest.mark.parametrize("where", ["memory", "fs", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_two_savers_putting_and_a_third_writer_setting_meta_in_threads_each_see_every_checkpoint(
        where: str, tmp_path: Path) -> None:
    # Attack: two savers (over two instances of one sqlite file, or one fs/memory store) put to one
    # thread from two threads while a third thread sets the session's meta (a commit that keeps the
    # leaf) and the leaf back; each saver counts its own commits (version_after) with the others'
    # landing between its commit and its count. Afterwards each must list every checkpoint.
    if where == "memory":
        manager = session_manager.open(store=MemoryStore())
        pair: Any = None
    else:
        pair = two(where, tmp_path)
    with (manager if pair is None else pair) as opened:  # type: ignore[attr-defined]
        sm, other = (opened, opened) if pair is None else opened
        first, second = SessionManagerSaver(sm), SessionManagerSaver(other)
        put_chain(first, "t", 1, tag="seed")
        errors: list[BaseException] = []

        def puts(saver: SessionManagerSaver, tag: str) -> None:
            try:
                for i in range(12):
                    saver.put(config("t"), checkpoint(f"{tag}{i:02d}", [tag, i], f"{i + 2}"), {"step": i},
                              {"x": f"{i + 2}"})
                    saver.get_tuple(config("t"))
            except BaseException as e:
                errors.append(e)

        def metas() -> None:
            try:
                for i in range(12):
                    sm.call("session::set-meta", {"session_id": "t", "title": f"n{i}"})
            except BaseException as e:
                errors.append(e)

        workers = [threading.Thread(target=puts, args=(first, "a")), threading.Thread(target=puts, args=(second, "b")),
                   threading.Thread(target=metas)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert errors == []
        expected = sorted(["c000", *(f"a{i:02d}" for i in range(12)), *(f"b{i:02d}" for i in range(12))])
        assert ids(first, "t") == expected
        assert ids(second, "t") == expected


# -- the fs cache's kept versions past their bound ---------------------------------------------------


def test_a_session_evicted_past_the_kept_versions_bound_and_written_meanwhile_is_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Attack: a one-byte cache drops every other session; the kept versions' bound (two here,
    # 65,536 in use) forgets the oldest. Another saver writes to a forgotten session; this saver,
    # whose index of it was derived before, must see the new checkpoint (and a session still
    # kept must not be derived again: no read of its entries).
    monkeypatch.setattr(_versions, "KEPT", 2)
    with session_manager.open(store=FsStore(tmp_path / "d", cache_bytes=1)) as sm:
        store = sm.service.store
        mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(sm)
        for thread in ("a", "b", "c", "d"):
            put_chain(theirs, thread, 2)
            assert x_of(mine.get_tuple(config(thread))) == ["", 1]
        assert len(store._evicted._kept) <= 2 and "a" not in store._evicted._kept
        theirs.put(config("a"), checkpoint("c009", ["late", 9], "9"), {"step": 9}, {"x": "9"})
        put_chain(theirs, "e", 1)  # ("a" dropped again)
        assert x_of(mine.get_tuple(config("a"))) == ["late", 9]
        calls = counting_entries(store)
        assert x_of(mine.get_tuple(config("d"))) == ["", 1]
        assert calls == []


# -- a read-only fs follower -------------------------------------------------------------------------


def test_a_read_only_follower_over_a_log_ending_without_a_newline_derives_its_index_once(tmp_path: Path) -> None:
    # Attack: the writer's last record was written but its newline was not (a crash between the
    # two; the writer fixes such a tail at its next write, and none comes). A read-only follower
    # takes the unterminated record (valid), and applies it again at every refresh: if each
    # applying counted as a write, the session's version moved at every read and a saver over
    # the follower derived its index again from every entry each time.
    d = tmp_path / "d"
    with session_manager.open(d) as sm:
        put_chain(SessionManagerSaver(sm), "f", 2)
        log = sm.service.store.file_path("f")
    data = log.read_bytes()
    assert data.endswith(b"\n")
    log.write_bytes(data[:-1])
    with session_manager.open(store=FsStore(d, read_only=True)) as ro:
        reader = SessionManagerSaver(ro)
        assert x_of(reader.get_tuple(config("f"))) == ["", 1]
        calls = counting_entries(ro.service.store)
        for _ in range(3):
            assert x_of(reader.get_tuple(config("f"))) == ["", 1]
        assert calls == []


@contextmanager
def _writer_and_follower(d: Path, thread: str) -> Iterator[tuple[Any, SessionManagerSaver, SessionManagerSaver]]:
    """A writable fs store at ``d`` with a saver that put one checkpoint on ``thread``, and a
    read-only follower of it with a saver of its own: (the writer's manager, its saver, the reader)."""
    with session_manager.open(d) as sm:
        writer = SessionManagerSaver(sm)
        put_chain(writer, thread, 1)
        with session_manager.open(store=FsStore(d, read_only=True)) as ro:
            yield sm, writer, SessionManagerSaver(ro)


def test_a_read_only_follower_sees_each_checkpoint_the_writer_puts_while_it_reads(tmp_path: Path) -> None:
    # Attack: a read-only follower's saver reads between each of the writer's puts (and its
    # set-meta, which keeps the leaf); each read must show the writer's newest checkpoint.
    with _writer_and_follower(tmp_path / "d", "g") as (sm, writer, reader):
        saved = config("g")
        for i in range(1, 6):
            saved = writer.put(saved, checkpoint(f"c{i:03d}", ["w", i], f"{i + 1}"), {"step": i},
                               {"x": f"{i + 1}"})
            assert x_of(reader.get_tuple(config("g"))) == ["w", i]
            sm.call("session::set-meta", {"session_id": "g", "title": f"n{i}"})
            assert x_of(reader.get_tuple(config("g"))) == ["w", i]
        assert len(ids(reader, "g")) == 6


# -- two processes over one sqlite file --------------------------------------------------------------


def _other_process_puts(uri: str, start: int, count: int) -> None:
    with session_manager.open(uri) as sm:
        saver = SessionManagerSaver(sm)
        for i in range(start, start + count):
            saver.put(config("p"), checkpoint(f"o{i:03d}", ["o", i], f"{i + 2}"), {"step": i}, {"x": f"{i + 2}"})
        leaf = sm.service.store.meta_and_leaf("p")[1]
        # A leaf set back to where it was after the first of these puts: an ABA the other
        # process's saver must not take for its own index's leaf.
        sm.call("session::set-meta", {"session_id": "p", "title": f"after{start}"})
        assert leaf is not None


def test_another_process_writing_one_sqlite_file_between_this_savers_own_puts_is_seen(tmp_path: Path) -> None:
    # Attack: this saver puts (its index follows its own commits, no read); another process
    # puts to the same thread and sets its meta between; this saver puts again and must then
    # list the other process's checkpoints too (rev is the file's, shared by both processes).
    uri = f"sqlite:///{tmp_path.resolve()}/p.db"
    ctx = multiprocessing.get_context("spawn")
    with session_manager.open(uri) as sm:
        mine = SessionManagerSaver(sm)
        put_chain(mine, "p", 1)
        for round_ in range(2):
            proc = ctx.Process(target=_other_process_puts, args=(uri, round_ * 10, 2))
            proc.start()
            proc.join(60)
            assert proc.exitcode == 0
            mine.put(config("p"), checkpoint(f"m{round_:03d}", ["m", round_], f"{20 + round_}"), {"step": 20},
                     {"x": f"{20 + round_}"})
        listed = ids(mine, "p")
    assert listed == ["c000", "m000", "m001", "o000", "o001", "o010", "o011"]


# -- the unconditional write after every checked attempt conflicted -----------------------------------


@pytest.mark.parametrize("where", ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_another_instances_puts_before_this_savers_unconditional_write_are_seen(where: str, tmp_path: Path) -> None:
    # Attack: another instance puts a checkpoint before each of this saver's attempts (every
    # checked one conflicts: LeafMoved), the last one too, which lands unconditionally after it.
    # The index then follows this saver's own leaf; the session's version must say the other
    # instance's checkpoint landed in between (a store naming no version after own commits,
    # postgres, cannot tell: the index must be derived again at the next read all the same).
    with two(where, tmp_path) as (sm, other):
        mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(other)
        put_chain(mine, "u", 1)
        real = sm._append_owned
        foreign: list[str] = []

        busy: list[bool] = []  # (memory: one manager for both: the other's own put passes through)

        def racing(*args: Any, **kwargs: Any) -> str:
            if not busy:
                n = len(foreign)
                foreign.append(f"o{n:03d}")
                busy.append(True)
                try:
                    theirs.put(config("u"), checkpoint(f"o{n:03d}", ["o", n], f"{n + 2}"), {"step": n},
                               {"x": f"{n + 2}"})
                finally:
                    busy.clear()
            return real(*args, **kwargs)

        sm._append_owned = racing
        try:
            mine.put(config("u", "c000"), checkpoint("m000", ["m", 0], "99"), {"step": 9}, {"x": "99"})
        finally:
            sm._append_owned = real
        assert len(foreign) == 6  # (five checked attempts, then the unconditional one)
        assert ids(mine, "u") == sorted(["c000", "m000", *foreign])


# -- own commits that land as replays ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["memory", "fs", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_copy_made_twice_replays_its_entries_and_the_index_settles_after_one_read(where: str, tmp_path: Path) -> None:
    # Attack: copy_thread into a target that holds the copy already: each append names an
    # entry id stored with the same content (a replay, no commit), yet the saver counts each as
    # one of its commits. The target must list the copy once, and after one read derive nothing
    # again (no read of every entry at each read); another instance's put after it is seen.
    with two(where, tmp_path) as (sm, other):
        mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(other)
        put_chain(mine, "src", 2)
        mine.copy_thread("src", "dst")
        mine.copy_thread("src", "dst")
        assert ids(mine, "dst") == ["c000", "c001"]
        calls = counting_entries(sm.service.store)
        for _ in range(2):
            assert x_of(mine.get_tuple(config("dst"))) == ["", 1]
        assert calls == []
        theirs.put(config("dst", "c001"), checkpoint("c002", ["t", 2], "3"), {"step": 2}, {"x": "3"})
        assert x_of(mine.get_tuple(config("dst"))) == ["t", 2]


def test_a_read_only_follower_reading_in_a_thread_while_the_writer_puts_never_goes_back(tmp_path: Path) -> None:
    # Attack (real concurrency): a thread reads the thread through a read-only follower's saver
    # while the writer puts; each read must show a checkpoint no older than the last one it
    # showed, and once the writer is done the newest (a version that did not move with a
    # refresh would keep an index missing the writer's last checkpoint).
    with _writer_and_follower(tmp_path / "d", "h") as (_, writer, reader):
        done = threading.Event()
        seen: list[int] = []
        errors: list[BaseException] = []

        def reads() -> None:
            try:
                while not done.is_set():
                    seen.append(x_of(reader.get_tuple(config("h")))[1])
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=reads)
        t.start()
        saved = config("h")
        try:
            for i in range(1, 16):
                saved = writer.put(saved, checkpoint(f"c{i:03d}", ["w", i], f"{i + 1}"), {"step": i},
                                   {"x": f"{i + 1}"})
                writer.put_writes(saved, [("x", ["w", i, "w"])], f"task-{i}")
        finally:
            done.set()
            t.join()
        assert errors == []
        assert seen == sorted(seen)
        assert x_of(reader.get_tuple(config("h"))) == ["w", 15]
        assert len(ids(reader, "h")) == 16


def test_a_writer_reopened_over_a_log_ending_without_a_newline_keeps_its_index_and_sees_its_fix(
        tmp_path: Path) -> None:
    # Attack: the writable store reopened after the crash above: its saver reads (derives once),
    # reads again (derives nothing), then another saver of it puts (the tail fixed first) and
    # sets the leaf back: the first saver must show the new checkpoint.
    d = tmp_path / "d"
    with session_manager.open(d) as sm:
        put_chain(SessionManagerSaver(sm), "f", 2)
        log = sm.service.store.file_path("f")
    log.write_bytes(log.read_bytes()[:-1])
    with session_manager.open(d) as sm:
        mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(sm)
        assert x_of(mine.get_tuple(config("f"))) == ["", 1]
        calls = counting_entries(sm.service.store)
        assert x_of(mine.get_tuple(config("f"))) == ["", 1] and calls == []
        leaf = sm.service.store.meta_and_leaf("f")[1]
        theirs.put(config("f", "c001"), checkpoint("c002", ["t", 2], "3"), {"step": 2}, {"x": "3"})
        sm.call("session::set-active-leaf", {"session_id": "f", "entry_id": leaf})
        assert ids(mine, "f") == ["c000", "c001", "c002"]
        assert x_of(mine.get_tuple(config("f", "c002"))) == ["t", 2]
