"""The sessions index behind a cold ``session::list``: damaged, stale or missing,
it never changes what the list says; the logs stay the only truth."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import session_manager
from session_manager.store import Commit, FsStore
from session_manager.store.fs import _cold_list
from session_manager.store.fs._records import encode_commit
from session_manager.testing.contract import meta

ORDERS = ("updated_desc", "created_desc", "created_asc")
COUNT = 7


def walk(sm: session_manager.SessionManager, order: str, **filters: Any) -> list[dict[str, Any]]:
    """Every session in ``order``, through pages of 3 (cursors included)."""
    out: list[dict[str, Any]] = []
    payload: dict[str, Any] = {"limit": 3, "order": order, **filters}
    while True:
        got = sm.call("session::list", payload)
        out += got["sessions"]
        if not got.get("next_cursor"):
            return out
        payload["cursor"] = got["next_cursor"]


def listing(where: Path, *, read_only: bool = False) -> dict[str, Any]:
    """What a new store lists, in every order and under two filters."""
    with session_manager.open(where, read_only=read_only) as sm:
        return {"orders": {order: walk(sm, order) for order in ORDERS},
                "owner": walk(sm, "updated_desc", metadata={"owner": "a"}),
                "status": walk(sm, "created_asc", status="idle")}


def build(where: Path) -> dict[str, Any]:
    """A store of COUNT sessions (one without metadata, one with an id that needs escaping);
    returns what its writer lists."""
    with session_manager.open(where) as sm:
        for i in range(COUNT):
            body: dict[str, Any] = {"title": f"t{i}", "metadata": {"owner": "ab"[i % 2], "n": i}}
            if i == 3:
                body = {"title": "plain"}
            if i == 5:
                sm.call("session::ensure", {"session_id": "odd id/é", **body})
            else:
                sid = sm.call("session::create", body)["session_id"]
                sm.call("session::append", {"session_id": sid, "message": {
                    "role": "user", "content": [{"type": "text", "text": f"m{i}"}], "timestamp": 1}})
        expected = {"orders": {order: walk(sm, order) for order in ORDERS},
                    "owner": walk(sm, "updated_desc", metadata={"owner": "a"}),
                    "status": walk(sm, "created_asc", status="idle")}
    return expected


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], bytes]:
    where = tmp_path_factory.mktemp("idx") / "d"
    expected = build(where)
    assert listing(where) == expected  # a cold list through a fresh index says what the writer said
    return where, expected, (where / ".index" / "sessions.list").read_bytes()


def test_a_cold_list_through_the_index_decodes_only_the_page(tmp_path: Path) -> None:
    # Prevents: the cold path decoding (or validating) every meta to answer one page.
    build(tmp_path)
    store = FsStore(tmp_path)
    sm = session_manager.open(store=store)
    page = sm.call("session::list", {"limit": 2})["sessions"]
    catalog = store._metas
    assert catalog is not None and len(catalog) == COUNT
    assert len(catalog._pending) == COUNT - 3  # the page, and the one match that tells "more"
    assert [m["session_id"] for m in page] == [m["session_id"] for m in listing_of(store)[:2]]
    assert not catalog._pending  # listing everything decoded the rest
    sm.close()


def listing_of(store: FsStore) -> list[dict[str, Any]]:
    return sorted(store.list_metas(), key=lambda m: (m["updated_at"], m["session_id"]), reverse=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_deleted_truncated_or_corrupted_index_never_changes_the_list(
        store_dir: tuple[Path, dict[str, Any], bytes], data: st.DataObject) -> None:
    # Prevents: a damaged sessions index hiding a session, showing a wrong meta or failing the open.
    where, expected, good = store_dir
    index = where / ".index" / "sessions.list"
    how = data.draw(st.sampled_from(["delete", "truncate", "flip", "garbage"]))
    if how == "delete":
        index.unlink()
    elif how == "truncate":
        index.write_bytes(good[: data.draw(st.integers(0, len(good) - 1))])
    elif how == "flip":
        at = data.draw(st.integers(0, len(good) - 1))
        index.write_bytes(good[:at] + bytes([good[at] ^ data.draw(st.integers(1, 255))]) + good[at + 1 :])
    else:
        index.write_bytes(data.draw(st.binary(max_size=64)))
    assert listing(where, read_only=True) == expected
    assert listing(where) == expected
    assert listing(where) == expected  # and through the index the first list wrote again
    assert listing(where, read_only=True) == expected
    index.write_bytes(good)


def _meta_of(expected: dict[str, Any], n: int) -> dict[str, Any]:
    return sorted(expected["orders"]["created_asc"], key=lambda m: m["session_id"])[n]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(st.sampled_from(["append", "replace", "delete", "add"]),
                                  st.integers(0, COUNT - 1)), min_size=1, max_size=4))
def test_a_log_changed_behind_the_index_is_listed_as_the_log_says(
        tmp_path_factory: pytest.TempPathFactory, changes: list[tuple[str, int]]) -> None:
    # Prevents: the index's record of a log trusted after another writer appended to it, replaced
    # it, deleted it, or added a log beside it (the logs are the only truth).
    where = tmp_path_factory.mktemp("behind") / "d"
    expected = build(where)
    assert listing(where) == expected  # the index now matches every log
    gone: set[str] = set()
    for k, (how, n) in enumerate(changes):
        old = _meta_of(expected, n)
        sid = old["session_id"]
        if sid in gone:
            continue
        log = FsStore.file_path(_paths(where), sid)
        if how == "append":  # the reference renames it: one more meta line
            renamed = {**old, "title": f"renamed {k}", "updated_at": old["updated_at"] + 1}
            with log.open("ab") as f:
                f.write(encode_commit(Commit(meta=renamed)))
        elif how == "replace":  # rewritten whole (a compaction elsewhere), as a new file renamed over it
            tmp = where / "tmp.part"
            tmp.write_bytes(encode_commit(Commit(meta={**old, "title": f"replaced {k}", "status": "done"})))
            os.replace(tmp, log)
        elif how == "delete":
            log.unlink()
            gone.add(sid)
        else:
            new = meta(f"s_new{k}", title=f"added {k}", created_at=10 + k, updated_at=10 + k)
            (where / f"s_new{k}.jsonl").write_bytes(encode_commit(Commit(meta=new)))
    index = where / ".index" / "sessions.list"
    stale = index.read_bytes()
    reader = listing(where, read_only=True)  # trusts only the records that still match
    assert index.read_bytes() == stale  # and writes nothing
    first = listing(where)
    again = listing(where)  # through the index the first list rewrote
    assert reader == first == again == _truth(where)


def _paths(where: Path) -> FsStore:
    return FsStore(where, read_only=True)  # only its file naming is used


def _truth(where: Path) -> dict[str, Any]:
    """The list with no index at all: every log read."""
    (where / ".index" / "sessions.list").unlink(missing_ok=True)
    with session_manager.open(where, read_only=True) as ro:
        truth = {"orders": {order: walk(ro, order) for order in ORDERS},
                 "owner": walk(ro, "updated_desc", metadata={"owner": "a"}),
                 "status": walk(ro, "created_asc", status="idle")}
    assert not (where / ".index" / "sessions.list").exists()  # a read-only list writes nothing
    return truth


def test_pages_read_while_writers_change_a_cold_catalog_stay_consistent(tmp_path: Path) -> None:
    # Prevents: a meta decoded lazily by a reader (outside the store's lock) overwriting a newer
    # one a writer just put, or bringing back a deleted session.
    with session_manager.open(tmp_path) as sm:
        ids = [sm.call("session::create", {"title": f"t{i}"})["session_id"] for i in range(60)]
        sm.call("session::list", {})
    sm = session_manager.open(tmp_path)
    sm.call("session::list", {"limit": 1})  # the catalog exists, nearly every meta still pending
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                for order in ORDERS:
                    walk(sm, order)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for t in readers:
        t.start()
    for i, sid in enumerate(ids):
        if i % 3 == 0:
            sm.call("session::delete", {"session_id": sid})
        else:
            sm.call("session::set-meta", {"session_id": sid, "title": f"new {i}"})
    stop.set()
    for t in readers:
        t.join(30)
    assert not errors
    final = walk(sm, "created_asc")
    assert sorted(m["session_id"] for m in final) == sorted(sid for i, sid in enumerate(ids) if i % 3)
    assert final == sorted(final, key=lambda m: (m["created_at"], m["session_id"]))
    assert all(m["title"] == f"new {ids.index(m['session_id'])}" for m in final)
    sm.close()
    assert listing(tmp_path)["orders"]["created_asc"] == final


def test_an_index_saved_at_close_matches_the_next_listing_whole(tmp_path: Path) -> None:
    # Prevents: every restart after sessions were created or deleted re-reading the index one
    # record at a time (the close wrote it in an order the directory does not list).
    build(tmp_path)
    with session_manager.open(tmp_path) as sm:
        sm.call("session::list", {})
        gone = sm.call("session::list", {"limit": 1})["sessions"][0]["session_id"]
        sm.call("session::delete", {"session_id": gone})
        for i in range(3):
            sm.call("session::create", {"title": f"later {i}"})
    store = FsStore(tmp_path, read_only=True)
    logs = _cold_list.log_stats(store._ops, store._dir, lambda n, w: None)
    cold = _cold_list.scan(logs, tmp_path / ".index" / "sessions.list", lambda sid: (False, None),
                          lambda name, sid: None, lambda n, w: None, write_back=False)
    assert cold.trusted is None and not cold.fresh  # every record trusted, compared whole
    assert listing(tmp_path) == _truth(tmp_path)


def _write_inside_the_decode(monkeypatch: pytest.MonkeyPatch, write: Any) -> None:
    """Make the catalog's next decode of recorded metas run ``write`` on another thread first,
    giving it 2 s (a writer that waits for the decode finishes after it instead)."""
    from session_manager.store.fs import _catalog

    real = _catalog.loads
    finished: list[bool] = []

    def decode(raw: bytes) -> Any:
        if not finished:
            t = threading.Thread(target=write)
            t.start()
            t.join(2)
            finished.append(not t.is_alive())
        return real(raw)

    monkeypatch.setattr(_catalog, "loads", decode)


def _events_of(sm: session_manager.SessionManager) -> list[str]:
    fired: list[str] = []
    for fid in session_manager.EVENT_FUNCTIONS:
        sm.observe({"function_id": fid}, lambda _e, fid=fid: fired.append(fid))
    return fired


@pytest.mark.parametrize("reader", ["mention-search", "last-pending-page"])
def test_a_write_while_a_reader_decodes_a_cold_catalog_is_never_lost(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str) -> None:
    # Prevents: a rename during the catalog's decode of recorded metas (the whole catalog, for a
    # session::mention::search or any list_metas; or the last pending meta, for a page) lost: the
    # decode, outside the store's lock, put the old meta back over the writer's, and the writer,
    # seeing the meta neither decoded nor pending, added a second sort key. The session was listed
    # twice under its old title, its new title never found, and the close saved that stale meta
    # into the sessions index, which the next open trusted.
    with session_manager.open(tmp_path) as sm:
        for i in range(3):
            sm.call("session::ensure", {"session_id": f"s{i}", "title": f"old title {i}"})
        sm.call("session::list", {})  # the close saves the sessions index
    store = FsStore(tmp_path)
    sm = session_manager.open(store=store)
    fired = _events_of(sm)
    writer_result: list[Any] = []

    def rename() -> None:
        writer_result.append(sm.call("session::set-meta", {"session_id": "s0", "title": "fresh name"}))

    if reader == "mention-search":
        _write_inside_the_decode(monkeypatch, rename)
        got = sm.call("session::mention::search", {"query": "title"})
        assert {row["id"] for row in got["items"]} <= {"s0", "s1", "s2"}
    else:
        sm.call("session::list", {"limit": 1})  # decodes s2 and s1: s0 (the oldest) alone is pending
        assert store._metas is not None and list(store._metas._pending) == ["s0"]
        _write_inside_the_decode(monkeypatch, rename)
        got = sm.call("session::list", {"limit": 1, "order": "created_asc"})
        assert [m["session_id"] for m in got["sessions"]] == ["s0"]
    monkeypatch.undo()
    deadline = time.monotonic() + 10
    while not writer_result and time.monotonic() < deadline:  # a writer that waited ends right after
        time.sleep(0.01)
    assert writer_result and writer_result[0]["meta"]["title"] == "fresh name"
    assert fired == ["session::on-meta-updated"]  # the rename's event, nothing from the reads

    def check(sm: session_manager.SessionManager) -> None:
        rows = sm.call("session::mention::search", {"query": "fresh"})["items"]
        assert [(r["id"], r["label"]) for r in rows] == [("s0", "fresh name")]
        assert sm.call("session::mention::search", {"query": "old title 0"})["items"] == []
        listed = walk(sm, "updated_desc")
        assert [(m["session_id"], m["title"]) for m in listed] == [
            ("s0", "fresh name"), ("s2", "old title 2"), ("s1", "old title 1")]
        assert sm.call("session::get", {"session_id": "s0"})["meta"]["title"] == "fresh name"

    check(sm)
    sm.close()
    with session_manager.open(tmp_path) as again:  # through the index the close saved
        check(again)
