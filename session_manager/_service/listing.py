"""``session::list``: filter by status and metadata subset, order, page."""

from __future__ import annotations

from typing import Any

from .._wire import api, cursors
from .._wire.shape import build
from .core import Result, ServiceCore
from .storage_errors import storage_errors

__all__ = ["json_canonical", "list_sessions", "metadata_matches"]


def list_sessions(core: ServiceCore, req: api.ListRequest) -> Result:
    order = req.order or "updated_desc"
    limit = core.page_size(req.limit)
    after = cursors.decode_list_cursor(req.cursor, order) if req.cursor is not None else None
    key_field = "updated_at" if order == "updated_desc" else "created_at"
    want = req.metadata or None
    page: list[Any] = []
    more = False
    with storage_errors():
        # The store yields candidates in order (from an index where it has
        # one); the filter rule is ours, and one extra match tells "more".
        for m in core.store.ordered_metas(order, after, req.status, want):
            if req.status is not None and m.get("status") != req.status:
                continue
            if want is not None and not metadata_matches(want, m.get("metadata")):
                continue
            if len(page) == limit:
                more = True
                break
            page.append(m)
    next_cursor = None
    if more and page:
        next_cursor = cursors.list_cursor(order, page[-1][key_field], page[-1]["session_id"])
    return build[api.ListResponse](sessions=page, next_cursor=next_cursor), []


def metadata_matches(want: dict[str, Any], have: Any) -> bool:
    if not want:
        return True
    if not isinstance(have, dict):
        return False
    return all(k in have and _json_equal(have[k], v) for k, v in want.items())


def json_canonical(value: Any) -> Any:
    """``value`` with each whole float as its int: one spelling for the values :func:`_json_equal`
    holds equal (``1`` and ``1.0``, ``-0.0`` and ``0``; ``true`` stays a boolean, never ``1``), so
    a digest of a filter names the sessions it matches, not how it was written."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: json_canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_canonical(v) for v in value]
    return value


def _json_equal(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1, and 1 equals 1.0 only as numbers.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
