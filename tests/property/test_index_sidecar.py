"""The index sidecar is a cache of replay, never a second truth.

Whatever happens to the sidecar (deleted, truncated, any byte flipped) and
whatever is appended to the log behind its back (whole records, garbage, a
torn tail), loading through it yields exactly the state a whole replay of
the log yields, and the state it reports as covered is a clean boundary.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from session_manager.store import Commit
from session_manager.store._core.state import SessionState
from session_manager.store.fs._fileops import pread_file
from session_manager.store.fs._records import committed_records, encode_commit
from session_manager.store.fs._sidecar import Loaded, index_path, load, save
from session_manager.testing.contract import message, meta

SID = "s_1"


def oracle(raw: bytes) -> dict[str, Any]:
    """The replay rule itself, over plain dicts: what any load must equal."""
    state = SessionState()
    for record in committed_records(raw.split(b"\n"), SID, lambda n, w: None):
        state.apply_record(record)
    return snapshot(state)


def snapshot(state: SessionState) -> dict[str, Any]:
    entries = {eid: state.entries[eid] for eid in state.entries}
    return {
        "meta": state.meta,
        "leaf": state.leaf,
        "order": list(state.entries),
        "entries": entries,
        "path": [e["id"] for e in state.path(state.leaf)],
    }


def base_log() -> bytes:
    """A log with appends, a streamed update, a branch and a leaf move."""
    commits = [
        Commit(meta=meta(SID)),
        Commit(entries=(message("e_1", None),), leaf="e_1", meta=meta(SID, message_count=1)),
        Commit(entries=(message("e_2", "e_1"),), leaf="e_2", meta=meta(SID, message_count=2)),
        Commit(entries=(message("e_3", "e_2"),), leaf="e_3", meta=meta(SID, message_count=3)),
        Commit(entries=({**message("e_3", "e_2", "streamed"), "revision": 1},), meta=meta(SID, message_count=3)),
        Commit(entries=(message("e_4", "e_1", "branch"),), leaf="e_4", meta=meta(SID, message_count=4)),
        Commit(leaf="e_3", meta=meta(SID, message_count=4, title="moved")),
    ]
    return b"".join(encode_commit(c) for c in commits)


_SPLIT = encode_commit(Commit(entries=(message("e_6", "e_1"), message("e_7", "e_6")), leaf="e_4",
                              meta=meta(SID, message_count=6)))
_CUT = _SPLIT.index(b"\n") + 1
TORN = b'{"type":"entry","entry":{"id":"e_9"'  # a torn line

TAILS = [
    _SPLIT[:_CUT],  # the first line of a multi-line commit ...
    _SPLIT[_CUT:],  # ... and the rest of it, appended later

    encode_commit(Commit(entries=(message("e_5", "e_3"),), leaf="e_5", meta=meta(SID, message_count=5))),
    encode_commit(Commit(entries=(message("e_2", "e_1", "edited"),), meta=meta(SID, message_count=5))),
    encode_commit(Commit(leaf="e_4", meta=meta(SID, message_count=5)))[:-7],  # a torn multi-line commit
    TORN,
    b"not json at all\n",
    b"\n",
    encode_commit(Commit(meta=meta(SID, title="renamed")))[:-1],  # valid, unterminated
]


def write_loaded_index(folder: Path, raw: bytes) -> tuple[str, Path, Loaded]:
    log_path = folder / f"{SID}.jsonl"
    log_path.write_bytes(raw)
    idx = Path(index_path(folder, SID))
    loaded = load(str(log_path), str(idx), SID, pread_file(str(log_path)))
    assert save(str(log_path), str(idx), SID, loaded.state, loaded.entries, loaded.covered)
    return str(log_path), idx, loaded


def reload(log_path: str, idx: Path) -> Loaded:
    return load(log_path, str(idx), SID, pread_file(log_path))


def test_a_log_without_an_index_loads_and_gains_one(tmp_path: Path) -> None:
    # Prevents: a reference-written data_dir (no sidecar) failing to open or never getting an index.
    raw = base_log()
    log_path, idx, first = write_loaded_index(tmp_path, raw)
    assert not first.from_index and first.covered == len(raw) and first.tail_fix is None
    assert snapshot(first.state) == oracle(raw)
    assert idx.exists() and (tmp_path / f"{SID}.jsonl").read_bytes() == raw  # the log is untouched
    again = reload(log_path, idx)
    assert again.from_index and again.index_current
    assert snapshot(again.state) == oracle(raw)
    assert sorted(os.listdir(tmp_path)) == [".index", f"{SID}.jsonl"]  # only *.jsonl beside the logs


def test_bodies_are_read_on_demand_and_match(tmp_path: Path) -> None:
    # Prevents: a lazily read body differing from the replayed one (wrong offset, stale revision).
    raw = base_log()
    log_path, idx, _ = write_loaded_index(tmp_path, raw)
    loaded = reload(log_path, idx)
    assert loaded.entries.body_bytes == 0  # nothing decoded yet
    assert loaded.entries["e_3"]["message"]["content"][0]["text"] == "streamed"
    assert loaded.entries.body_bytes > 0
    assert snapshot(loaded.state) == oracle(raw)


def test_an_index_of_another_log_is_ignored(tmp_path: Path) -> None:
    # Prevents: a log rewritten (new inode, same size) being read through the old log's offsets.
    raw = base_log()
    log_path, idx, _ = write_loaded_index(tmp_path, raw)
    other = raw.replace(b'"streamed"', b'"rewrote!"')
    tmp = Path(log_path + ".new")
    tmp.write_bytes(other)
    os.replace(tmp, log_path)
    loaded = reload(log_path, idx)
    assert not loaded.from_index
    assert snapshot(loaded.state) == oracle(other)


def test_a_read_only_load_never_writes(tmp_path: Path) -> None:
    # Prevents: a load (the read-only path) creating or repairing files.
    raw = base_log() + TORN
    log_path = tmp_path / f"{SID}.jsonl"
    log_path.write_bytes(raw)
    before = sorted(os.listdir(tmp_path))
    loaded = load(str(log_path), index_path(tmp_path, SID), SID, pread_file(str(log_path)))
    assert sorted(os.listdir(tmp_path)) == before and log_path.read_bytes() == raw
    assert loaded.tail_fix == len(base_log())  # the torn line is left for the writer to cut
    assert snapshot(loaded.state) == oracle(raw)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_damaged_index_never_changes_the_state(data: st.DataObject) -> None:
    # Prevents: a flipped or truncated sidecar byte being trusted (wrong leaf, entries, meta).
    raw = base_log()
    with tempfile.TemporaryDirectory() as folder:
        log_path, idx, _ = write_loaded_index(Path(folder), raw)
        good = idx.read_bytes()
        how = data.draw(st.sampled_from(["flip", "truncate", "delete", "extend"]))
        if how == "flip":
            at = data.draw(st.integers(0, len(good) - 1))
            bit = data.draw(st.integers(0, 7))
            idx.write_bytes(good[:at] + bytes([good[at] ^ (1 << bit)]) + good[at + 1 :])
        elif how == "truncate":
            idx.write_bytes(good[: data.draw(st.integers(0, len(good) - 1))])
        elif how == "delete":
            idx.unlink()
        else:
            idx.write_bytes(good + data.draw(st.binary(min_size=1, max_size=20)))
        loaded = reload(log_path, idx)
        assert snapshot(loaded.state) == oracle(raw)
        assert Path(log_path).read_bytes() == raw


@settings(max_examples=150, deadline=None)
@given(
    before=st.lists(st.sampled_from(TAILS), max_size=3),
    after=st.lists(st.sampled_from(TAILS), min_size=1, max_size=4),
)
@example(before=[_SPLIT[:_CUT]], after=[_SPLIT[_CUT:]])  # a commit left open across the index
@example(before=[TAILS[-1]], after=[TAILS[2]])  # a valid unterminated line, then glued bytes
def test_appends_behind_the_index_replay_on_top(before: list[bytes], after: list[bytes]) -> None:
    # Prevents: bytes written after the index (a crash before its rewrite, another writer) lost or doubled.
    raw = base_log() + b"".join(before)
    with tempfile.TemporaryDirectory() as folder:
        log_path, idx, first = write_loaded_index(Path(folder), raw)
        assert snapshot(first.state) == oracle(raw)
        grown = raw + b"".join(after)
        Path(log_path).write_bytes(grown)  # same inode, more bytes
        loaded = reload(log_path, idx)
        assert snapshot(loaded.state) == oracle(grown)
        # And an index saved from that state resumes correctly too.
        assert save(log_path, str(idx), SID, loaded.state, loaded.entries, loaded.covered)
        assert snapshot(reload(log_path, idx).state) == oracle(grown)


# -- the packed layout (v3): ids read lazily, lookups without the position map --------

# Ids the blob must carry exactly: a "\n" inside one (no split, no scan), non-ASCII,
# an id that is a prefix or a suffix of another (a scan must match whole ids only).
ID_CHARS = st.sampled_from(["a", "b", "é", "\n", "_", "1", "😀"])
IDS = st.text(ID_CHARS, min_size=1, max_size=4)


@st.composite
def histories(draw: st.DrawFn) -> bytes:
    """A log of appends (parents on any branch, or naming no stored entry),
    updates of stored entries and leaf moves, over drawn ids."""
    ids = draw(st.lists(IDS, min_size=0, max_size=8, unique=True))
    commits = [Commit(meta=meta(SID))]
    stored: list[str] = []
    for n, eid in enumerate(ids):
        parent = draw(st.sampled_from([None, "missing", *stored]))
        commits.append(Commit(entries=(message(eid, parent, f"t{n}"),), leaf=eid, meta=meta(SID, message_count=n + 1)))
        stored.append(eid)
        if draw(st.booleans()):
            again = draw(st.sampled_from(stored))
            commits.append(Commit(entries=({**message(again, parent if again == eid else None, "edit"),
                                            "revision": 1},), meta=meta(SID, message_count=n + 1)))
        if draw(st.booleans()):
            commits.append(Commit(leaf=draw(st.sampled_from(stored)), meta=meta(SID, message_count=n + 1)))
    return b"".join(encode_commit(c) for c in commits)


def lookups(state: SessionState, probes: list[str]) -> list[Any]:
    """What by-id and by-position reads answer (before anything lists the ids)."""
    path = state.path(state.leaf)
    out: list[Any] = [state.leaf, len(path), path.leaf]
    for probe in probes:
        out.append((probe in state.entries, state.entries.get(probe), path.index_of(probe)))
    out.extend(path[i]["id"] for i in range(len(path)))
    return out


@settings(max_examples=200, deadline=None)
@given(raw=histories(), extra=st.lists(IDS, max_size=3), data=st.data())
def test_a_packed_index_answers_what_a_replay_answers(raw: bytes, extra: list[str], data: st.DataObject) -> None:
    # Prevents: the lazily read ids, the blob scan or the position walk answering differently from a
    # replay (a substring taken for an id, a "\n" inside an id, an orphan's path, an empty session).
    with tempfile.TemporaryDirectory() as folder:
        log_path, idx, first = write_loaded_index(Path(folder), raw)
        plain = SessionState()
        for record in committed_records(raw.split(b"\n"), SID, lambda n, w: None):
            plain.apply_record(record)
        probes = [*plain.entries, *extra, "missing", ""]
        probes = data.draw(st.permutations(probes))
        loaded = reload(log_path, idx)
        assert loaded.from_index
        assert lookups(loaded.state, probes) == lookups(plain, probes)
        assert loaded.entries.live_bytes() == first.entries.live_bytes()  # kept in the header
        assert snapshot(loaded.state) == oracle(raw)
        # The map built once lookups are many, and paths of every stored entry.
        again = reload(log_path, idx).state
        for probe in probes * 3:
            assert (probe in again.entries) == (probe in plain.entries)
        for eid in plain.entries:
            assert [e["id"] for e in again.path(eid)] == [e["id"] for e in plain.path(eid)]


@settings(max_examples=100, deadline=None)
@given(raw=histories(), data=st.data())
def test_a_damaged_packed_index_never_changes_the_state(raw: bytes, data: st.DataObject) -> None:
    # Prevents: a flipped or cut byte in any section of the packed layout (arrays, bounds, id blob)
    # being trusted, for any mix of ids, including a session with no entries.
    with tempfile.TemporaryDirectory() as folder:
        log_path, idx, _ = write_loaded_index(Path(folder), raw)
        good = idx.read_bytes()
        at = data.draw(st.integers(0, len(good) - 1))
        if data.draw(st.booleans()):
            idx.write_bytes(good[:at] + bytes([good[at] ^ (1 << data.draw(st.integers(0, 7)))]) + good[at + 1 :])
        else:
            idx.write_bytes(good[:at])
        loaded = reload(log_path, idx)
        assert not loaded.from_index
        assert snapshot(loaded.state) == oracle(raw)


def test_an_index_of_the_previous_layout_is_rebuilt(tmp_path: Path) -> None:
    # Prevents: a version-2 sidecar (ids as a JSON list) misread by the packed decoder.
    raw = base_log()
    log_path, idx, _ = write_loaded_index(tmp_path, raw)
    good = idx.read_bytes()
    idx.write_bytes(b"SMIDX2\n" + good[len(b"SMIDX3\n") :])
    loaded = reload(log_path, idx)
    assert not loaded.from_index and snapshot(loaded.state) == oracle(raw)
