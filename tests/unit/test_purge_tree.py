"""``session::purge`` and ``session::delete-tree`` in the embedded host: responses,
the events fired and not fired, validation, and read-back after a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import SessionError, SessionManager
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds

DELETED = "session::on-deleted"


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


class Opened:
    """An fs store with a recorder of every event function."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir
        self.clock = ManualClock(1_000)
        self.ids = SequentialIds()
        self.sm = self.open()

    def open(self) -> SessionManager:
        sm = session_manager.open(self.dir, clock=self.clock, ids=self.ids)
        self.events: list[tuple[str, dict[str, Any]]] = []
        for fid in ("session::on-created", DELETED, "session::on-message-added", "session::on-meta-updated"):
            sm.observe({"function_id": fid}, lambda p, fid=fid: self.events.append((fid, p)))
        return sm

    def restart(self) -> SessionManager:
        self.sm.close()
        self.sm = self.open()
        return self.sm

    def create(self, **metadata: Any) -> str:
        sid: str = self.sm.call("session::create", {"metadata": metadata})["session_id"]
        self.sm.call("session::append", {"session_id": sid, "message": _user("hi")})
        return sid

    def deleted(self) -> list[str]:
        return [p["session_id"] for fid, p in self.events if fid == DELETED]

    def ids_listed(self) -> set[str]:
        return {m["session_id"] for m in self.sm.call("session::list", {"limit": 500})["sessions"]}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Opened]:
    opened = Opened(tmp_path / "d")
    yield opened
    opened.sm.close()


def test_purge_deletes_only_the_tenant_fires_one_deleted_each_and_survives_a_restart(store: Opened) -> None:
    # Prevents: a purge that takes another tenant's sessions, fires no (or extra) events, or whose
    # deletions come back after a restart.
    a = [store.create(owner="A") for _ in range(3)]
    b = store.create(owner="B")
    both = store.create(owner="A", team="x")
    store.events.clear()
    out = store.sm.call("session::purge", {"metadata": {"owner": "A"}})
    assert sorted(out["session_ids"]) == sorted([*a, both]) and out["more"] is False
    assert sorted(store.deleted()) == sorted([*a, both])
    assert all(fid == DELETED for fid, _ in store.events)  # nothing else fired
    payload = next(p for fid, p in store.events if p["session_id"] == both)
    assert payload == {"session_id": both, "timestamp": 1_000, "session_metadata": {"owner": "A", "team": "x"}}
    store.restart()
    assert store.ids_listed() == {b}
    assert store.sm.call("session::get", {"session_id": a[0]}) is None
    assert store.sm.call("session::purge", {"metadata": {"owner": "A"}}) == {"session_ids": [], "more": False}


def test_purge_pages_by_limit_and_dry_run_deletes_nothing_and_fires_nothing(store: Opened) -> None:
    # Prevents: a dry run that deletes or fires, a limit not honoured, `more` wrong at the edge.
    ids = [store.create(owner="A") for _ in range(5)]
    store.events.clear()
    dry = store.sm.call("session::purge", {"metadata": {"owner": "A"}, "dry_run": True, "limit": 2})
    assert dry == {"session_ids": ids[:2], "more": True}
    assert store.events == [] and store.ids_listed() == set(ids)
    first = store.sm.purge(metadata={"owner": "A"}, limit=3)
    assert first.session_ids == ids[:3] and first.more is True
    second = store.sm.purge(metadata={"owner": "A"}, limit=2)
    assert second.session_ids == ids[3:] and second.more is False  # exactly the rest: nothing more
    assert store.deleted() == ids and store.ids_listed() == set()


def test_purge_status_and_updated_before_narrow_the_match(store: Opened) -> None:
    # Prevents: the optional filters ignored (a purge of done sessions taking working ones, or one
    # bounded by time taking recent sessions).
    old_done = store.create(owner="A")
    store.sm.call("session::set-status", {"session_id": old_done, "status": "done"})
    store.clock.set(5_000)
    new_done = store.create(owner="A")
    store.sm.call("session::set-status", {"session_id": new_done, "status": "done"})
    working = store.create(owner="A")
    store.sm.call("session::set-status", {"session_id": working, "status": "working"})
    store.events.clear()
    out = store.sm.call("session::purge", {"metadata": {"owner": "A"}, "status": "done", "updated_before": 5_000})
    assert out == {"session_ids": [old_done], "more": False}
    assert store.deleted() == [old_done]
    out = store.sm.call("session::purge", {"metadata": {"owner": "A"}, "status": "done"})
    assert out == {"session_ids": [new_done], "more": False}
    assert store.ids_listed() == {working}


