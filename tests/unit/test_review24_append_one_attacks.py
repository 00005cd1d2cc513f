"""Review 24: the fs store's single-entry append (``FsStore._append_one``) attacked against the
general commit it stands in for. Each test runs the same script with the fast path on and with
it forced off (``_append_one`` answering ``None``, as when orjson cannot encode: the general way
decides) and asks for the same answers, log bytes, state, budget and read-back after a reopen:
random histories of appends, forks, edits, leaf moves, compactions, evictions, deletes and
reopens; write faults (ENOSPC, a short write, a failing fsync, a failed group fsync); a torn
log tail; a rewrite in flight while appends land; many threads over several sessions."""

from __future__ import annotations

import errno
import itertools
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import session_manager
from session_manager._wire.events import ON_MESSAGE_ADDED
from session_manager.errors import SessionError
from session_manager.store import FsStore
from session_manager.store.base import Commit, append_commit
from session_manager.store.fs import _background
from session_manager.testing.contract import custom, message, meta

SID = "s"


def _tx() -> str:
    return "tx000001"  # a fixed commit id: multi-line records compare byte for byte


def _general(store: FsStore) -> None:
    """Every commit of ``store`` the general way."""
    store._append_one = lambda *args: None  # type: ignore[method-assign, assignment]


def _log_and_reopened(where: Path, log: Path) -> list[Any]:
    """The closed store's log bytes and what a store reopened over them reads back."""
    reopened = FsStore(where)
    try:
        return [log.read_bytes(), _read_back(reopened)]
    finally:
        reopened.close()


def _read_back(store: FsStore) -> tuple[Any, ...]:
    return store.get_meta(SID), store.get_leaf(SID), sorted((e["id"], repr(e)) for e in store.entries(SID))


def _accounts(store: FsStore) -> tuple[Any, ...]:
    """What a commit leaves besides the log: state version and leaf, budget, index coverage, cache."""
    state: Any = store._current_state(SID)
    try:
        budget = store._d.budgets.get(SID)
        return (None if budget is None else (budget.disk, budget.live, budget.meta, dict(budget.entries)),
                state.writes, state.leaf, store._d.files.files(SID).covered,
                store._d.sessions._charges.get(SID), store._d.sessions.total)
    finally:
        state.lock.release()


# -- random histories -------------------------------------------------------------------------

_DATA: dict[str, Any] = {"plain": {"a": 1}, "bigint": {"n": 2**70}, "surrogate": {"s": "\ud800x"},
                         "unicode": {"s": "h\u00e9\U0001f600"}, "list": [1, 2.5, None]}
_OPS = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(["chain", "named", "root", "missing", "dup", "leaf"]),
              st.booleans(), st.sampled_from(sorted(_DATA)),
              st.sampled_from(["fresh", "stale", "expect", "expect_stale"])),
    st.tuples(st.just("many"), st.booleans()),
    st.tuples(st.just("edit"), st.integers(0, 30)),
    st.tuples(st.just("move"), st.integers(0, 30)),
    st.tuples(st.just("compact")),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("cache"), st.sampled_from([1, 10**8])),
    st.tuples(st.just("delete")),
)


