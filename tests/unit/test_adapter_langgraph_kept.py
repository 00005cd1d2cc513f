"""The LangGraph saver keeps the data of the entries it wrote or read (``_kept``), so a read
of what it holds asks the store only whether the thread moved on; the kept data is never
served for another thread's state (another writer's entries, a deleted and recreated thread)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")

import session_manager
from session_manager import SessionError
from session_manager.adapters.langgraph import SessionManagerSaver
from tests import pg_support
from tests.unit.store_openers import Opener, opener_fixture  # noqa: F401 (the fixture "opener")
from tests.unit.test_adapter_langgraph import config


def checkpoint(checkpoint_id: str, value: Any, version: str) -> Any:
    return {"v": 4, "id": checkpoint_id, "ts": "t", "channel_values": {"x": value, "pad": "p" * 500},
            "channel_versions": {"x": version, "pad": "1"}, "versions_seen": {}, "updated_channels": None}


def put_chain(saver: SessionManagerSaver, thread: str, count: int, tag: str = "") -> list[Any]:
    saved, out = config(thread), []
    for i in range(count):
        new = {"x": f"{i + 1}", "pad": "1"} if i == 0 else {"x": f"{i + 1}"}
        saved = saver.put(saved, checkpoint(f"c{i:03d}", [tag, i], f"{i + 1}"), {"step": i}, new)
        saver.put_writes(saved, [("x", [tag, i, "w"])], f"task-{i}")
        out.append(saved)
    return out


def spy(store: Any, names: tuple[str, ...]) -> list[str]:
    calls: list[str] = []
    for name in names:
        real = getattr(store, name)
        setattr(store, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    return calls


def test_reading_what_this_saver_wrote_asks_the_store_only_whether_the_thread_moved_on(opener: Opener) -> None:
    # Prevents: every get_tuple fetching and decoding again, statement by statement over a SQL
    # store, the checkpoint entry, the entries holding its channel values and its writes, which
    # this saver wrote (or read) itself and which never change once written: over sqlite that
    # was 2-3 statements and as many JSON decodes more than a read over fs.
    with opener() as sm:
        saver = SessionManagerSaver(sm)
        saved = put_chain(saver, "k", 6)
        calls = spy(sm.service.store, ("session_token", "entry_held", "entries_held", "get_meta", "path"))
        newest = saver.get_tuple(config("k"))
        by_id = saver.get_tuple(saved[2])
        listed = list(saver.list(config("k")))
    assert calls == ["session_token"] * 3
    assert newest is not None and newest.checkpoint["channel_values"] == {"x": ["", 5], "pad": "p" * 500}
    assert newest.pending_writes == [("task-5", "x", ["", 5, "w"])] and newest.metadata == {"step": 5}
    assert by_id is not None and by_id.checkpoint["channel_values"]["x"] == ["", 2]
    assert by_id.pending_writes == [("task-2", "x", ["", 2, "w"])]
    assert [t.checkpoint["channel_values"]["x"] for t in listed] == [["", i] for i in range(5, -1, -1)]


def test_a_thread_read_once_is_read_again_without_fetching_its_entries(opener: Opener) -> None:
    # Prevents: a reader (another process's saver, or this one after a restart) fetching the same
    # entries again at every read of a thread nobody wrote to since.
    with opener() as sm:
        put_chain(SessionManagerSaver(sm), "r", 3)
    with opener() as sm:
        saver = SessionManagerSaver(sm)
        first = saver.get_tuple(config("r"))
        calls = spy(sm.service.store, ("session_token", "entry_held", "entries_held"))
        again = saver.get_tuple(config("r"))
    assert calls == ["session_token"]
    assert first is not None and again is not None and again.checkpoint == first.checkpoint
    assert again.pending_writes == first.pending_writes == [("task-2", "x", ["", 2, "w"])]


@pytest.mark.parametrize("where", ["fs", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_kept_data_is_never_served_after_another_instance_wrote_or_recreated_the_thread(
        where: str, tmp_path: Path) -> None:
    # Prevents: the kept data answering for a thread another instance (a process) changed since:
    # its new checkpoint and writes must show at the next read, and a thread it deleted and
    # wrote again under the same checkpoint ids must read back with the new values.
    with contextlib.ExitStack() as stack:
        if where == "fs":
            sm = stack.enter_context(session_manager.open(tmp_path / "d"))
            other = sm
        elif where == "sqlite":
            uri = f"sqlite:///{tmp_path.resolve()}/d.db"
            sm = stack.enter_context(session_manager.open(uri))
            other = stack.enter_context(session_manager.open(uri))
        else:
            schema = stack.enter_context(pg_support.schema())
            sm = stack.enter_context(session_manager.open(store=pg_support.open_store(schema)))
            other = stack.enter_context(session_manager.open(store=pg_support.open_store(schema)))
        mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(other)
        saved = put_chain(mine, "s", 3, "mine")
        assert [mine.get_tuple(c) is not None for c in saved] == [True] * 3  # all kept now
        theirs.put_writes(saved[2], [("x", "theirs")], "their-task")
        with_theirs = mine.get_tuple(saved[2])
        theirs.delete_thread("s")
        assert mine.get_tuple(saved[1]) is None
        put_chain(theirs, "s", 3, "again")  # the same checkpoint ids, other values
        newest, by_id = mine.get_tuple(config("s")), mine.get_tuple(saved[1])
    assert with_theirs is not None
    assert with_theirs.pending_writes == [("task-2", "x", ["mine", 2, "w"]), ("their-task", "x", "theirs")]
    assert newest is not None and newest.checkpoint["channel_values"]["x"] == ["again", 2]
    assert newest.pending_writes == [("task-2", "x", ["again", 2, "w"])]
    assert by_id is not None and by_id.checkpoint["channel_values"]["x"] == ["again", 1]


def test_the_kept_data_stays_within_its_byte_budget_and_what_it_dropped_is_read_again(opener: Opener) -> None:
    # Prevents: the saver keeping every entry it ever wrote or read (a long thread's every
    # checkpoint, across up to 1,024 threads) in memory: past the budget (``cache_bytes``) the
    # least recently used data is dropped, and read from the store again when wanted.
    with opener() as sm:
        saver = SessionManagerSaver(sm, cache_bytes=6000)
        saved = put_chain(saver, "b", 12)
        assert saver._kept.total <= 6000
        calls = spy(sm.service.store, ("entry_held",))
        got = [saver.get_tuple(c) for c in saved]
        assert saver._kept.total <= 6000
    assert calls  # the oldest were dropped and read again
    assert [t.checkpoint["channel_values"]["x"] for t in got if t] == [["", i] for i in range(12)]
    assert [t.pending_writes for t in got if t] == [[(f"task-{i}", "x", ["", i, "w"])] for i in range(12)]


def test_cache_bytes_0_keeps_nothing_and_every_read_fetches_what_it_gives(opener: Opener) -> None:
    # Prevents: a saver asked to keep nothing (memory-bound hosts) keeping data anyway, or its
    # reads then missing values: each read fetches the checkpoint, its holder and its writes.
    with opener() as sm:
        saver = SessionManagerSaver(sm, cache_bytes=0)
        saved = put_chain(saver, "z", 3)
        calls = spy(sm.service.store, ("entry_held",))
        got = saver.get_tuple(saved[1])
        assert saver._kept.total == 0
    assert calls == ["entry_held"] * 3  # the checkpoint, the first one (holding "pad"), the writes
    assert got is not None and got.checkpoint["channel_values"] == {"x": ["", 1], "pad": "p" * 500}
    assert got.pending_writes == [("task-1", "x", ["", 1, "w"])]


def test_a_thread_derived_again_is_read_from_the_entries_its_derivation_read(tmp_path: Path) -> None:
    # Prevents: a reader whose index another instance's write made stale (a process reading what
    # another writes) reading every entry of the thread to derive it again, then fetching the
    # checkpoint, its value holders and its writes again, one statement and decode each.
    uri = f"sqlite:///{tmp_path.resolve()}/d.db"
    with session_manager.open(uri) as sm, session_manager.open(uri) as other:
        mine, theirs = SessionManagerSaver(sm), SessionManagerSaver(other)
        saved = put_chain(theirs, "d", 4)
        calls = spy(sm.service.store, ("session_token", "entry_held", "entries_held"))
        got = [mine.get_tuple(config("d")), *(mine.get_tuple(c) for c in saved)]
    assert calls == ["session_token", "entries_held"] + ["session_token"] * 4
    assert [t.checkpoint["channel_values"]["x"] for t in got if t] == [["", 3]] + [["", i] for i in range(4)]
    assert [t.pending_writes for t in got if t][1:] == [[(f"task-{i}", "x", ["", i, "w"])] for i in range(4)]


@pytest.mark.parametrize("bad", [-1, 1.5, "64", True, None])
def test_a_bad_cache_bytes_is_a_clear_error(tmp_path: Path, bad: Any) -> None:
    # Prevents: a negative, fractional or mistyped budget accepted (and a budget of True keeping one byte).
    with session_manager.open(tmp_path / "d") as sm, pytest.raises(SessionError) as raised:
        SessionManagerSaver(sm, cache_bytes=bad)
    assert raised.value.code == "session/invalid_request" and "cache_bytes" in str(raised.value)


def test_writes_are_kept_at_their_encoded_size_and_a_derivation_at_the_walked_one(tmp_path: Path) -> None:
    # Prevents: a put_writes walking its own data again to size what it keeps (issue 29): the JSON
    # it made for the store gives the size (a put adds its size up from its parts: the test below).
    # And the sizes apart: an index derived again sizes what it decoded by the walk, never by a
    # JSON it does not have, and every size stays within budget.
    from session_manager.adapters._kept import BASES, MEMO, OVERHEAD, footprint

    with session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db") as sm:
        saver = SessionManagerSaver(sm)
        saved = put_chain(saver, "k", 3)
        entries = [e for e in sm.service.store.entries("k") if e["custom_type"] != "langgraph.root"]
        kept = dict(saver._kept._kept)
        bases = kept.pop(("k", BASES))  # (the thread's delta bases, charged to the same budget)
        memo = kept.pop(("k", MEMO), (None, None, 0))  # (and its serializer memo, when it holds a list)
        assert len(entries) == 6 and set(kept) == {("k", e["id"]) for e in entries}
        for entry in entries:
            encoded = orjson.dumps(entry["data"])
            size = kept[("k", entry["id"])][2]
            if entry["custom_type"] == "langgraph.checkpoint":
                assert size == footprint(entry["data"])
            else:
                assert size == OVERHEAD + len(encoded) == footprint(entry["data"], encoded)
            assert footprint(entry["data"], encoded) >= footprint(entry["data"])  # (JSON: the texts and more)
        assert saver._kept.total == sum(size for _, _, size in kept.values()) + bases[2] + memo[2]
        other = SessionManagerSaver(sm)  # derives its index: sizes what it decoded by the walk
        assert other.get_tuple(saved[1]) is not None
        sized = {k: v[2] for k, v in other._kept._kept.items() if k[1] not in (BASES, MEMO)}
    assert sized == {("k", e["id"]): footprint(e["data"]) for e in entries}


def test_a_put_charges_the_kept_budget_what_footprint_counts_of_its_data(tmp_path: Path) -> None:
    # Prevents: a put charging the kept budget another size than footprint() gives its data
    # (a put adds the size up from the parts it made, not by walking the data again): a cache
    # over or under its budget. Each part's branch: a whole value, a delta of one, an empty
    # channel, a body and metadata as JSON (non-ASCII text: its JSON's length in characters and
    # bytes differ), a packed body (a tuple), packed metadata (a set JSON refuses; a NaN it changes).
    from session_manager.adapters._kept import footprint

    with session_manager.open(tmp_path / "d") as sm:
        saver = SessionManagerSaver(sm)
        saved = config("f")
        history: list[Any] = [{"role": "system", "text": "s" * 2000}]
        puts = [({}, {"step": 0}), ({}, {"step": 1, "note": "é" * 40}), ({"odd": (1, 2)}, {"step": 2}),
                ({}, {"step": 3, "tags": {"a", "b"}}), ({}, {"step": 4, "nan": float("nan")})]
        for i, (extra, metadata) in enumerate(puts):
            history.append({"role": "user", "text": f"message {i} " + "x" * 400})
            cp = {"v": 4, "id": f"c{i:03d}", "ts": "t", "channel_values": {"m": list(history), "n": i},
                  "channel_versions": {"m": f"{i + 1}", "n": f"{i + 1}", "gone": "1"}, "versions_seen": {},
                  "updated_channels": None, **extra}
            new = {"m": f"{i + 1}", "n": f"{i + 1}"} if i else {"m": "1", "n": "1", "gone": "1"}
            saved = saver.put(saved, cp, metadata, new)
        index = saver._indexes["f"]
        kinds = []
        for (_, checkpoint_id), entry_id in sorted(index.checkpoints.items()):
            _epoch, data, size = saver._kept._kept[("f", entry_id)]
            assert size == footprint(data), checkpoint_id
            kinds.append((sorted(data["checkpoint"]), sorted(data["metadata"]),
                          sorted(len(v) for v in data["values"].values())))
    assert kinds == [(["text"], ["json"], [3, 3, 3]), (["text"], ["json"], [3, 7]), (["packed"], ["json"], [3, 7]),
                     (["text"], ["packed"], [3, 3]), (["text"], ["packed"], [3, 7])]