@pytest.mark.parametrize(("payload", "field"), [
    ({}, "metadata"),
    ({"metadata": {}}, "metadata"),
    ({"metadata": None}, "metadata"),
    ({"metadata": {"owner": "A"}, "limit": 0}, "limit"),
    ({"metadata": {"owner": "A"}, "limit": 1001}, "limit"),
    ({"metadata": {"owner": "A"}, "status": "gone"}, "status"),
    ({"metadata": {"owner": "A"}, "updated_before": "1"}, "updated_before"),
    ({"metadata": {"owner": "A"}, "dry_run": 1}, "dry_run"),
    ({"metadata": {"owner": "A"}, "limt": 5}, "limt"),
])
def test_a_bad_purge_is_invalid_request_naming_the_field_and_deletes_nothing(
        store: Opened, payload: dict[str, Any], field: str) -> None:
    # Prevents: an empty filter purging every tenant, a limit past the cap accepted, a traceback.
    sid = store.create(owner="A")
    store.events.clear()
    with pytest.raises(SessionError) as caught:
        store.sm.call("session::purge", payload)
    assert caught.value.code == "session/invalid_request" and field in caught.value.message
    assert store.events == [] and store.ids_listed() == {sid}


def _tree(store: Opened) -> dict[str, str]:
    """root <- a, b; a <- a1, a2; b <- b1 (parent_session_id), and an unrelated session."""
    t: dict[str, str] = {"root": store.create(owner="A")}
    t["a"] = store.create(parent_session_id=t["root"])
    t["b"] = store.create(parent_session_id=t["root"])
    t["a1"] = store.create(parent_session_id=t["a"])
    t["a2"] = store.create(parent_session_id=t["a"])
    t["b1"] = store.create(parent_session_id=t["b"])
    t["other"] = store.create(parent_session_id="s_elsewhere")
    return t


def test_delete_tree_deletes_children_first_fires_each_and_is_idempotent(store: Opened) -> None:
    # Prevents: a parent deleted before its children (an orphan if the call dies), a sub-agent
    # left behind, an unrelated session taken, a second call failing or firing again.
    t = _tree(store)
    store.events.clear()
    out = store.sm.call("session::delete-tree", {"session_id": t["root"]})
    assert out == {"deleted": [t["a1"], t["a2"], t["a"], t["b1"], t["b"], t["root"]]}
    assert store.deleted() == out["deleted"] and all(fid == DELETED for fid, _ in store.events)
    store.events.clear()
    assert store.sm.delete_tree(t["root"]).deleted == []
    assert store.events == []
    store.restart()
    assert store.ids_listed() == {t["other"]}


def test_delete_tree_of_a_subtree_and_of_an_unknown_id(store: Opened) -> None:
    # Prevents: delete-tree climbing to the parent, or failing on an id nobody has.
    t = _tree(store)
    store.events.clear()
    assert store.sm.call("session::delete-tree", {"session_id": t["b"]}) == {"deleted": [t["b1"], t["b"]]}
    assert store.ids_listed() == {t["root"], t["a"], t["a1"], t["a2"], t["other"]}
    assert store.sm.call("session::delete-tree", {"session_id": "s_nobody"}) == {"deleted": []}
    assert store.deleted() == [t["b1"], t["b"]]
    with pytest.raises(SessionError) as caught:
        store.sm.call("session::delete-tree", {"session_id": ""})
    assert caught.value.code == "session/invalid_request" and "session_id" in caught.value.message


def test_delete_tree_finishes_orphans_of_a_root_already_gone(store: Opened) -> None:
    # Prevents: a re-run after a crash that left the root deleted (by a plain delete) and its
    # descendants behind finding nothing to do.
    t = _tree(store)
    store.sm.call("session::delete", {"session_id": t["root"]})
    store.events.clear()
    out = store.sm.call("session::delete-tree", {"session_id": t["root"]})
    assert out == {"deleted": [t["a1"], t["a2"], t["a"], t["b1"], t["b"]]}
    assert store.ids_listed() == {t["other"]}


def test_delete_tree_survives_a_cycle_of_parents(store: Opened) -> None:
    # Prevents: an endless walk when metadata names a loop of parents.
    x = store.create()
    y = store.create(parent_session_id=x)
    store.sm.call("session::set-meta", {"session_id": x, "metadata": {"parent_session_id": y}})
    assert store.sm.call("session::delete-tree", {"session_id": x}) == {"deleted": [y, x]}
    assert store.ids_listed() == set()
