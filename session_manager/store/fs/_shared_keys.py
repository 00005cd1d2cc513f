"""Compact forms of what the fs store keeps for every session, not only the loaded ones.

A meta read from a log's tail is a fresh ``json.loads``: its keys are new
string objects each time (the decoder shares keys within one call only), so
10k peeked metas would hold 10k copies of ``"session_id"``, ``"updated_at"``
and the rest, about 40 % of each meta's memory (measured: ~1,300 bytes per
meta against ~780 with shared keys). The catalog keeps one meta per session
for the life of the store, so the metas it decodes one at a time (peeked
tails, pending records of the sessions index) share their keys here.
"""

from __future__ import annotations

from sys import intern
from typing import Any

Meta = dict[str, Any]


def shared_keys(meta: Meta) -> Meta:
    """``meta`` with its keys, its metadata's keys and its status interned
    (same items, same order: what is written or answered never changes)."""
    out = {intern(k): v for k, v in meta.items()}
    metadata = out.get("metadata")
    if type(metadata) is dict:
        out["metadata"] = {intern(k): v for k, v in metadata.items()}
    status = out.get("status")
    if type(status) is str:
        out["status"] = intern(status)  # one of a few values, repeated in every meta
    return out
