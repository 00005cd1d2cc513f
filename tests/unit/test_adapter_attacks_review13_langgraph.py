"""Attacks on the LangGraph saver's kept data (review 13): the decoded checkpoints and writes a
saver keeps, served while the thread's index is the one they were kept with; the index's token
``created_and_leaf``; sqlite's entry reads as UTF-8 bytes. Two savers over one thread (two
store instances of one sqlite file or one postgres schema; one fs or memory store) where one changes
the thread between the other's reads; callers mutating what a read gave; the session API
revising, erasing or moving the thread under the saver; odd bodies and files; the budget's
bounds; threads reading and writing while the LRU evicts."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")

import session_manager
from session_manager import SessionError
from session_manager.adapters._checkpoints import ROOT_ID
from session_manager.adapters._kept import BASES, MEMO
from session_manager.adapters.langgraph import SessionManagerSaver
from session_manager.store.fs import FsStore
from session_manager.store.memory import MemoryStore
from tests import pg_support
from tests.unit.test_adapter_langgraph import config

WHERE = ["fs", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
ABA_WHERE = ["memory", *WHERE]  # (the ABA attacks: every store the saver keeps a token of)



def checkpoint(checkpoint_id: str, value: Any, version: str) -> Any:
    return {"v": 4, "id": checkpoint_id, "ts": "t", "channel_values": {"x": value, "pad": "p" * 600},
            "channel_versions": {"x": version, "pad": "1"}, "versions_seen": {"n": {"x": version}},
            "updated_channels": None}


def put_chain(saver: SessionManagerSaver, thread: str, count: int, tag: str = "", run: str = "r") -> list[Any]:
    saved, out = config(thread), []
    for i in range(count):
        new = {"x": f"{i + 1}", "pad": "1"} if i == 0 else {"x": f"{i + 1}"}
        saved = saver.put(saved, checkpoint(f"c{i:03d}", [tag, i], f"{i + 1}"), {"step": i, "run_id": run}, new)
        saver.put_writes(saved, [("x", [tag, i, "w"])], f"task-{i}")
        out.append(saved)
    return out


def x_of(found: Any) -> Any:
    assert found is not None
    return found.checkpoint["channel_values"]["x"]


@contextlib.contextmanager
def two(where: str, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """Two session managers over one store's data: two instances of one sqlite file or postgres
    schema (as two processes), or one fs store twice (fs allows one writer process)."""
    with contextlib.ExitStack() as stack:
        if where == "fs":
            sm = stack.enter_context(session_manager.open(tmp_path / "d"))
            yield sm, sm
            return
        if where == "memory":
            sm = stack.enter_context(session_manager.open(store=MemoryStore()))
            yield sm, sm
            return
        if where == "sqlite":
            uri = f"sqlite:///{tmp_path.resolve()}/d.db"
            yield stack.enter_context(session_manager.open(uri)), stack.enter_context(session_manager.open(uri))
            return
        pg_support.require()
        schema = stack.enter_context(pg_support.schema())
        yield (stack.enter_context(session_manager.open(store=pg_support.open_store(schema))),
               stack.enter_context(session_manager.open(store=pg_support.open_store(schema))))


# -- another saver changes the thread between this one's reads --------------------------------


@pytest.mark.parametrize("where", WHERE)
def test_copy_into_a_thread_this_saver_kept_shows_the_copied_checkpoints(where: str, tmp_path: Path) -> None:
    # Attack: the target of another saver's copy_thread was read (and kept) here; the copy
    # appends the source's entries under their own ids, one of them an id this saver kept data
    # for under the target? (never: ids are drawn per entry), and the kept checkpoints must not
    # hide the copied ones, whose checkpoint ids are the same as the target's.
    with two(where, tmp_path) as (sm, other):
        mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(other)
        target = put_chain(mine, "t", 3, "target")
        assert [x_of(mine.get_tuple(c)) for c in target] == [["target", i] for i in range(3)]
        put_chain(theirs, "src", 4, "source")
        theirs.copy_thread("src", "t")
        got = [mine.get_tuple(c) for c in target]
        newest = mine.get_tuple(config("t"))
    # A copied checkpoint put again replaces the target's of the same id (append order).
    assert [x_of(t) for t in got] == [["source", i] for i in range(3)]
    assert x_of(newest) == ["source", 3]
    assert newest is not None and newest.pending_writes == [("task-3", "x", ["source", 3, "w"])]


@pytest.mark.parametrize("where", WHERE)
def test_another_savers_prune_and_delete_for_runs_hide_what_this_saver_kept(where: str, tmp_path: Path) -> None:
    with two(where, tmp_path) as (sm, other):
        mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(other)
        a = put_chain(mine, "a", 3, run="ra")
        b = put_chain(mine, "b", 3, run="rb")
        assert all(mine.get_tuple(c) is not None for c in a + b)  # all kept
        theirs.prune(["a"])
        theirs.delete_for_runs(["rb"])
        after_a = [mine.get_tuple(c) for c in a]
        after_b = [mine.get_tuple(c) for c in b]
        listed = [t.config["configurable"]["checkpoint_id"] for t in mine.list(config("a"))]
        newest_b = mine.get_tuple(config("b"))
    assert [t is not None for t in after_a] == [False, False, True] and listed == ["c002"]
    assert after_b == [None, None, None] and newest_b is None


@pytest.mark.parametrize("where", WHERE)
def test_deleted_and_put_again_with_the_same_ids_between_reads_reads_the_new_values(
        where: str, tmp_path: Path) -> None:
    # Each saver in turn deletes the thread and puts the same checkpoint ids with other values:
    # neither may answer from what it kept of the other's (or its own) earlier thread.
    with two(where, tmp_path) as (sm, other):
        savers = [SessionManagerSaver(sm), SessionManagerSaver(other)]
        seen = []
        for round_ in range(6):
            writer, reader = savers[round_ % 2], savers[1 - round_ % 2]
            writer.delete_thread("d")
            saved = put_chain(writer, "d", 2, f"round{round_}")
            seen.append([x_of(s.get_tuple(c)) for s in (reader, writer) for c in saved])
            seen[-1].append(reader.get_tuple(saved[1]).pending_writes)  # type: ignore[union-attr]
    for round_, got in enumerate(seen):
        tag = f"round{round_}"
        assert got == [[tag, 0], [tag, 1], [tag, 0], [tag, 1], [("task-1", "x", [tag, 1, "w"])]]


# -- callers mutating what a read gave ---------------------------------------------------------


@pytest.mark.parametrize("where", WHERE)
def test_a_caller_mutating_what_a_read_gave_changes_nothing_read_again(where: str, tmp_path: Path) -> None:
    # Attack: the kept data handed out by reference (a checkpoint's fields, its channel values,
    # the metadata, the pending writes' values), so a caller's edit (LangGraph edits the
    # checkpoint it read) shows in the next read.
    with two(where, tmp_path) as (sm, _):
        saver = SessionManagerSaver(sm)
        saved = put_chain(saver, "m", 2)
        for _round in range(2):  # the second round reads what the first one's reads kept
            got = saver.get_tuple(saved[1])
            assert got is not None
            got.checkpoint["channel_values"]["x"].append("mutated")
            got.checkpoint["channel_values"]["pad"] = "changed"
            got.checkpoint["channel_versions"]["x"] = "999"
            got.checkpoint["versions_seen"]["n"]["x"] = "999"
            got.checkpoint["id"] = "other"
            got.metadata["step"] = 99
            got.metadata["extra"] = True
            got.pending_writes[0][2].append("mutated")
            got.pending_writes.clear()
            for listed in saver.list(config("m")):
                listed.checkpoint["channel_values"]["x"].append("listed")
                listed.metadata.clear()
        again = saver.get_tuple(saved[1])
        newest = saver.get_tuple(config("m"))
    assert again is not None and newest is not None and again.checkpoint == newest.checkpoint
    assert again.checkpoint["channel_values"] == {"x": ["", 1], "pad": "p" * 600}
    assert again.checkpoint["channel_versions"] == {"x": "2", "pad": "1"} and again.checkpoint["id"] == "c001"
    assert again.checkpoint["versions_seen"] == {"n": {"x": "2"}}
    assert again.metadata == {"step": 1, "run_id": "r"}
    assert again.pending_writes == [("task-1", "x", ["", 1, "w"])]


def test_a_caller_mutating_the_objects_it_put_changes_nothing_kept(tmp_path: Path) -> None:
    # Attack: a put keeps what it wrote; were it the caller's objects, editing them after the put
    # (LangGraph reuses its dicts) would change what the next read gives.
    with session_manager.open(tmp_path / "d") as sm:
        saver = SessionManagerSaver(sm)
        value = ["a", {"b": [1]}]
        body = checkpoint("c000", value, "1")
        metadata: dict[str, Any] = {"step": 0, "nested": {"k": [1]}}
        saved = saver.put(config("p"), body, metadata, {"x": "1", "pad": "1"})
        writes_value = {"w": [1]}
        saver.put_writes(saved, [("x", writes_value)], "task")
        value[1]["b"].append(2)  # type: ignore[index]
        body["channel_versions"]["x"] = "9"
        body["versions_seen"]["n"]["x"] = "9"
        metadata["nested"]["k"].append(2)
        writes_value["w"].append(2)
        got = saver.get_tuple(saved)
    assert got is not None and got.checkpoint["channel_values"]["x"] == ["a", {"b": [1]}]
    assert got.checkpoint["channel_versions"]["x"] == "1" and got.checkpoint["versions_seen"] == {"n": {"x": "1"}}
    assert got.metadata == {"step": 0, "nested": {"k": [1]}}
    assert got.pending_writes == [("task", "x", {"w": [1]})]


@pytest.mark.parametrize("where", WHERE)
def test_what_the_session_api_gives_of_a_saver_entry_mutated_changes_nothing_kept(
        where: str, tmp_path: Path) -> None:
    # Attack: the store (fs's cache, the memory of an append) and the saver sharing one dict of
    # an entry's data: a caller editing what session::get-message / messages-range gave it would
    # edit the saver's kept checkpoint.
    with two(where, tmp_path) as (sm, _):
        saver = SessionManagerSaver(sm)
        saved = put_chain(saver, "g", 2)
        assert saver.get_tuple(saved[1]) is not None
        store, mutated = sm.service.store, 0
        for entry in store.entries("g"):
            got = sm.call("session::get-message", {"session_id": "g", "entry_id": entry["id"]})
            data = (got.get("entry") or got).get("data") if isinstance(got, dict) else None
            if isinstance(data, dict) and "values" in data:
                for packed in data["values"].values():
                    packed[0] = "mutated"
                data["metadata"] = {"json": {"step": -1}}
                mutated += 1
        again = saver.get_tuple(saved[1])
    assert mutated == 2
    assert again is not None and x_of(again) == ["", 1] and again.metadata == {"step": 1, "run_id": "r"}


# -- the session API under the saver ------------------------------------------------------------


# -- the session API under the saver ------------------------------------------------------------


@pytest.mark.parametrize("where", ABA_WHERE)
def test_a_leaf_set_back_by_another_instance_does_not_hide_its_new_checkpoint(where: str, tmp_path: Path) -> None:
    # Attack (ABA on the index's token): this saver read the thread at (created_at, L); another
    # instance puts a checkpoint (leaf L -> E), then session::set-active-leaf moves the leaf back
    # to L (a viewer switching branches). The token is (created_at, L) again, though the thread
    # holds a checkpoint this saver's index never saw.
    with two(where, tmp_path) as (sm, other):
        mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(other)
        saved = put_chain(theirs, "l", 2)
        assert x_of(mine.get_tuple(config("l"))) == ["", 1]
        leaf = other.call("session::get", {"session_id": "l"})
        leaf_id = leaf.get("active_leaf") or leaf.get("leaf") or other.service.store.meta_and_leaf("l")[1]
        theirs.put(saved[1], checkpoint("c002", ["", 2], "3"), {"step": 2}, {"x": "3"})
        other.call("session::set-active-leaf", {"session_id": "l", "entry_id": leaf_id})
        newest = mine.get_tuple(config("l"))
        listed = [t.config["configurable"]["checkpoint_id"] for t in mine.list(config("l"))]
    assert x_of(newest) == ["", 2]
    assert listed == ["c002", "c001", "c000"]


def active_leaf(sm: Any, thread: str) -> str:
    leaf = sm.service.store.meta_and_leaf(thread)[1]
    assert leaf is not None
    return str(leaf)


# Over postgres the session's version is its row's xmin: an own append names the one it left
# only when it checked the row's xmin (SessionStore.version_left), else the index is derived
# again at the next read (docs/langgraph.md, "A version in the index's token").
OWN_PUT_WHERE = ["memory", "fs", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("where", OWN_PUT_WHERE)
def test_a_leaf_set_back_under_this_savers_own_puts_does_not_hide_the_checkpoint_between(
        where: str, tmp_path: Path) -> None:
    # Attack (ABA under the saver's own writes, which read nothing): this saver puts (its index
    # follows its own leaf L, no read); another instance puts a checkpoint (L -> E) and sets the
    # leaf back to L; this saver puts again: checked at (created_at, L), it lands. Its index must
    # not then take E's absence as current (the session's version after its two commits is not
    # the one its own commits alone would have left).
    with two(where, tmp_path) as (sm, other):
        mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(other)
        saved = put_chain(mine, "u", 2)
        theirs_at = theirs.get_tuple(saved[1])
        assert theirs_at is not None
        leaf = active_leaf(other, "u")
        theirs.put(saved[1], checkpoint("c002", ["t", 2], "3"), {"step": 2}, {"x": "3"})
        other.call("session::set-active-leaf", {"session_id": "u", "entry_id": leaf})
        mine.put(saved[1], checkpoint("c003", ["", 3], "4"), {"step": 3}, {"x": "4"})
        listed = [t.config["configurable"]["checkpoint_id"] for t in mine.list(config("u"))]
        found = mine.get_tuple(config("u", "c002"))
    assert listed == ["c003", "c002", "c001", "c000"]
    assert x_of(found) == ["t", 2]


@pytest.mark.parametrize("where", ABA_WHERE)
def test_a_thread_recreated_in_the_same_millisecond_with_its_leaf_set_back_to_the_root_is_read_again(
        where: str, tmp_path: Path) -> None:
    # Attack (ABA on created_at and the leaf): this saver read the thread at (T, root); another
    # instance deletes it and makes it again within the same millisecond T (a frozen clock here),
    # puts a checkpoint and sets the leaf back to the root entry (its id is fixed). created_at and
    # the leaf are as this saver saw them; the session is another: its old checkpoint must be gone,
    # the new one found.
    with two(where, tmp_path) as (sm, other):
        for manager in (sm, other):
            manager.service.core.clock.now_ms = lambda: 1_700_000_000_000  # type: ignore[method-assign]
        mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(other)
        put_chain(theirs, "z", 1, tag="old")
        other.call("session::set-active-leaf", {"session_id": "z", "entry_id": root_id(other, "z")})
        assert x_of(mine.get_tuple(config("z"))) == ["old", 0]
        theirs.delete_thread("z")
        theirs.put(config("z"), checkpoint("c100", ["new", 1], "1"), {"step": 1}, {"x": "1", "pad": "1"})
        other.call("session::set-active-leaf", {"session_id": "z", "entry_id": root_id(other, "z")})
        newest = mine.get_tuple(config("z"))
        listed = [t.config["configurable"]["checkpoint_id"] for t in mine.list(config("z"))]
    assert x_of(newest) == ["new", 1]
    assert listed == ["c100"]


def test_a_thread_the_fs_cache_dropped_and_loaded_again_keeps_its_index_and_still_sees_an_aba(
        tmp_path: Path) -> None:
    # Prevents: the version in the index's token (fs: the session state's) starting afresh when the
    # store's cache drops the session and loads it again, so every read after an eviction derived
    # the saver's index again from every entry (a log read of every body); and one kept across
    # the eviction hiding a leaf set back meanwhile.
    with session_manager.open(store=FsStore(tmp_path / "d", cache_bytes=1)) as sm:
        store = sm.service.store
        mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(sm)
        put_chain(theirs, "e", 3)
        assert x_of(mine.get_tuple(config("e"))) == ["", 2]
        put_chain(theirs, "other", 2)  # (a budget of one byte: "e" is dropped from the cache)
        assert "e" not in store._d.sessions
        calls: list[str] = []
        real = store.entries_held
        store.entries_held = lambda *a: calls.append("entries") or real(*a)  # type: ignore[method-assign]
        assert x_of(mine.get_tuple(config("e"))) == ["", 2] and calls == []
        leaf = active_leaf(sm, "e")
        theirs.put(config("e", "c002"), checkpoint("c003", ["t", 3], "4"), {"step": 3}, {"x": "4"})
        sm.call("session::set-active-leaf", {"session_id": "e", "entry_id": leaf})
        put_chain(theirs, "other", 2)
        assert x_of(mine.get_tuple(config("e"))) == ["t", 3] and calls == ["entries"]


def root_id(sm: Any, thread: str) -> str:
    assert sm.service.store.get_entry(thread, ROOT_ID) is not None
    return ROOT_ID


# -- sqlite files and bodies -----------------------------------------------------------------------


def test_a_sqlite_file_made_utf16_by_someone_else_is_refused_at_open_nothing_written(tmp_path: Path) -> None:
    # Attack: an empty database file whose text encoding is UTF-16 (its header set so by another
    # program before the store first opened it). The store binds bodies as UTF-8 bytes cast to
    # TEXT and reads them back as bytes: in a UTF-16 file SQLite takes those bytes for UTF-16
    # text (an odd-length body loses its last byte) and gives UTF-16 back, which no JSON decoder
    # reads. The file must be refused (session/storage naming its encoding), nothing written.
    path = tmp_path / "d.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA encoding = 'UTF-16le'")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("DROP TABLE t")
    conn.commit()
    conn.close()
    with pytest.raises(SessionError) as raised:
        session_manager.open(f"sqlite:///{path.resolve()}")
    assert raised.value.code == "session/storage" and "UTF-16" in str(raised.value)
    with pytest.raises(SessionError) as raised:
        session_manager.open(f"sqlite:///{path.resolve()}", read_only=True)
    assert raised.value.code == "session/storage" and "UTF-16" in str(raised.value)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT name FROM sqlite_master").fetchall() == []
    conn.close()


ODD_TEXT = ["nul \x00 inside", "non-BMP \U0001f600 \U00010348", "latin-1 \xe9\xff", "a\u2028b\u2029c",
            "replacement \ufffd", "bom \ufeff first", "\x7f\x80\x9f", "quote \" backslash \\ slash /"]


def test_sqlite_bodies_with_nul_non_bmp_and_control_text_read_back_exactly(tmp_path: Path) -> None:
    # Entry bodies read as UTF-8 bytes (get_entry, entries()) give back every string exactly,
    # through the saver (its values as latin-1 text, its kept data) and the session API.
    uri = f"sqlite:///{tmp_path.resolve()}/d.db"
    with session_manager.open(uri) as sm:
        saver = SessionManagerSaver(sm, cache_bytes=0)
        saved = config("o")
        for i, odd in enumerate(ODD_TEXT):
            saved = saver.put(saved, checkpoint(f"c{i:03d}", odd, f"{i + 1}"), {"step": i, "note": odd},
                              {"x": f"{i + 1}", "pad": "1"})
            sm.call("session::append", {"session_id": "o", "custom": {"custom_type": "note", "data": {"t": odd}}})
    with session_manager.open(uri) as sm:
        saver = SessionManagerSaver(sm)
        got = [saver.get_tuple(config("o", f"c{i:03d}")) for i in range(len(ODD_TEXT))]
        notes = [e["data"]["t"] for e in sm.service.store.entries("o") if e.get("custom_type") == "note"]
        one = [sm.service.store.get_entry("o", e["id"])["data"]["t"] for e in sm.service.store.entries("o")
               if e.get("custom_type") == "note"]
    assert [x_of(t) for t in got] == ODD_TEXT
    # (LangGraph's get_checkpoint_metadata drops NUL from metadata strings, as its own savers store it)
    assert [t.metadata["note"] for t in got if t] == [odd.replace("\x00", "") for odd in ODD_TEXT]
    assert notes == one == ODD_TEXT


def test_a_lone_surrogate_in_a_body_is_refused_or_read_back_never_a_raw_decode_error(tmp_path: Path) -> None:
    # Attack: a lone surrogate (not UTF-8) in a custom entry's data through the session API, then
    # read by get_entry/entries() as bytes: an append refuses it (invalid_request), or it reads back.
    uri = f"sqlite:///{tmp_path.resolve()}/d.db"
    with session_manager.open(uri) as sm:
        sm.call("session::ensure", {"session_id": "u"})
        try:
            sm.call("session::append", {"session_id": "u", "custom": {"custom_type": "n", "data": "a\ud800b"}})
        except SessionError as e:
            assert e.code == "session/invalid_request"
        entries = sm.service.store.entries("u")
        for entry in entries:
            assert sm.service.store.get_entry("u", entry["id"]) == entry


# -- the budget's bounds -------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [0, 1, 511, 2**80])
def test_any_whole_budget_reads_back_every_checkpoint_exactly(tmp_path: Path, budget: int) -> None:
    with session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db") as sm:
        saver = SessionManagerSaver(sm, cache_bytes=budget)
        saved = put_chain(saver, "b", 5)
        got = [saver.get_tuple(c) for c in saved * 2]
        assert saver._kept.total <= budget
    assert [x_of(t) for t in got] == [["", i] for i in range(5)] * 2


@pytest.mark.parametrize("bad", [-1, 1.0, float("inf"), float("nan"), False, "1", 10**3 + 0j])
def test_a_budget_that_is_no_whole_number_of_bytes_is_refused(tmp_path: Path, bad: Any) -> None:
    with session_manager.open(tmp_path / "d") as sm, pytest.raises(SessionError) as raised:
        SessionManagerSaver(sm, cache_bytes=bad)
    assert raised.value.code == "session/invalid_request" and "cache_bytes" in str(raised.value)


# -- concurrency -------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", WHERE)
def test_threads_of_two_savers_writing_and_reading_while_a_small_budget_evicts_read_only_what_was_put(
        where: str, tmp_path: Path) -> None:
    # Four threads: two savers (two store instances over sqlite) each writing its own thread and
    # one shared thread, and reading both threads after each put, while a budget of ~3 entries
    # evicts. Every read must give a checkpoint some writer put whole (its value, its writes),
    # and the newest read of each thread after all writes the last one put.
    with two(where, tmp_path) as (sm, other):
        savers = [SessionManagerSaver(sm, cache_bytes=3000), SessionManagerSaver(other, cache_bytes=3000)]
        problems: list[str] = []
        start = threading.Barrier(4)

        def work(n: int) -> None:
            saver = savers[n % 2]
            own, shared = f"own{n}", "shared"
            start.wait()
            try:
                for i in range(15):
                    for thread in (own, shared):
                        tag = f"{n}:{i}"
                        saved = saver.put(config(thread), checkpoint(f"c{i:03d}-{n}", [tag], f"{i + 1}.{n}"),
                                          {"by": tag}, {"x": f"{i + 1}.{n}", "pad": "1"})
                        saver.put_writes(saved, [("x", ["w", tag])], f"task-{tag}")
                        got = saver.get_tuple(saved)
                        if got is None or x_of(got) != [tag] or got.metadata.get("by") != tag \
                                or got.pending_writes != [(f"task-{tag}", "x", ["w", tag])]:
                            problems.append(f"{thread} {tag}: {got}")
                    for t in saver.list(config(shared), limit=3):
                        by = t.metadata.get("by")
                        if x_of(t) != [by] or t.checkpoint["id"] != f"c{by.split(':')[1].zfill(3)}-{by.split(':')[0]}":
                            problems.append(f"listed {t.checkpoint['id']} {by} {x_of(t)}")
            except Exception as e:  # (reported below)
                problems.append(repr(e))

        workers = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        finals = [SessionManagerSaver(s).get_tuple(config(f"own{n}")) for n, s in enumerate([sm, other] * 2)]
    assert problems == []
    assert [x_of(t) for t in finals] == [[f"{n}:14"] for n in range(4)]


@pytest.mark.parametrize("packed", [False, True])
def test_the_budget_bounds_checkpoints_whose_metadata_is_large(tmp_path: Path, packed: bool) -> None:
    # Attack: a checkpoint's metadata (the run's config keys LangGraph merges in, a caller's own
    # document) counted as nothing in a kept data's size: 20 checkpoints of ~100 KB metadata
    # each, all kept under a 200 KB budget (2 MB held), stored as JSON or packed (a value JSON
    # cannot give back exactly: a tuple).
    with session_manager.open(tmp_path / "d") as sm:
        saver = SessionManagerSaver(sm, cache_bytes=200_000)
        saved = config("big")
        for i in range(20):
            note: Any = ("n" * 100_000, i) if packed else {"note": "n" * 100_000, "i": i}
            saved = saver.put(saved, checkpoint(f"c{i:03d}", i, f"{i + 1}"), {"step": i, "doc": note},
                              {"x": f"{i + 1}", "pad": "1"})
        held = sum(len(orjson.dumps(data)) for (_, entry_id), (_, data, _) in saver._kept._kept.items()
                   if entry_id not in (BASES, MEMO))  # (the bases' and memo's charges: no data of their own)
        got = saver.get_tuple(config("big", "c003"))
    assert held <= 2 * 200_000
    assert got is not None and got.metadata["step"] == 3


def _rounds_writer(uri: str, rounds: int, ready: Any, go: Any) -> None:
    """Another process: deletes the thread and puts it again, each round's values, metadata and
    writes tagged with the round, under the same checkpoint ids."""
    with session_manager.open(uri) as sm:
        saver = SessionManagerSaver(sm)
        put_chain(saver, "p", 3, "r0", run="r0")
        ready.set()
        go.wait(30)  # (the reader reads: the rounds come between its reads)
        for r in range(1, rounds):
            saver.delete_thread("p")
            put_chain(saver, "p", 3, f"r{r}", run=f"r{r}")


def consistent(found: Any) -> str | None:
    """What is wrong with one read of a round-tagged checkpoint (None: nothing): its value, its
    metadata and its writes must all be of one round, and its id the value's index."""
    if found is None:
        return None
    tag, i = x_of(found)
    if found.metadata.get("run_id") != tag or found.checkpoint["id"] != f"c{i:03d}":
        return f"{found.checkpoint['id']} value {tag},{i} metadata {found.metadata}"
    if found.pending_writes not in ([], [(f"task-{i}", "x", [tag, i, "w"])]):
        return f"{found.checkpoint['id']} of {tag} with writes {found.pending_writes}"
    return None


