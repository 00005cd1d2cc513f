"""A catalog built from a sessions index (metas still JSON, list orders read
from the file) pages exactly as sorting and filtering everything would, and
keeps doing so through later puts and removes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from session_manager._service.listing import metadata_matches
from session_manager.store.fs import _cold_list, _sessions_index
from session_manager.store.fs._catalog import ORDERS
from tests.property.test_catalog import METAS, VALUES, apply_ops, naive

IDS = [f"s{i}" for i in range(12)]


@settings(max_examples=200, deadline=None)
@given(
    recorded=st.lists(METAS, max_size=10, unique_by=lambda m: m["session_id"]),
    bare=st.sets(st.sampled_from(["x0", "x1"])),
    ops=st.lists(st.one_of(METAS, st.sampled_from(IDS)), max_size=10),
    order=st.sampled_from(sorted(ORDERS)),
    after=st.one_of(st.none(), st.tuples(st.integers(-1, 7), st.sampled_from(["s0", "s5", "s9", "t"]))),
    limit=st.integers(1, 5),
    status=st.one_of(st.none(), st.sampled_from(["idle", "running"])),
    want=st.one_of(st.none(), st.dictionaries(st.sampled_from(["k", "j"]), VALUES, max_size=2)),
)
def test_a_catalog_from_the_index_pages_like_a_full_sort(
        tmp_path_factory: Any, recorded: list[dict[str, Any]], bare: set[str], ops: list[Any], order: str,
        after: tuple[int, str] | None, limit: int, status: str | None, want: dict[str, Any] | None) -> None:
    # Prevents: the recorded list orders or the lazily decoded metas drifting from the metas (a
    # page reading a position the index does not hold, a put or remove missing a key it never listed).
    index_file = Path(tmp_path_factory.mktemp("cat")) / "sessions.list"
    rows = [(f"{m['session_id']}.jsonl", _sessions_index.row(m["session_id"], (n, n, n, n), m))
            for n, m in enumerate(recorded)]
    rows += [(f"{sid}.jsonl", _sessions_index.row(sid, (99, 0, 0, 0), None)) for sid in sorted(bare)]
    _sessions_index.write(index_file, rows)
    rec = _sessions_index.read(index_file)
    assert rec is not None
    catalog = _cold_list.catalog(_cold_list.ColdList(rec))
    metas = {m["session_id"]: m for m in recorded}

    def match(m: dict[str, Any]) -> bool:
        return (status is None or m["status"] == status) and (not want or metadata_matches(want, m["metadata"]))

    cold, more = catalog.page(order, after, limit, lambda m: True)  # decodes a few, leaves the rest pending
    assert ([m["session_id"] for m in cold], more) == naive(metas, order, after, limit, None, None)
    apply_ops(catalog, metas, ops)
    assert len(catalog) == len(metas)
    page, more = catalog.page(order, after, limit, match, status=status, metadata=want)
    assert ([m["session_id"] for m in page], more) == naive(metas, order, after, limit, status, want)
    assert page == [metas[m["session_id"]] for m in page]  # the metas themselves, decoded exactly
    assert sorted(catalog.values(), key=lambda m: m["session_id"]) == sorted(metas.values(),
                                                                            key=lambda m: m["session_id"])
