"""Review 19's attacks on the page memo's compiled shapes (``_service/page_memo.py``, "The warm
tail's copy"): odd keys and values answered byte for byte with every value's type kept, the
plan's bytes a bound of what it holds, concurrent readers of a page a writer moves on."""

from __future__ import annotations

import gc
import random
import string
import tracemalloc
from typing import Any

import orjson
import pytest

from session_manager._service import page_memo
from session_manager._service.page_memo import PageMemo


@pytest.fixture
def shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process-wide shape cache of this test's own (its many structures must not fill the real one)."""
    monkeypatch.setattr(page_memo, "_SHAPES", {})
    monkeypatch.setattr(page_memo, "MAX_SHAPES", 1 << 20)
    monkeypatch.setattr(page_memo, "MAX_NEW_SHAPES", 1 << 20)


def typed(value: Any) -> Any:
    """``value`` with each leaf's type beside it (1, 1.0 and True are equal in Python; not here)."""
    if type(value) is dict:
        return ("d", [(k, typed(v)) for k, v in value.items()])
    if type(value) is list:
        return ("l", [typed(v) for v in value])
    return (type(value).__name__, repr(value))


ODD_KEYS = ["a", "'", '"', "\\", "\n", "}", "]", "{", ")", "é", "\U0001f600", "\u2028", "t[0]", "__import__('os')",
            "'''", '"""', "\\'", "\x00", "", " ", "a'b\"c", "#", "lambda", "}]})"]
LEAVES: list[Any] = [1, 1.0, True, False, None, 0, 0.0, -0.0, "x", "", 2 ** 63 - 1, -(2 ** 63), 1e308, 5e-324,
                     "é\u2028", "}"]


def _value(r: random.Random, depth: int) -> Any:
    k = r.random()
    if depth > 5 or k < 0.5:
        return r.choice(LEAVES)
    if k < 0.75:
        return [_value(r, depth + 1) for _ in range(r.randint(0, 4))]
    return {key: _value(r, depth + 1) for key in r.sample(ODD_KEYS, r.randint(0, 5))}


def _page(r: random.Random) -> dict[str, Any]:
    items = [_value(r, 0) if r.random() < 0.3 else {key: _value(r, 1) for key in r.sample(ODD_KEYS, r.randint(0, 6))}
             for _ in range(r.randint(0, 6))]
    built: dict[str, Any] = {"messages": items, "has_more": r.choice(LEAVES), "x": _value(r, 0)}
    for key in r.sample(ODD_KEYS, 3):
        built[key] = _value(r, 0)
    return built


def test_random_odd_pages_are_answered_from_their_shapes_byte_for_byte_with_each_type_kept(shapes: None) -> None:
    # Prevents: a compiled shape answering other bytes or another type than the decoding (a key with
    # a quote, backslash, newline, brace or bracket breaking or changing the display; 1, 1.0 and True,
    # equal in Python, sharing a cached shape's constant; -0.0 turned 0.0; key order lost), or an
    # answer a caller changes showing in the next one.
    planned = 0
    for seed in range(600):
        built = _page(random.Random(seed))
        memo = PageMemo()
        memo.keep("k", 1, built)
        kept = memo.get("k")
        assert kept is not None
        line, shape = orjson.dumps(built), typed(built)
        for _ in range(page_memo.PLAN_AFTER + 3):
            answer = memo.page(kept)
            assert orjson.dumps(answer) == line and typed(answer) == shape, seed
            for value in answer.values():  # (the caller's own containers)
                if type(value) is list:
                    value.append("mine")
                elif type(value) is dict:
                    value["mine"] = 1
        planned += bool(kept[2][0])
    assert planned > 500  # (the shapes answered nearly every page: the attack reached them)


def test_items_alike_but_in_key_order_or_leaf_type_get_their_own_answers(shapes: None) -> None:
    # Prevents: two items whose keys are equal but ordered differently sharing one shape (an answer's
    # key order is its bytes), or a leaf's type taken from another item of the same structure.
    items = [{"a": 1, "b": [1]}, {"b": [1], "a": 1}, {"a": 1.0, "b": [True]}, {"a": True, "b": [1.0]},
             {"a": "1", "b": [None]}]
    built = {"messages": items * 3, "has_more": False}
    memo = PageMemo()
    memo.keep("k", 1, built)
    kept = memo.get("k")
    assert kept is not None
    for _ in range(page_memo.PLAN_AFTER + 2):
        answer = memo.page(kept)
        assert orjson.dumps(answer) == orjson.dumps(built) and typed(answer) == typed(built)
    assert kept[2][0]


def _plan_bytes(built: dict[str, Any]) -> tuple[int, int]:
    """What the memo counts for ``built``'s plan, and what the plan holds (tracemalloc: the
    memory still allocated once its planning answer is dropped; a memo whose bytes it fits)."""
    memo = PageMemo(max_bytes=1 << 30)
    memo.keep("k", 1, built)
    kept = memo.get("k")
    assert kept is not None
    for _ in range(page_memo.PLAN_AFTER - 1):
        memo.page(kept)
    counted = memo._bytes
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        answer = memo.page(kept)  # (the PLAN_AFTER-th: planned)
        del answer
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert kept[2][0], "planned"
    return memo._bytes - counted, sum(stat.size_diff for stat in after.compare_to(before, "filename"))


def test_a_plans_counted_bytes_bound_what_its_templates_hold(shapes: None) -> None:
    # Prevents: MAX_BYTES exceeded by the plans' values. A dict of values alone is kept as one
    # template counted as one value (_PER_VALUE) while it holds a float and a table slot per key:
    # items of many short keys and floats held ~1.7x the bytes counted.
    keys = [a + b for a in string.ascii_letters for b in string.ascii_letters][:250]
    for built in ({"messages": [{"m": dict.fromkeys(keys, 0.5)} for _ in range(60)]},
                  {"messages": [dict.fromkeys(string.ascii_letters + string.digits, 0.5) for _ in range(1000)]},
                  {"messages": [{"a": {"b": 0.5 + i, "c": 1.5 + i}} for i in range(2000)]}):
        counted, held = _plan_bytes(built)
        assert held <= counted, (held, counted)


def test_the_process_wide_shapes_hold_a_few_mib_whatever_characters_their_keys_take(shapes: None) -> None:
    # Prevents: the shape cache (process-wide, never emptied) holding far more than its bound says:
    # MAX_SHAPE_SOURCE counted a source's characters, and a key of characters past U+FFFF takes 4
    # bytes each (the source, and again the key constants of its code): 512 shapes of such keys
    # held ~17 MiB where ASCII ones hold ~5.
    n = 96  # (pages made here: half of keys past U+FFFF, half ASCII, each source just within 4,096 characters)
    gc.collect()
    tracemalloc.start()
    try:
        for i in range(n):
            wide = "\U0001f600" if i % 2 else "x"
            item = {f"{wide}{i}-{j}-" + wide * 180: [0] for j in range(20)}
            memo = PageMemo()
            memo.keep("k", 1, {"messages": [item]})
            kept = memo.get("k")
            assert kept is not None
            for _ in range(page_memo.PLAN_AFTER):
                assert orjson.dumps(memo.page(kept)) == orjson.dumps({"messages": [item]})
        del memo, kept, item
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(page_memo._SHAPES) >= n // 2  # (the ASCII ones compiled)
    assert held / n * 512 < 8 * 1024 * 1024, held / n * 512 / 2 ** 20  # (a full cache of them under 8 MiB)
