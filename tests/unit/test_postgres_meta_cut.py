"""The meta text an append held off for the server sends (``at_leaf.segments``, issue 24): taken
from the known text's cut, not encoded again, it must be byte for byte the encoder's. No server."""

from __future__ import annotations

from typing import Any

from session_manager.store.base import Commit, append_commit
from session_manager.store.postgres.at_leaf import HOLE, segments
from session_manager.store.postgres.plan import Known
from session_manager.store.sql.values import json_text


def _entry(entry_id: str, ts: int) -> dict[str, Any]:
    return {"kind": "message", "id": entry_id, "parent_id": HOLE, "timestamp": ts, "revision": 0,
            "origin": None, "message": {"role": "user", "content": "x", "timestamp": 1}}


def _known(meta: dict[str, Any]) -> Known:
    return Known(meta, json_text(meta), "e0")


def test_a_meta_derived_from_the_known_one_is_sent_as_its_exact_encoding() -> None:
    # Prevents: the cut's text (now used without encoding the meta) differing from the encoder's
    # bytes: odd key order (the count before the time), non-ASCII, nested metadata, big numbers.
    meta = {"session_id": "s\u00e9", "message_count": 9, "title": "t\u2028\"q\"", "updated_at": 10**12,
            "metadata": {"k": ["v\u00e9", {"n": 1.5}]}, "status": "idle", "created_at": 1}
    known = _known(meta)
    for ts in (10**12 + 1, 10**15, 7):
        entry = _entry(f"e{ts}", ts)
        resolved = append_commit(known.meta, (entry,), chain=True)
        made = segments(known, resolved, json_text(entry))
        assert made is not None
        cut, text = made
        assert text == json_text(resolved.meta)
        assert cut.added == 1


def test_a_meta_not_derived_from_the_known_one_is_still_checked() -> None:
    # Prevents: trusting any commit's meta as derived: one that differs from the known meta in
    # more than the two numbers an append changes is not left to the server.
    meta = {"session_id": "s", "title": "a", "updated_at": 5, "message_count": 1}
    known = _known(meta)
    entry = _entry("e1", 6)
    other = {**meta, "title": "b", "updated_at": 6, "message_count": 2}
    assert segments(known, Commit(entries=(entry,), leaf="e1", meta=other, append=True, chain=True),
                    json_text(entry)) is None
    same = {**meta, "updated_at": 6, "message_count": 2}
    made = segments(known, Commit(entries=(entry,), leaf="e1", meta=same, append=True, chain=True),
                    json_text(entry))
    assert made is not None and made[1] == json_text(same)