def _step(store: FsStore, op: tuple[Any, ...], known: list[str], new_id: Callable[[], str], seen: list[Any]) -> Any:
    kind, current = op[0], store.get_meta(SID)
    assert current is not None
    if kind == "append":
        _, where, is_message, data, decided = op
        entry_id = known[0] if where == "dup" and known else new_id()
        leaf = store.get_leaf(SID)
        parent = {"named": known[len(known) // 2] if known else None, "root": None, "missing": "gone"}.get(where, leaf)
        entry = message(entry_id, parent, "t\u00e9") if is_message else custom(entry_id, parent, _DATA[data])
        base = seen[0] if decided == "stale" and seen else current
        expect: Any = {"expect": current, "expect_stale": seen[0] if seen else current}.get(decided)
        commit = (append_commit(base, (entry,), chain=where == "chain", tx=_tx) if expect is None else
                  append_commit(base, (entry,), chain=where == "chain", tx=_tx, expect_meta=expect))
        applied = store.commit(SID, commit)
        known.append(entry_id)
        return applied.entries, applied.leaf, applied.meta
    if kind == "many":
        first, second = new_id(), new_id()
        applied = store.commit(SID, append_commit(current, (message(first, store.get_leaf(SID)),
                                                            custom(second, first, {"x": 1})), chain=op[1], tx=_tx))
        known += [first, second]
        return applied.entries, applied.leaf, applied.meta
    if kind == "edit" and known:
        entry = store.get_entry(SID, known[op[1] % len(known)])
        assert entry is not None
        revision = int(entry.get("revision", 0))
        applied = store.commit(SID, Commit(entries=({**entry, "revision": revision + 1},),
                                           meta={**current, "updated_at": current["updated_at"] + 1},
                                           expect_revisions=((entry["id"], revision),), tx=_tx))
        return applied.entries, applied.meta
    if kind == "move" and known:
        return store.commit(SID, Commit(leaf=known[op[1] % len(known)], tx=_tx)).leaf
    if kind == "compact":
        return store.compact(SID)
    if kind == "cache":
        store.cache_bytes = op[1]
    if kind == "delete":
        known.clear()
        return store.delete_session(SID), store.commit(SID, Commit(meta=meta(SID))).meta
    return None


def _history(where: Path, ops: list[tuple[Any, ...]], general: bool) -> list[Any]:
    out: list[Any] = []
    store = FsStore(where)
    if general:
        _general(store)
    store.commit(SID, Commit(meta=meta(SID)))
    counter = itertools.count()
    known: list[str] = []
    seen: list[Any] = []
    try:
        for op in ops:
            seen.append(store.get_meta(SID))
            if op[0] == "reopen":
                store.close()
                store = FsStore(where)  # entries held lazily from here on
                if general:
                    _general(store)
                continue
            try:
                out.append(_step(store, op, known, lambda: f"e{next(counter)}", seen))
            except Exception as e:  # (each refusal compared, type and message)
                out.append((type(e).__name__, str(e)))
            out.append(_read_back(store))
        out.append(_accounts(store))
    finally:
        store.close()
    return out + _log_and_reopened(where, where / f"{SID}.jsonl")


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.lists(_OPS, max_size=14))
def test_random_histories_answer_write_and_account_as_the_general_commit(
        tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, ...]]) -> None:
    # Prevents: the single-entry path deciding, writing or accounting otherwise than resolve() and
    # the general commit in any history (ids of deleted sessions, parents on other branches or held
    # lazily, stale metas, expectations, what orjson refuses, evictions, rewrites, reopens).
    base = tmp_path_factory.mktemp("history")
    assert _history(base / "fast", ops, False) == _history(base / "general", ops, True)


