"""review14: an append at a session state (append_at, no parent named) over a store whose commit
does not check the leaf itself (the bridge) is refused when another writer appended between its
read and its commit."""

from __future__ import annotations

from typing import Any

import session_manager


def test_an_append_at_a_leaf_over_the_bridge_is_refused_when_another_writer_appended_in_between(
        tmp_path: Any) -> None:
    # Prevents: the append_at fix (not chained: placed on the leaf it names) turning, over a store
    # whose commit does not check the leaf (the bridge: the main appends under the named parent),
    # into a fork that takes the other writer's entry off the active path: the commit carries the
    # meta it read (another writer's append changes it), so it conflicts and LeafMoved follows.
    from session_manager._service.appending import LeafMoved
    from session_manager.store.bridge.store import BridgeStore
    from tests.unit.test_bridge import open_bridge_store

    stores = open_bridge_store(tmp_path)
    store = next(stores)
    other = BridgeStore(store.client.engine.connection("second-bridge"), store.timeout_ms)
    try:
        with session_manager.open(store=store) as mine, session_manager.open(store=other) as theirs:
            made = mine.call("session::ensure", {"session_id": "s"})["meta"]["created_at"]
            first = mine.call("session::append", {"session_id": "s", "custom": {"custom_type": "x"}})["entry_id"]
            real = store.meta_and_leaf_to_commit
            armed = [True]

            def read_then_moved(session_id: str) -> Any:
                out = real(session_id)
                if armed[0]:  # (the other writer appends between this read and the commit)
                    armed[0] = False
                    theirs.call("session::append", {"session_id": "s", "custom": {"custom_type": "t"}})
                return out

            store.meta_and_leaf_to_commit = read_then_moved  # type: ignore[method-assign]
            try:
                mine._call_owned("session::append", {"session_id": "s", "custom": {"custom_type": "y"}},
                                 at=(made, first))
                raise AssertionError("appended after the leaf moved")
            except LeafMoved:
                pass
            entries = theirs.service.store.entries("s")
            assert len(entries) == 2 and len({e["parent_id"] for e in entries}) == 2  # (no fork, nothing of mine)
    finally:
        next(stores, None)
