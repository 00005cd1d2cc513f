"""A commit encoded from its pieces is encode_commit's bytes, with the sizes compaction charges."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from session_manager.store.base import Commit
from session_manager.store.fs._records import committed_records, encode_commit, meta_size, snapshot_size
from session_manager.store.fs._sizes import encode_sized
from session_manager.testing.contract import message
from session_manager.testing.contract import meta as session_meta

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    # Lone surrogates too: orjson refuses them, so the general encoder decides.
    | st.text(max_size=4) | st.sampled_from(["\ud800", "ü☃", "\n\"\\"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6)


@st.composite
def commits(draw: st.DrawFn) -> Commit:
    n = draw(st.integers(0, 3))
    entries = tuple({"kind": "message", "id": f"e_{i}", "parent_id": None, "timestamp": 1, "revision": 0,
                     "message": draw(values)} for i in range(n))
    meta: dict[str, Any] | None = draw(st.none() | st.fixed_dictionaries(
        {"session_id": st.just("s"), "title": st.text(max_size=3), "metadata": values, "message_count": st.just(n)}))
    leaf = draw(st.sampled_from([None, "elsewhere", *(e["id"] for e in entries)]))
    return Commit(entries=entries, leaf=leaf, meta=meta, tx=lambda: "t_1")


@settings(max_examples=300, deadline=None)
@given(commits())
def test_the_pieces_make_encode_commits_bytes_and_sizes(commit: Commit) -> None:
    # Prevents: an append line put together from pieces differing by a byte from the one encode_commit writes,
    # or compaction accounting drifting from the sizes it charged before (compacting too early or never).
    try:
        expected: Any = encode_commit(commit)
    except Exception as e:
        expected = type(e)
    try:
        got: Any = encode_sized(commit)
    except Exception as e:
        assert type(e) is expected
        return
    data, (entry_sizes, meta_bytes) = got
    assert data == expected
    assert entry_sizes == tuple(snapshot_size(e) for e in commit.entries)
    assert meta_bytes == (None if commit.meta is None else meta_size(commit.meta))


@settings(max_examples=200, deadline=None)
@given(values, st.sampled_from(["s", "ü☃", "\x00\xff\u00e9\n\"\\"]), st.booleans())
def test_an_append_whose_data_json_is_handed_on_writes_the_same_bytes(data: Any, text: str, chained: bool) -> None:
    # Prevents: the typed append's data JSON, spliced into the entry line (Commit.data_json, so the
    # data is not encoded twice), making a line that differs by a byte from the one encode_commit
    # writes, or sizes that differ from the ones compaction charged before.
    import orjson

    data = {"values": [["1", "msgpack", text]], "doc": data}
    try:
        data_json = orjson.dumps(data)
    except TypeError:  # (the typed append refuses what orjson cannot encode before any commit)
        return
    entry = {"kind": "custom", "id": "e_1", "parent_id": "e_0" if chained else None, "timestamp": 1,
             "revision": 0, "custom_type": "langgraph.checkpoint", "data": data}
    meta = session_meta("s", message_count=1)
    plain = Commit(entries=(entry,), leaf="e_1", meta=meta, append=True)
    spliced = Commit(entries=(entry,), leaf="e_1", meta=meta, append=True, data_json=data_json)
    written, (entry_sizes, meta_bytes) = encode_sized(spliced)
    assert written == encode_sized(plain)[0] == encode_commit(plain)
    assert entry_sizes == (snapshot_size(entry),) and meta_bytes == meta_size(meta)


def test_an_update_draws_its_commit_id_once_and_replays_whole() -> None:
    # Prevents: the update shape (entries and a meta, no leaf) drawing a second commit id, or its
    # lines not sharing one (replay would leave the update out as an incomplete commit).
    drawn: list[str] = []

    def tx() -> str:
        drawn.append(f"t_{len(drawn)}")
        return drawn[-1]

    entry, meta = message("e_1", None, "tok tok", revision=3), session_meta("s", message_count=1)
    data, _ = encode_sized(Commit(entries=(entry,), meta=meta, tx=tx))
    assert drawn == ["t_0"]
    assert list(committed_records(data.splitlines(), "s", _no_skip)) == [
        {"type": "entry", "entry": entry, "tx": "t_0"}, {"type": "meta", "meta": meta, "tx": "t_0", "tx_n": 2}]


def _no_skip(number: int, why: str) -> None:
    raise AssertionError(f"line {number}: {why}")