@pytest.mark.parametrize("budget", [0, 2500, 64 << 20])
def test_a_process_deleting_and_putting_again_between_reads_never_mixes_rounds(tmp_path: Path, budget: int) -> None:
    # Real concurrency: another process deletes the thread and puts it again (same checkpoint
    # ids, each round's own values) while this one reads it, newest and by id, through a saver
    # keeping all, a little or nothing. A read may miss (deleted in between) but never give a
    # checkpoint with another round's value, metadata or writes.
    import multiprocessing

    uri = f"sqlite:///{tmp_path.resolve()}/d.db"
    context = multiprocessing.get_context("fork")
    ready, go = context.Event(), context.Event()
    writer = context.Process(target=_rounds_writer, args=(uri, 40, ready, go))
    writer.start()
    problems: list[str] = []
    reads, seen = 0, set[str]()
    try:
        assert ready.wait(30)
        with session_manager.open(uri) as sm:
            saver = SessionManagerSaver(sm, cache_bytes=budget)
            while writer.is_alive() or reads < 50:
                for c in (config("p"), config("p", "c000"), config("p", "c001"), config("p", "c002")):
                    try:
                        found = saver.get_tuple(c)
                    except SessionError as e:  # deleted between the index's read and an entry's
                        if e.code != "session/not_found":
                            problems.append(repr(e))
                        continue
                    reads += 1
                    go.set()
                    if found is not None:
                        seen.add(x_of(found)[0])
                    wrong = consistent(found)
                    if wrong:
                        problems.append(wrong)
    finally:
        writer.join(60)
    assert writer.exitcode == 0
    assert problems == [] and reads >= 50


