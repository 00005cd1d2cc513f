"""``session::purge``, ``session::delete-tree`` and retention on a bridged
instance: the deletions land on the main (its files erased at once), and each
session's ``on-deleted`` reaches the main's observers and the bridged
instance's own, once."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from session_manager._hosts import retention
from session_manager._wire import events as ev
from tests.unit.test_bridge import Topology, bridge_value, user

DAY_MS = 86_400_000


@pytest.fixture
def topo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Topology]:
    monkeypatch.setattr(retention, "POLL_S", 3600.0)  # the test ticks the sweep itself
    t = Topology(tmp_path)
    yield t
    t.close()


def _holding(data_dir: Path, marker: bytes) -> list[str]:
    found = []
    for root, _dirs, files in os.walk(data_dir):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                if marker in f.read():
                    found.append(name)
    return found


def _session(local: Any, marker: str, metadata: dict[str, Any]) -> str:
    sid: str = local.invoke("session::create", {"title": marker, "metadata": metadata})["session_id"]
    local.invoke("session::append", {"session_id": sid, "message": user(f"text {marker}")})
    return sid


def test_purge_and_delete_tree_through_a_bridge_erase_on_the_main_and_announce_everywhere(
        topo: Topology, tmp_path: Path) -> None:
    # Prevents: a bridged purge or tree delete that leaves the main's files holding the text, or
    # whose on-deleted events miss the main's observers or the bridged instance's own (or double).
    _b1, local = topo.bridged()
    main_deleted = topo.main_fake.add_observer(ev.ON_DELETED)
    local_deleted = local.add_observer(ev.ON_DELETED)
    marker = "BRIDGE-ERASE-5d1e"
    a = _session(local, marker, {"owner": "A"})
    root = _session(local, marker, {"owner": "B"})
    child = _session(local, marker, {"parent_session_id": root})
    kept = _session(local, "kept", {"owner": "C"})
    topo.settle()
    local.invoke("session::list", {})
    assert _holding(tmp_path / "main", marker.encode())
    assert local.invoke("session::purge", {"metadata": {"owner": "A"}}) == {"session_ids": [a], "more": False}
    assert local.invoke("session::delete-tree", {"session_id": root}) == {"deleted": [child, root]}
    topo.settle()
    assert _holding(tmp_path / "main", marker.encode()) == []
    for observer in (main_deleted, local_deleted):
        assert [p["session_id"] for p in observer.delivered] == [a, child, root]
    assert topo.main_fake.invoke("session::get", {"session_id": a}) is None
    assert topo.main_fake.invoke("session::get", {"session_id": kept}) is not None


def test_retention_on_a_bridged_instance_deletes_on_the_main(topo: Topology) -> None:
    # Prevents: a bridged instance's retention sweep deleting nothing (or only locally).
    value = {**bridge_value(), "retention": {"idle_days": 1}}
    b1, local = topo.bridged(value)
    old = local.invoke("session::create", {})["session_id"]
    topo.clock.advance(DAY_MS)
    assert b1.retention.tick() == 1
    topo.settle()
    assert topo.main_fake.invoke("session::get", {"session_id": old}) is None
    assert local.invoke("session::config-status", {})["retention_last_swept"] == 1


def test_against_a_rust_main_purge_and_delete_tree_answer_storage_naming_what_is_missing(topo: Topology) -> None:
    # Prevents: a bulk delete through a main without the atomic delete (a Rust main), whose
    # multi-call deletes could leave many half-deleted sessions behind, silently.
    from iii import InvocationError

    from tests.unit.test_bridge import rust_like

    _b1, local = topo.bridged()
    sid = local.invoke("session::create", {"metadata": {"owner": "A"}})["session_id"]
    rust_like(topo.main_fake)
    deleted = local.add_observer(ev.ON_DELETED)
    for fid, payload in (("session::purge", {"metadata": {"owner": "A"}}),
                         ("session::delete-tree", {"session_id": sid})):
        with pytest.raises(InvocationError) as err:
            local.invoke(fid, payload)
        assert err.value.message.startswith("session/storage") and "session::store::delete-session" in err.value.message
    # A dry run only reads: still served.
    assert local.invoke("session::purge", {"metadata": {"owner": "A"}, "dry_run": True})["session_ids"] == [sid]
    topo.settle()
    assert deleted.delivered == []
    assert topo.main_fake.invoke("session::get", {"session_id": sid}) is not None
