"""A read that a delete overtakes: the reader hears that the session no longer exists
(session/not_found), never session/storage, which would report a disk fault for a healthy store."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.errors import NOT_FOUND, SessionError, Vanished
from session_manager.store import Commit, FsStore
from session_manager.testing.contract import T0, message, meta


def build(where: Path, entries: int) -> None:
    store = FsStore(where)
    parent = None
    batch = []
    for i in range(entries):
        batch.append(message(f"e_{i}", parent, f"text {i} " + "x" * 200))
        parent = f"e_{i}"
    store.commit("s_1", Commit(entries=tuple(batch), leaf=parent, meta=meta("s_1", message_count=entries)))
    store.close()


def test_a_path_taken_before_a_delete_reads_as_vanished(tmp_path: Path) -> None:
    # Prevents: the bodies of a path taken just before a delete failing as a storage fault
    # ("read entry ...: No such file") once the delete removed the log under the reader.
    build(tmp_path, 50)
    store = FsStore(tmp_path)  # reopened: bodies are read from the log on demand
    path = store.path("s_1", store.get_leaf("s_1"))
    store.delete_session("s_1")
    with pytest.raises(Vanished) as gone:
        list(path)
    assert gone.value.session_id == "s_1"
    assert store.get_meta("s_1") is None and store.entries("s_1") == []
    store.close()


def readers_during(where: Path, act: Callable[[session_manager.SessionManager], None], *,
                   after_an_error: str) -> list[Any]:
    """Four threads page ``s_1`` of a 400-entry session (``build``) while ``act`` runs; each
    page's length or error code. A reader ``"stop"``s or ``"continue"``s after an error."""
    outcomes: list[Any] = []
    build(where, 400)
    sm = session_manager.open(where)
    start = threading.Barrier(5)

    def read() -> None:
        start.wait(5)
        for _ in range(20):
            try:
                page = sm.call("session::messages", {"session_id": "s_1", "limit": 400})
            except SessionError as e:
                outcomes.append(e.code)
                if after_an_error == "stop":
                    return
                continue
            outcomes.append(len(page["messages"]))

    readers = [threading.Thread(target=read) for _ in range(4)]
    for t in readers:
        t.start()
    start.wait(5)
    act(sm)
    for t in readers:
        t.join(10)
        assert not t.is_alive()
    sm.close()
    return outcomes


def test_readers_racing_a_delete_hear_not_found_or_a_whole_page(tmp_path: Path) -> None:
    # Prevents: the same through the service, with real threads: a chat UI reading a conversation
    # another client deletes is told session/storage (a disk fault) instead of session/not_found.
    def delete(sm: session_manager.SessionManager) -> None:
        sm.call("session::delete", {"session_id": "s_1"})
        with pytest.raises(SessionError) as after:
            sm.call("session::messages", {"session_id": "s_1"})
        assert after.value.code == NOT_FOUND

    outcomes: list[Any] = []
    for attempt in range(12):
        outcomes += readers_during(tmp_path / str(attempt), delete, after_an_error="stop")
    assert set(outcomes) <= {400, NOT_FOUND}, sorted(set(map(str, outcomes)))


def test_a_body_that_cannot_be_read_after_the_handler_is_session_storage_not_a_raw_store_error(
        tmp_path: Path) -> None:
    # Prevents: the embedded call raising the store's own StoreError (no session/* code; over iii an
    # error the caller cannot classify) when a lazy body fails as the reader iterates its path.
    build(tmp_path, 50)
    sm = session_manager.open(tmp_path)
    sm.call("session::get", {"session_id": "s_1"})  # loaded from the index: bodies stay on disk
    log = sm.service.store.file_path("s_1")  # type: ignore[attr-defined]
    data = bytearray(log.read_bytes())
    data[2000:2100] = b"z" * 100  # changed behind the owner's back, same size
    log.write_bytes(bytes(data))
    with pytest.raises(SessionError) as failed:
        sm.call("session::messages", {"session_id": "s_1", "limit": 50})
    assert failed.value.code == "session/storage" and "changed under its index" in str(failed.value)
    sm.close()


def test_a_vanished_session_is_answered_not_found_at_the_edge() -> None:
    # Prevents: the one mapping of store failures reporting a deleted session as a disk fault.
    from session_manager._service.storage_errors import at_edge

    error = at_edge(Vanished("s_9", "session s_9 was deleted during the read"))
    assert (error.code, str(error)) == (NOT_FOUND, f"{NOT_FOUND}: session s_9 does not exist")


def test_a_path_taken_before_a_delete_and_a_re_create_reads_as_vanished(tmp_path: Path) -> None:
    # Prevents: a session deleted and created again under the same id (session::ensure) while a reader
    # held its old path: the old bodies were read at their offsets in the new log and failed as
    # "log changed under its index" (session/storage, a disk fault, for a healthy store).
    build(tmp_path, 50)
    store = FsStore(tmp_path)
    path = store.path("s_1", store.get_leaf("s_1"))
    store.delete_session("s_1")
    store.commit("s_1", Commit(entries=(message("n_0", None, "new " * 300),), leaf="n_0",
                               meta=meta("s_1", message_count=1)))
    with pytest.raises(Vanished):
        list(path)
    assert [e["id"] for e in store.path("s_1", store.get_leaf("s_1"))] == ["n_0"]
    store.close()


