"""The list catalog pages exactly as sorting and filtering everything would."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from session_manager._service.listing import metadata_matches
from session_manager.store.fs._catalog import ORDERS, MetaCatalog

VALUES = st.sampled_from([1, 1.0, 2, True, False, None, "a", "b", [1], [1.0], {"x": 1}, {"x": True}])
METAS = st.fixed_dictionaries({
    "session_id": st.sampled_from([f"s{i}" for i in range(12)]),
    "status": st.sampled_from(["idle", "running", "archived"]),
    "created_at": st.integers(0, 6),
    "updated_at": st.integers(0, 6),
    "metadata": st.one_of(st.none(), st.dictionaries(st.sampled_from(["k", "j"]), VALUES, max_size=2)),
})



def apply_ops(catalog: MetaCatalog, metas: dict[str, dict[str, Any]], ops: list[Any]) -> None:
    """Apply puts (a meta) and removes (a session id) to the catalog and to the plain dict it is checked against."""
    for op in ops:
        if isinstance(op, str):
            catalog.remove(op)
            metas.pop(op, None)
        else:
            catalog.put(op)
            metas[op["session_id"]] = op

def naive(metas: dict[str, dict[str, Any]], order: str, after: tuple[int, str] | None, limit: int,
          status: str | None, want: dict[str, Any] | None) -> tuple[list[str], bool]:
    """The rule the service applied before the catalog: filter, sort everything, cut."""
    field, descending = ORDERS[order]
    kept = [m for m in metas.values()
            if (status is None or m["status"] == status) and (not want or metadata_matches(want, m["metadata"]))]
    keyed = sorted((m[field], m["session_id"]) for m in kept)
    if descending:
        keyed.reverse()
    if after is not None:
        keyed = [k for k in keyed if (k < after if descending else k > after)]
    return [sid for _, sid in keyed[:limit]], len(keyed) > limit


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(st.one_of(METAS, st.sampled_from([f"s{i}" for i in range(12)])), max_size=40),
    order=st.sampled_from(sorted(ORDERS)),
    after=st.one_of(st.none(), st.tuples(st.integers(-1, 7), st.sampled_from(["s0", "s5", "s9", "t"]))),
    limit=st.integers(1, 5),
    status=st.one_of(st.none(), st.sampled_from(["idle", "running"])),
    want=st.one_of(st.none(), st.dictionaries(st.sampled_from(["k", "j"]), VALUES, max_size=2)),
)
def test_pages_match_a_full_sort(ops: list[Any], order: str, after: tuple[int, str] | None, limit: int,
                                 status: str | None, want: dict[str, Any] | None) -> None:
    # Prevents: the maintained index drifting from the metas (a stale key after an update or delete)
    # or a filter bucket dropping a match the equality rule accepts (1 == 1.0, true != 1).
    catalog = MetaCatalog()
    metas: dict[str, dict[str, Any]] = {}
    apply_ops(catalog, metas, ops)
    assert len(catalog) == len(metas)

    def match(m: dict[str, Any]) -> bool:
        return (status is None or m["status"] == status) and (not want or metadata_matches(want, m["metadata"]))

    page, more = catalog.page(order, after, limit, match, status=status, metadata=want)
    assert ([m["session_id"] for m in page], more) == naive(metas, order, after, limit, status, want)
    rebuilt = MetaCatalog(list(metas.values()))
    page2, more2 = rebuilt.page(order, after, limit, match, status=status, metadata=want)
    assert (page2, more2) == (page, more)
