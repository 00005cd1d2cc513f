"""The model test of :mod:`tests.property.test_model` with the fs store's write path under
pressure: a cache too small to keep more than a session or two (eviction on nearly every
call, lazy bodies read back from the log), indexes saved every few hundred bytes,
background rewrites every couple of KiB (small ones remove the replaced index, larger
ones write one), and every list order and filter compared, ties on a frozen clock
included. Every step is checked against the model, and again after each restart."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

import session_manager
from session_manager import SessionManager
from session_manager._wire.events import EVENT_FUNCTIONS
from session_manager.store import FsStore
from session_manager.store.fs import _logfiles, _rewrite
from tests.property.test_model import SessionModel, shards, texts

ORDERS = {"updated_desc": ("updated_at", True), "created_desc": ("created_at", True),
          "created_asc": ("created_at", False)}


def _matches(meta: dict[str, Any], status: str | None, metadata: dict[str, Any] | None) -> bool:
    if status is not None and meta["status"] != status:
        return False
    if metadata:  # an empty filter matches every session
        have = meta.get("metadata")
        return isinstance(have, dict) and all(k in have and have[k] == v for k, v in metadata.items())
    return True


class PressuredModel(SessionModel):
    # Prevents: the one-pass append bookkeeping (entries put located, one cache charge, the catalog's
    # in-place move, the budget checked once) or a small log's index-less rewrite (inline or in the
    # background) reading back other than the model once sessions are evicted, rewritten and reopened.
    cache_bytes = 6000  # a session or two: evicted on nearly every call (a rewrite in flight is abandoned)

    def __init__(self) -> None:
        self._saved = (_logfiles.SAVE_MIN_BYTES, _rewrite.RATIO, _rewrite.SLACK, _rewrite.SOFT_SLACK,
                       _rewrite.INLINE_LIVE)
        _logfiles.SAVE_MIN_BYTES = 1500
        # A rewrite starts once a few hundred bytes are superseded, and rarely must land inline; a
        # session of one or two entries is small (rewritten inline at the hard line), a longer one not.
        _rewrite.RATIO, _rewrite.SLACK, _rewrite.SOFT_SLACK = 2, 1500, 150
        _rewrite.INLINE_LIVE = 900
        super().__init__()

    def open(self) -> SessionManager:
        sm = session_manager.open(self.dir, ids=self.ids, clock=self.clock, cache_bytes=self.cache_bytes)
        for fid in EVENT_FUNCTIONS:
            sm.observe({"function_id": fid}, lambda _e, fid=fid: self.fired.append(fid))
        return sm

    @precondition(lambda self: bool(self.sessions))
    @rule(data=st.data(), n=st.integers(3, 25), text=texts)
    def stream(self, data: st.DataObject, n: int, text: str) -> None:
        # A streamed reply: one entry revised n times in a row (what fills a log with superseded lines).
        for k in range(n):
            self.update_message(data, f"{text} {k}", "none")

    @rule()
    def let_rewrites_land(self) -> None:
        store = self.sm.service.store
        assert isinstance(store, FsStore) and store._compactor is not None
        for sid in list(self.sessions):
            store._compactor.wait(sid)

    @rule(order=st.sampled_from(sorted(ORDERS)), status=st.one_of(st.none(), st.sampled_from(["idle", "done"])),
          metadata=st.sampled_from([None, {}, {"owner": "u_1"}, {"owner": "u_2"}, {"n": [1, 2]}]),
          page=st.integers(1, 3))
    def list_in_order(self, order: str, status: str | None, metadata: dict[str, Any] | None, page: int) -> None:
        # Prevents: the catalog's in-place move of the session written last breaking an order, a
        # cursor or a filter (equal timestamps on the frozen clock: ties go by session id).
        field, descending = ORDERS[order]
        want = sorted((s.meta for s in self.sessions.values() if _matches(s.meta, status, metadata)),
                      key=lambda m: (m[field], m["session_id"]), reverse=descending)
        listed: list[dict[str, Any]] = []
        payload: dict[str, Any] = {"limit": page, "order": order}
        if status is not None:
            payload["status"] = status
        if metadata is not None:
            payload["metadata"] = metadata
        while True:
            got = self.call("session::list", payload)
            listed.extend(got["sessions"])
            if "next_cursor" not in got:
                break
            payload["cursor"] = got["next_cursor"]
        assert listed == [copy.deepcopy(m) for m in want], (order, status, metadata)

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            (_logfiles.SAVE_MIN_BYTES, _rewrite.RATIO, _rewrite.SLACK,
             _rewrite.SOFT_SLACK, _rewrite.INLINE_LIVE) = self._saved


class RoomyPressuredModel(PressuredModel):
    cache_bytes = 200_000  # every session stays: background rewrites land (small and indexed ones)


# 40 examples x 60 steps each, in two shards apiece (~64 s and ~51 s on one worker when whole), so the
# workers share them.
TestPressuredModel1, TestPressuredModel2 = shards(PressuredModel, 40, 60, 2)
TestRoomyPressuredModel1, TestRoomyPressuredModel2 = shards(RoomyPressuredModel, 40, 60, 2)
