"""``session::list``: filter by status and metadata subset, order, page."""

from __future__ import annotations

from typing import Any

from .._wire import api, cursors
from .._wire.shape import build
from .core import Result, ServiceCore
from .storage_errors import storage_errors


class Listing(ServiceCore):
    def list_sessions(self, req: api.ListRequest) -> Result:
        order = req.order or "updated_desc"
        limit = self._limit(req.limit)
        with storage_errors():
            metas = self.store.list_metas()
        if req.status is not None:
            metas = [m for m in metas if m.get("status") == req.status]
        if req.metadata:
            want = req.metadata
            metas = [m for m in metas if _metadata_matches(want, m.get("metadata"))]
        key_field = "updated_at" if order == "updated_desc" else "created_at"
        descending = order != "created_asc"
        keyed = sorted(((m[key_field], m["session_id"]), m) for m in metas)
        if descending:
            keyed.reverse()
        start = 0
        if req.cursor is not None:
            after = cursors.decode_list_cursor(req.cursor, order)
            start = len(keyed)
            for i, (key, _) in enumerate(keyed):
                if (key < after) if descending else (key > after):
                    start = i
                    break
        page = keyed[start : start + limit]
        next_cursor = None
        if start + limit < len(keyed):  # limit >= 1, so the page is not empty
            (k, sid), _ = page[-1]
            next_cursor = cursors.list_cursor(order, k, sid)
        return build[api.ListResponse](sessions=[m for _, m in page], next_cursor=next_cursor), []


def _metadata_matches(want: dict[str, Any], have: Any) -> bool:
    if not want:
        return True
    if not isinstance(have, dict):
        return False
    return all(k in have and _json_equal(have[k], v) for k, v in want.items())


def _json_equal(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1, and 1 equals 1.0 only as numbers.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
