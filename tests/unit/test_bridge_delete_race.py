"""Two bridged instances deleting the same sessions at once (real threads):
exactly one ``deleted: true`` and one ``on-deleted`` per session, across bridges."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from session_manager._wire import events as ev
from session_manager.store import FsStore
from tests.unit.test_bridge import Topology


@pytest.fixture
def topo(tmp_path: Path) -> Iterator[Topology]:
    t = Topology(tmp_path)
    yield t
    t.close()


def test_two_bridges_deleting_one_session_answer_deleted_once_and_fire_on_deleted_once(topo: Topology) -> None:
    # Prevents (issue 25 #3): BridgeStore.delete_session ignoring the main's `deleted: false`, so both
    # racing bridges answered deleted: true and on-deleted fired twice for one session.
    sessions = 40
    _h1, l1 = topo.bridged()
    _h2, l2 = topo.bridged()
    sids = [l1.invoke("session::create", {"metadata": {"owner": f"u_{i}"}})["session_id"] for i in range(sessions)]
    topo.settle()
    observed = {name: fake.add_observer(ev.ON_DELETED) for name, fake in
                (("main", topo.main_fake), ("b1", l1), ("b2", l2))}
    answers: dict[str, list[bool]] = {sid: [] for sid in sids}
    errors: list[BaseException] = []
    gate = threading.Barrier(2)

    def deleter(fake: Any) -> None:
        try:
            for sid in sids:
                gate.wait(10)  # both bridges decide on the same session at the same moment
                answers[sid].append(fake.invoke("session::delete", {"session_id": sid})["deleted"])
        except BaseException as e:  # reported below
            errors.append(e)
            gate.abort()

    pool = [threading.Thread(target=deleter, args=(fake,)) for fake in (l1, l2)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(120)
    topo.settle()
    assert errors == []
    assert {sid: sorted(a) for sid, a in answers.items()} == {sid: [False, True] for sid in sids}
    for name, obs in observed.items():
        got = sorted((e["session_id"], e["session_metadata"]["owner"]) for e in obs.delivered)
        assert got == sorted((sid, f"u_{i}") for i, sid in enumerate(sids)), name
    # the sessions are gone from the main, through every instance
    assert FsStore(topo.tmp / "main", read_only=True).list_metas() == []
    for fake in (topo.main_fake, l1, l2):
        assert fake.invoke("session::list", {})["sessions"] == []


@pytest.mark.parametrize("race", ["main and a bridge deleting", "two bridges deleting trees",
                                  "a delete and a tree delete"])
def test_deletes_racing_across_main_and_bridges_answer_deleted_once_and_fire_on_deleted_once(
        topo: Topology, race: str) -> None:
    # Prevents: the main's own delete racing a bridge's, or a delete-tree (a bulk delete, the
    # same store delete) racing another, both reporting the session deleted and firing on-deleted twice.
    sessions = 12
    _h1, l1 = topo.bridged()
    _h2, l2 = topo.bridged()
    sids = [l1.invoke("session::create", {"metadata": {"owner": f"u_{i}"}})["session_id"] for i in range(sessions)]
    topo.settle()
    observed = {name: fake.add_observer(ev.ON_DELETED) for name, fake in
                (("main", topo.main_fake), ("b1", l1), ("b2", l2))}
    first, first_tree = (topo.main_fake, False) if race.startswith("main") else (l1, race.startswith("two"))
    answers: dict[str, list[bool]] = {sid: [] for sid in sids}
    errors: list[BaseException] = []
    gate = threading.Barrier(2)

    def deleter(fake: Any, tree: bool) -> None:
        try:
            for sid in sids:
                gate.wait(10)
                if tree:
                    answers[sid].append(sid in fake.invoke("session::delete-tree", {"session_id": sid})["deleted"])
                else:
                    answers[sid].append(fake.invoke("session::delete", {"session_id": sid})["deleted"])
        except BaseException as e:  # reported below
            errors.append(e)
            gate.abort()

    pool = [threading.Thread(target=deleter, args=(first, first_tree)),
            threading.Thread(target=deleter, args=(l2, not race.startswith("main")))]
    for t in pool:
        t.start()
    for t in pool:
        t.join(120)
    topo.settle()
    assert errors == []
    assert {sid: sorted(a) for sid, a in answers.items()} == {sid: [False, True] for sid in sids}
    for name, obs in observed.items():
        assert sorted(e["session_id"] for e in obs.delivered) == sorted(sids), name