def test_readers_racing_a_delete_and_a_re_create_hear_not_found_or_a_whole_page(tmp_path: Path) -> None:
    # Prevents: the same through the service, with real threads: a chat UI paging a conversation that
    # another client resets (delete, then ensure under the same id) told session/storage.
    def reset(sm: session_manager.SessionManager) -> None:
        sm.call("session::delete", {"session_id": "s_1"})
        sm.call("session::ensure", {"session_id": "s_1"})
        for i in range(3):
            sm.call("session::append", {"session_id": "s_1", "message": {
                "role": "user", "content": [{"type": "text", "text": f"again {i} " + "y" * 300}],
                "timestamp": 1}})

    outcomes: list[Any] = []
    for attempt in range(8):
        outcomes += readers_during(tmp_path / str(attempt), reset, after_an_error="continue")
    assert set(outcomes) <= {400, 0, 1, 2, 3, NOT_FOUND}, sorted(set(map(str, outcomes)))


def test_a_dropped_state_s_path_read_after_a_delete_and_a_re_create_reads_as_vanished(tmp_path: Path) -> None:
    # Prevents: the same for a reader whose session left the cache before the delete (its arrays are
    # detached; a body that did not match was asked of the re-created session, which has no such entry).
    build(tmp_path, 50)
    other = FsStore(tmp_path)
    other.commit("s_2", Commit(meta=meta("s_2")))
    other.close()
    store = FsStore(tmp_path, cache_bytes=1)
    path = store.path("s_1", store.get_leaf("s_1"))
    store.get_meta("s_2")  # s_1 leaves the cache
    store.delete_session("s_1")
    store.commit("s_1", Commit(entries=(message("n_0", None, "new " * 300),), leaf="n_0",
                               meta={**meta("s_1", message_count=1), "created_at": T0 + 1}))
    with pytest.raises(Vanished):
        list(path)
    store.close()


@pytest.mark.parametrize(("function", "payload"), [
    ("session::messages-range", {"session_id": "s_1", "from_entry_id": "e_0", "to_entry_id": "e_9"}),
    ("session::messages", {"session_id": "s_1", "from_entry_id": "e_9"}),
])
def test_an_entry_looked_up_after_a_delete_is_not_found_not_entry_not_found(
        tmp_path: Path, function: str, payload: dict[str, Any]) -> None:
    # Prevents: a read whose session was deleted between its meta check and its entry lookup answered
    # session/entry_not_found (the entry is gone because the session is): the caller would retry with
    # another entry of a conversation that no longer exists. Seen with real threads on messages-range.
    build(tmp_path, 10)
    sm = session_manager.open(tmp_path)
    store = sm.service.store
    real_get_meta = store.get_meta
    calls = 0

    def get_meta_then_delete(session_id: str) -> Any:
        nonlocal calls
        calls += 1
        meta_now = real_get_meta(session_id)
        if calls == 1:
            worker = threading.Thread(target=sm.call, args=("session::delete", {"session_id": "s_1"}))
            worker.start()
            worker.join(10)  # another client's delete lands right after this call's meta check
        return meta_now

    store.get_meta = get_meta_then_delete  # type: ignore[method-assign]
    with pytest.raises(SessionError) as failed:
        sm.call(function, payload)
    assert failed.value.code == NOT_FOUND, failed.value
    sm.close()


def _bridged_path_of_200(store: Any) -> tuple[str, Any]:
    """Session s_1 with 200 entries in one chain (past one window of 64: the root is fetched
    after the tail), and its path, read through the tail window; the leaf and the path."""
    parent = None
    batch = []
    for i in range(200):
        batch.append(message(f"e_{i}", parent, f"text {i}"))
        parent = f"e_{i}"
    store.commit("s_1", Commit(entries=tuple(batch), leaf=parent, meta=meta("s_1", message_count=200)))
    path = store.path("s_1", parent)
    assert len(path) == 200 and path[199]["id"] == "e_199"  # the tail window
    return "e_199", path


def test_a_bridged_path_read_across_a_delete_on_the_main_is_vanished(tmp_path: Path) -> None:
    # Prevents: a bridge-mode reader whose session the main deleted between two windows of its
    # path answered session/storage (the main answered an empty window, or not_found as a fault).
    from tests.unit.test_bridge import open_bridge_store

    opened = open_bridge_store(tmp_path)
    store = next(opened)
    try:
        parent, path = _bridged_path_of_200(store)
        store.delete_session("s_1")
        with pytest.raises(Vanished) as gone:
            path[0]  # a later window, after the delete
        assert gone.value.session_id == "s_1"
        assert len(store.path("s_1", parent)) == 0  # taken after the delete: absent, as any store reads it
        assert store.get_meta("s_1") is None
    finally:
        next(opened, None)


def test_a_bridged_path_read_across_a_delete_and_a_re_create_on_the_main_is_vanished(tmp_path: Path) -> None:
    # Prevents: a bridge-mode reader whose session the main deleted and created again (session::ensure)
    # between two windows of its path: the main answered the pinned leaf's path in the new session
    # (empty), and the reader failed with a raw KeyError (an internal error) instead of hearing the
    # session vanished, as a local store's reader does.
    from tests.unit.test_bridge import open_bridge_store

    opened = open_bridge_store(tmp_path)
    store = next(opened)
    try:
        _leaf, path = _bridged_path_of_200(store)
        store.delete_session("s_1")
        store.commit("s_1", Commit(entries=(message("n_0", None, "new"),), leaf="n_0",
                                   meta={**meta("s_1", message_count=1), "created_at": T0 + 1}))
        with pytest.raises(Vanished) as gone:
            path[0]  # a later window, after the delete and the re-create
        assert gone.value.session_id == "s_1"
        with pytest.raises(Vanished):
            path.index_of("e_3")
        assert [e["id"] for e in store.path("s_1", "n_0")] == ["n_0"]
    finally:
        next(opened, None)
