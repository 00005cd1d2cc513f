"""Review 21: ``session::create`` whose drawn id is already stored (an injected generator
repeating it, or another instance's fork or create that drew it first) draws again, on every
store. sqlite's commit inside a mutation took the create's compare-and-set (``expect_meta``
None: no session yet) as decided in its transaction, which a create never read: it wrote the
new meta over the stored session (its title, fork origin and count; its entries left under a
meta counting none)."""

from __future__ import annotations

from typing import Any

import session_manager
from tests.unit.store_openers import store_opener_fixture  # noqa: F401 (the fixture "opener")
from tests.unit.test_append_new_ids_taken import Scripted, text


class TwiceX(Scripted):
    """Session ids ``X``, ``X``, then the sequence."""

    def __init__(self) -> None:
        super().__init__()
        self.sids = ["X", "X"]

    def session_id(self) -> str:
        return self.sids.pop(0) if self.sids else super().session_id()


def test_a_create_whose_drawn_id_is_stored_draws_again_and_leaves_that_session_alone(opener: Any) -> None:
    # Prevents: sqlite's create writing its new meta over a stored session of the drawn id
    # (title "second", message_count 0, the entry still stored under it).
    store = opener()
    sm = session_manager.open(store=store, ids=TwiceX())
    created: list[str] = []
    sm.observe({"function_id": session_manager.ON_CREATED}, lambda e: created.append(e["session_id"]))
    try:
        assert sm.call("session::create", {"title": "first"})["session_id"] == "X"
        sm.call("session::append", {"session_id": "X", "message": text("hi")})
        second = sm.call("session::create", {"title": "second"})
        assert second["session_id"] != "X" and second["meta"]["title"] == "second"
        x = sm.call("session::get", {"session_id": "X"})["meta"]
        assert (x["title"], x["message_count"]) == ("first", 1)
        assert [e["message"]["content"][0]["text"] for e in store.entries("X")] == ["hi"]
        assert sm.call("session::get", {"session_id": second["session_id"]})["meta"]["message_count"] == 0
        assert created == ["X", second["session_id"]]
    finally:
        sm.close()
    again = opener()  # after a restart: the same
    try:
        assert again.get_meta("X")["title"] == "first"
        assert again.get_meta(second["session_id"])["title"] == "second"
    finally:
        again.close()
