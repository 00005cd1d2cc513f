"""review14: the service skips a store's settle only where the store has none (pgcli5 made the
skip): a store giving its settle as an instance attribute (as the fs store does for speed) is
still waited on."""

from __future__ import annotations

from typing import Any

import session_manager


class _Settling(session_manager.MemoryStore):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settled = 0
        self.settle = self._count  # type: ignore[method-assign]

    def _count(self) -> None:
        self.settled += 1


def test_a_settle_given_as_an_instance_attribute_is_called_after_each_mutation() -> None:
    # Prevents: the service deciding from the store's class alone that there is nothing to wait
    # for, so a mutation over a store whose settle is its own attribute answered before its
    # write was durable.
    store = _Settling()
    with session_manager.open(store=store) as sm:
        sid = sm.call("session::create", {})["session_id"]
        before = store.settled
        sm.call("session::append", {"session_id": sid,
                                    "message": {"role": "user", "content": [{"type": "text", "text": "x"}],
                                                "timestamp": 1}})
        assert store.settled == before + 1