def test_the_histories_reach_the_single_entry_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the comparison above passing only because the fast path is never taken (a
    # history held lazily, after a reopen, an eviction and a delete, included).
    taken: list[str] = []
    real = FsStore._append_one

    def counted(self: FsStore, *args: Any) -> Any:
        done = real(self, *args)
        if done is not None:
            taken.append(args[-1])
        return done

    monkeypatch.setattr(FsStore, "_append_one", counted)
    ops: list[tuple[Any, ...]] = [("append", "chain", True, "plain", "fresh"), ("reopen",),
                                  ("append", "named", False, "list", "expect"), ("cache", 1),
                                  ("append", "root", False, "unicode", "fresh"), ("delete",),
                                  ("append", "chain", False, "bigint", "fresh"),
                                  ("append", "leaf", True, "plain", "fresh")]
    _history(tmp_path / "fast", ops, False)
    assert taken == ["e0", "e1", "e2", "e4"]  # e3: orjson refuses it, written the general way


# -- write faults ---------------------------------------------------------------------------


def _faulted(where: Path, fault: str, general: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    store = FsStore(where, durability="fsync" if fault == "fsync" else "flush")
    if general:
        _general(store)
    store.commit(SID, Commit(meta=meta(SID)))
    held = store.get_meta(SID)
    assert held is not None
    store.commit(SID, append_commit(held, (message("e1", None),), chain=True))
    before = (where / f"{SID}.jsonl").read_bytes()
    real_write = os.write
    calls = itertools.count()

    def write(fd: int, data: Any) -> int:
        if fault == "short" and next(calls) == 0:
            return real_write(fd, bytes(data)[:10])  # part of the line, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    out: list[Any] = []
    held = store.get_meta(SID)
    assert held is not None
    with monkeypatch.context() as patched:
        if fault == "fsync":
            patched.setattr(os, "fsync", fsync)
        else:
            patched.setattr(os, "write", write)
        with pytest.raises(Exception) as refused:
            store.commit(SID, append_commit(held, (custom("e2", "e1", {"x": 1}),), chain=True))
    out += [(type(refused.value).__name__, str(refused.value)), _read_back(store), _accounts(store)]
    assert store.get_entry(SID, "e2") is None and (where / f"{SID}.jsonl").read_bytes() == before
    held = store.get_meta(SID)
    assert held is not None
    out.append(store.commit(SID, append_commit(held, (custom("e3", None, {"y": 2}),), chain=True)))
    out += [_read_back(store), _accounts(store)]
    store.close()
    out.append((where / f"{SID}.jsonl").read_bytes())
    reopened = FsStore(where)
    try:
        out.append(_read_back(reopened))
        assert reopened.get_leaf(SID) == "e3" and reopened.get_entry(SID, "e2") is None
    finally:
        reopened.close()
    return out


@pytest.mark.parametrize("fault", ["enospc", "short", "fsync"])
def test_a_failed_write_leaves_what_the_general_commit_leaves(tmp_path: Path, fault: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: the single-entry path keeping part of a failed append (an entry, a leaf, a charge
    # to the budget or the cache, a torn line) that the general commit would not, or the next
    # append and a replay reading anything else.
    fast = _faulted(tmp_path / "fast", fault, False, monkeypatch)
    general = _faulted(tmp_path / "general", fault, True, monkeypatch)
    assert fast == general
    assert fast[0][0] == "StoreError" and fast[0][1].startswith("append to s.jsonl: ")


def _group_fsync(where: Path, general: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    events: list[Any] = []
    out: list[Any] = []
    with monkeypatch.context() as patched:
        if general:
            patched.setattr(FsStore, "_append_one", lambda *args: None)
        with session_manager.open(where, durability="fsync") as sm:
            sm.observe({"function_id": ON_MESSAGE_ADDED}, events.append)
            sm.call("session::ensure", {"session_id": SID})
            said = sm.call("session::append", {"session_id": SID, "message": {
                "role": "user", "content": [{"type": "text", "text": "zebra"}], "timestamp": 1}})
            first = sm._append_owned(SID, "t", {"word": "giraffe"}, None)
            hits = sm.call("session::search", {"query": "zebra"})["hits"]
            out.append(([h["entry_id"] for h in hits] == [said["entry_id"]], len(events)))

            def fsync(fd: int) -> None:
                raise OSError(errno.EIO, "Input/output error")

            with monkeypatch.context() as failing:
                failing.setattr(os, "fsync", fsync)
                for parent in (None, first):  # chained, and on a named parent
                    with pytest.raises(SessionError) as refused:
                        sm._append_owned(SID, "t", {"word": "lost"}, parent)
                    out.append((refused.value.code, str(refused.value)))
            store: Any = sm.service.store
            out.append((len(events), store.get_meta(SID)["message_count"], len(store.entries(SID)),
                        store.get_leaf(SID) == first))
            third = sm._append_owned(SID, "t", {"word": "kept"}, None)
            out.append((len(events), len(store.entries(SID)), store.get_entry(SID, third)["parent_id"] == first))
    with session_manager.open(where) as again:
        held: Any = again.service.store
        out.append((len(held.entries(SID)), held.get_leaf(SID) == third,
                    [e["data"] for e in held.entries(SID) if e["kind"] == "custom"]))
    return out


def test_a_failed_group_fsync_answers_and_fires_as_the_general_commit(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a typed append whose shared fsync failed answering otherwise, firing its event, or
    # leaving its entry readable, on the single-entry path; and an append not searchable at once.
    fast = _group_fsync(tmp_path / "fast", False, monkeypatch)
    assert fast == _group_fsync(tmp_path / "general", True, monkeypatch)
    assert fast[0] == (True, 2)  # found by a search right after it; one event per append
    assert fast[1][0] == fast[2][0] == "session/storage"
    assert fast[3] == (2, 1, 2, True) and fast[4] == (3, 3, True)  # no event, no entry from the failed ones
    assert fast[5] == (3, True, [{"word": "giraffe"}, {"word": "kept"}])


# -- a torn tail ----------------------------------------------------------------------------


def _after_tail(where: Path, tail: str, general: bool) -> list[Any]:
    store = FsStore(where)
    store.commit(SID, Commit(meta=meta(SID)))
    held = store.get_meta(SID)
    assert held is not None
    store.commit(SID, append_commit(held, (message("e1", None),), chain=True))
    store.close()
    log = where / f"{SID}.jsonl"
    raw = log.read_bytes()
    log.write_bytes({"no-newline": raw[:-1], "half-line": raw + b'{"type":"append","entry":{"kind"',
                     "garbage": raw + b"not json\n"}[tail])
    store = FsStore(where)  # held lazily: each new entry's body is read back from where it was written
    if general:
        _general(store)
    out: list[Any] = []
    for i in range(2, 5):
        held = store.get_meta(SID)
        assert held is not None
        store.commit(SID, append_commit(held, (custom(f"e{i}", None, {"i": i}),), chain=True))
        store.cache_bytes = 1  # evicted: read back from the log
        out.append([store.get_entry(SID, f"e{j}") for j in range(1, i + 1)])
        store.cache_bytes = 10**8
    out.append(_read_back(store))
    store.close()
    return out + _log_and_reopened(where, log)


@pytest.mark.parametrize("tail", ["no-newline", "half-line", "garbage"])
def test_appends_after_a_torn_tail_read_back_as_the_general_commit(tmp_path: Path, tail: str) -> None:
    # Prevents: the single-entry path locating a lazily held entry's line wrongly after the
    # writer fixed a tail (a newline put first, a torn record cut off).
    fast = _after_tail(tmp_path / "fast", tail, False)
    assert fast == _after_tail(tmp_path / "general", tail, True)
    assert all(entry is not None for entry in fast[2])
    assert all(orjson.loads(line) for line in fast[-2].splitlines()[-3:])


# -- a rewrite in flight ----------------------------------------------------------------------


def test_appends_while_a_rewrite_is_in_flight_land_in_the_new_log(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: an append on the single-entry path missing from a background rewrite's journal
    # (lost when the new log is renamed over the old one).
    release = threading.Event()
    real_write_all = _background.write_all

    def held_back(fd: int, data: bytes) -> None:
        assert release.wait(10)
        real_write_all(fd, data)

    monkeypatch.setattr(_background, "write_all", held_back)
    where = tmp_path / "d"
    with session_manager.open(where) as sm:
        store: Any = sm.service.store
        sm.call("session::ensure", {"session_id": SID})
        big = sm._append_owned(SID, "big", {"pad": "q" * 300_000}, None)  # past the inline rewrites' size
        said = sm.call("session::append", {"session_id": SID, "message": {
            "role": "user", "content": [{"type": "text", "text": "a"}], "timestamp": 1}})["entry_id"]
        for n in range(1000):  # streamed revisions until a background rewrite starts
            if store._d.compactor.rewriting(SID):
                break
            sm.call("session::update-message", {"session_id": SID, "entry_id": said,
                                                 "content": [{"type": "text", "text": f"{n}" + "y" * 2000}]})
        assert store._d.compactor.rewriting(SID)
        before = store.compactions
        added = [sm._append_owned(SID, "t", {"n": n}, None) for n in range(5)]
        journal = store._d.compactor.jobs[SID].journal
        assert [ids for _, ids in journal][-5:] == [(entry_id,) for entry_id in added]
        release.set()
        store._d.compactor.wait_landed(SID)
        assert store.compactions == before + 1
        live = _read_back(store)
    lines = [orjson.loads(line) for line in (where / f"{SID}.jsonl").read_bytes().splitlines()]
    assert lines[0]["type"] == "meta"  # a snapshot, then what was carried over
    with session_manager.open(where) as again:
        held: Any = again.service.store
        assert _read_back(held) == live and held.get_leaf(SID) == added[-1]
        assert [e["id"] for e in held.entries(SID)] == [big, said, *added]


# -- threads ----------------------------------------------------------------------------------

_SESSIONS = ("a", "b", "c")


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_threads_appending_to_sessions_rewritten_and_evicted_meanwhile(tmp_path: Path, durability: str) -> None:
    # Prevents: the single-entry path losing, forking or double counting appends made at once from
    # many threads while logs are rewritten and sessions evicted: every line parses, each session
    # one chain with its counts, every event fired once, a reopen reads what memory held.
    where = tmp_path / "d"
    events: list[Any] = []
    errors: list[BaseException] = []
    with session_manager.open(where, durability=durability) as sm:
        sm.observe({"function_id": ON_MESSAGE_ADDED}, events.append)
        for sid in _SESSIONS:
            sm.call("session::ensure", {"session_id": sid})
        store: Any = sm.service.store
        done = threading.Event()

        def writer(i: int) -> None:
            try:
                for n in range(30):
                    sid = _SESSIONS[(i + n) % 3]
                    if n % 3 == 0:
                        sm.call("session::append", {"session_id": sid, "message": {
                            "role": "user", "content": [{"type": "text", "text": f"{i}-{n}"}], "timestamp": 1}})
                    else:
                        sm._append_owned(sid, "t", {"i": i, "n": n, "pad": "x" * (n * 37)}, None)
            except BaseException as e:  # (reported below)
                errors.append(e)

        def churn() -> None:
            for k in itertools.count():
                if done.is_set():
                    return
                try:
                    store.compact(_SESSIONS[k % 3])
                    store.cache_bytes = 1 if k % 2 else 10**8
                except BaseException as e:  # (reported below)
                    errors.append(e)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
        churner = threading.Thread(target=churn)
        for thread in (churner, *threads):
            thread.start()
        for thread in threads:
            thread.join()
        done.set()
        churner.join()
        store.cache_bytes = 10**8
        assert not errors, errors
        live = {sid: (store.get_meta(sid), store.get_leaf(sid), sorted(map(repr, store.entries(sid))))
                for sid in _SESSIONS}
    assert len(events) == 180 and len({e["entry_id"] for e in events}) == 180
    with session_manager.open(where) as again:
        held: Any = again.service.store
        for sid in _SESSIONS:
            for line in (where / f"{sid}.jsonl").read_bytes().splitlines():
                orjson.loads(line)
            assert (held.get_meta(sid), held.get_leaf(sid), sorted(map(repr, held.entries(sid)))) == live[sid]
            entries = held.entries(sid)
            assert len(entries) == 60
            assert held.get_meta(sid)["message_count"] == sum(e["kind"] == "message" for e in entries) == 20
            parents = [e["parent_id"] for e in entries]
            assert len(set(parents)) == len(parents)  # one chain, no fork
