"""A bridged instance whose link to its main was lost resyncs when the link is
back, and announces the deletions it missed (fake engines; the link is a
FakeConnection dropped and restored as the SDK loses and regains it)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from session_manager._wire import events as ev
from session_manager.testing import FakeEngine
from tests.unit.test_bridge import Topology, user

WATCHED = (ev.ON_CREATED, ev.ON_DELETED, ev.ON_MESSAGE_ADDED)


@pytest.fixture
def topo(tmp_path: Path) -> Iterator[Topology]:
    t = Topology(tmp_path)
    yield t
    t.close()


class Seen:
    """An outside observer per watched event function on one engine."""

    def __init__(self, fake: FakeEngine) -> None:
        self.obs = {fid: fake.add_observer(fid) for fid in WATCHED}
        self.tenant = fake.add_observer(ev.ON_DELETED, {"input.session_metadata.owner": {"$eq": "u_1"}})

    def mark(self) -> dict[str, int]:
        return {fid: len(o.delivered) for fid, o in self.obs.items()}

    def since(self, mark: dict[str, int], fid: str) -> list[dict[str, Any]]:
        return list(self.obs[fid].delivered[mark[fid]:])


def test_a_bridge_back_from_a_lost_link_announces_each_deletion_once(topo: Topology) -> None:
    # Prevents: a bridged instance that lost its link to the main keeping (for its observers)
    # sessions deleted meanwhile, announcing one that still exists, announcing one twice, or
    # missing the rest of the state it resyncs.
    host, local = topo.bridged()
    seen = Seen(local)
    main = topo.main_fake
    main_deleted = main.add_observer(ev.ON_DELETED)
    for sid, metadata in (("keep", {"owner": "u_1"}), ("gone", {"owner": "u_1"}), ("bare", None)):
        main.invoke("session::ensure", {"session_id": sid, **({"metadata": metadata} if metadata else {})})
    local.invoke("session::ensure", {"session_id": "mine", "metadata": {"owner": "u_2"}})  # its own, via the main
    main.invoke("session::append", {"session_id": "gone", "entry_id": "g1", "message": user("g")})
    topo.settle()
    assert sorted(e["session_id"] for e in seen.obs[ev.ON_CREATED].delivered) == ["bare", "gone", "keep", "mine"]
    link = topo.connections[0]

    link.drop()
    mark = seen.mark()
    for sid in ("gone", "bare", "mine"):
        main.invoke("session::delete", {"session_id": sid})
    main.invoke("session::append", {"session_id": "keep", "entry_id": "k1", "message": user("k")})
    main.invoke("session::ensure", {"session_id": "new"})
    topo.settle()
    assert seen.since(mark, ev.ON_DELETED) == []  # lost with the link, as the engine would lose them
    link.restore()
    topo.settle()

    deleted = seen.since(mark, ev.ON_DELETED)
    assert sorted(e["session_id"] for e in deleted) == ["bare", "gone", "mine"]
    by_id = {e["session_id"]: e for e in deleted}
    assert by_id["gone"] == {"session_id": "gone", "timestamp": topo.clock.now_ms(),
                             "session_metadata": {"owner": "u_1"}}
    assert by_id["mine"]["session_metadata"] == {"owner": "u_2"}
    assert by_id["bare"] == {"session_id": "bare", "timestamp": topo.clock.now_ms()}
    for e in deleted:
        assert ev.DeletedEvent.model_validate(e).session_id == e["session_id"]
    assert [e["session_id"] for e in seen.tenant.delivered] == ["gone"]  # the tenant filter still matches
    # The rest of the resync, once each: every live session and its entries; nothing for the gone ones.
    assert Counter(e["session_id"] for e in seen.since(mark, ev.ON_CREATED)) == {"keep": 1, "new": 1}
    assert [e["entry_id"] for e in seen.since(mark, ev.ON_MESSAGE_ADDED)] == ["k1"]
    # Local only: the main's observers saw each deletion once (their own), nothing from the resync.
    assert sorted(e["session_id"] for e in main_deleted.delivered) == ["bare", "gone", "mine"]
    # Read-back through the bridge, and what it remembers of them is dropped.
    listed = local.invoke("session::list", {})["sessions"]
    assert sorted(s["session_id"] for s in listed) == ["keep", "new"]
    assert local.invoke("session::get", {"session_id": "gone"}) is None
    bridge = host.runtime.bridge
    assert bridge is not None
    assert "gone" not in bridge.known and "mine" not in bridge.known and "new" in bridge.known

    # A second outage with nothing deleted: a resync, no deletion announced again.
    again = seen.mark()
    link.drop()
    link.restore()
    topo.settle()
    assert seen.since(again, ev.ON_DELETED) == []
    assert Counter(e["session_id"] for e in seen.since(again, ev.ON_CREATED)) == {"keep": 1, "new": 1}


def test_live_events_after_the_resync_still_flow_once(topo: Topology) -> None:
    # Prevents: the relay staying detached after the link is back, or the resync doubling
    # the events that follow it.
    _host, local = topo.bridged()
    seen = Seen(local)
    topo.main_fake.invoke("session::ensure", {"session_id": "a"})
    topo.settle()
    link = topo.connections[0]
    link.drop()
    link.restore()
    topo.settle()
    mark = seen.mark()
    topo.main_fake.invoke("session::delete", {"session_id": "a"})
    local.invoke("session::ensure", {"session_id": "b"})
    topo.settle()
    assert [e["session_id"] for e in seen.since(mark, ev.ON_DELETED)] == ["a"]
    assert [e["session_id"] for e in seen.since(mark, ev.ON_CREATED)] == ["b"]
