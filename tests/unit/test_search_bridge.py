"""``session::search`` through a bridge: run on the main (``session::store::search``), against the
main's index, the tenant filter resolved on the bridge; a main without that call (a Rust one) is
``session/storage`` naming what is unsupported."""

from __future__ import annotations

from pathlib import Path

import pytest
from iii import InvocationError

from session_manager.store.bridge import protocol_search as searching
from tests.unit.test_bridge import Topology, user


@pytest.fixture
def topo(tmp_path: Path) -> Topology:
    return Topology(tmp_path)


def test_bridged_search_runs_on_the_main_and_answers_as_the_main(topo: Topology) -> None:
    # Prevents: a bridged search scanning every entry over the wire, or answering other hits than the main.
    try:
        _host, local = topo.bridged()
        for owner, text in [("ann", "red apple pie"), ("bob", "red apple juice"), ("ann", "green pear")]:
            sid = local.invoke("session::create", {"metadata": {"owner": owner}})["session_id"]
            local.invoke("session::append", {"session_id": sid, "message": user(text)})
        topo.settle()
        request = {"query": "red app", "metadata": {"owner": "ann"}}
        bridged = local.invoke("session::search", request)
        assert bridged == topo.main_fake.invoke("session::search", request)
        assert [h["snippet"] for h in bridged["hits"]] == ["red apple pie"]
        calls = [t["function_id"] for c in topo.connections for t in c.triggers]
        assert searching.SEARCH in calls and "session::store::list-entries" not in calls
    finally:
        topo.close()


def test_bridged_search_on_a_main_without_it_is_storage_naming_it(topo: Topology) -> None:
    # Prevents: a Rust main's function_not_found surfacing raw, or flipping the bridge's writes to legacy mode.
    try:
        _host, local = topo.bridged()
        topo.main_fake.unregister(searching.SEARCH)
        with pytest.raises(InvocationError) as err:
            local.invoke("session::search", {"query": "red"})
        text = str(err.value)
        assert "session/storage" in text and searching.SEARCH in text and "unsupported" in text
        sid = local.invoke("session::create", {})["session_id"]  # writes still atomic
        local.invoke("session::append", {"session_id": sid, "message": user("still fine")})
        calls = [t["function_id"] for c in topo.connections for t in c.triggers]
        assert "session::store::commit" in calls and "session::store::put-meta" not in calls  # not legacy
    finally:
        topo.close()