def test_a_second_saver_of_one_fs_store_deleting_and_putting_again_between_reads_never_mixes_rounds(
        tmp_path: Path) -> None:
    # As the process attack, over fs (one writer process): two savers of one store, the writer
    # on its own thread, the reader keeping a little (evicting every few reads).
    with session_manager.open(tmp_path / "d") as sm:
        theirs, mine = SessionManagerSaver(sm), SessionManagerSaver(sm, cache_bytes=2500)
        put_chain(theirs, "p", 3, "r0", run="r0")
        done = threading.Event()

        def write() -> None:
            try:
                for r in range(1, 30):
                    theirs.delete_thread("p")
                    put_chain(theirs, "p", 3, f"r{r}", run=f"r{r}")
            finally:
                done.set()

        writer = threading.Thread(target=write)
        writer.start()
        problems, seen = [], set()
        while not done.is_set() or not seen:
            for c in (config("p"), config("p", "c000"), config("p", "c002")):
                try:
                    found = mine.get_tuple(c)
                except SessionError as e:
                    if e.code != "session/not_found":
                        problems.append(repr(e))
                    continue
                if found is not None:
                    seen.add(x_of(found)[0])
                wrong = consistent(found)
                if wrong:
                    problems.append(wrong)
        writer.join()
        last = mine.get_tuple(config("p"))
    assert problems == []
    assert x_of(last) == ["r29", 2] and last is not None and last.pending_writes == [("task-2", "x", ["r29", 2, "w"])]
