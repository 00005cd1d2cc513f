"""The service's kept pages (``_service/page_memo.py``): each answer a copy of its own,
every value exactly as built, or the page not kept."""

from __future__ import annotations

import contextlib
from typing import Any

import orjson

from session_manager._service import page_memo
from session_manager._service.page_memo import PageMemo


def page(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"entry_id": "e1", "message": {"role": "user", "timestamp": 2 ** 62, "score": 0.1,
                                                        "content": [{"type": "text", "text": "é \u2028"}], **extra}},
                         {"entry_id": "e2", "elided": True, "message": None}],
            "has_more": False, "oldest_entry_id": "e1"}


def test_a_kept_page_is_answered_exactly_and_as_containers_of_its_own() -> None:
    # Prevents: a value changed by the copy (a float's last bits, a large integer, a string),
    # or two answers sharing a container (one caller's change showing in another's answer).
    memo = PageMemo()
    memo.keep("k", "v1", page())
    kept = memo.get("k")
    assert kept is not None and kept[0] == "v1"
    first, second = memo.page(kept), memo.page(kept)
    assert first == second == page()
    first["messages"][0]["message"]["content"][0]["text"] = "mine"
    first["messages"][1]["elided"] = False
    first["messages"].append({})
    assert second == page()
    assert memo.page(kept) == page()


def test_a_page_the_copy_cannot_write_exactly_is_not_kept() -> None:
    # Prevents: a page answered later with a value the copy changed or dropped (an integer
    # past 64 bits read back as a float, a lone surrogate, an object of no JSON type).
    for odd in ({"big": 2 ** 70}, {"lone": "\ud800"}, {"thing": object()}):
        memo = PageMemo()
        memo.keep("k", "v1", page(**odd))
        assert memo.get("k") is None


def answers(memo: PageMemo, n: int = 3) -> list[Any]:
    """The last ``n`` of ``PLAN_AFTER + n`` answers (the page's shape planned, when it can be,
    before the first of them: its PLAN_AFTER-th answer)."""
    kept = memo.get("k")
    assert kept is not None
    got = [memo.page(kept) for _ in range(page_memo.PLAN_AFTER + n)]
    return got[-n:]


ODD_PAGE: dict[str, Any] = {
    "messages": [
        {"entry_id": "e1", "message": {"role": "user", "timestamp": 2 ** 62, "score": -0.1, "flag": False,
                                       "content": [{"type": "text", "text": "é \u2028 \U0001f600"}]}},
        {"entry_id": "e2", "elided": True, "message": None},
        {"entry_id": "e3", "message": {"role": "assistant", "content": [], "meta": {}, "grid": [[1, [2]], [], [[]]]}},
        "a string element", 7, None, [], {},
        {"'}); __import__('os')  # \\ \"t\" t[0]": "key", "t": {"t": ["t"]}, "": 1.5e300, "\x00": "\x01"},
    ],
    "has_more": True, "oldest_entry_id": None, "extra": {"nested": [1, {"two": 2}]}, "empty": [],
}


def test_later_answers_from_the_pages_shape_are_exact_and_their_own(monkeypatch: Any) -> None:
    # Prevents: an answer from the compiled shape (the second on) that differs from the page
    # as built in any byte (a key's text, a value's type, order, an empty container, an
    # element that is no container, a key that reads as code), or that shares a container
    # with another answer or with the first.
    monkeypatch.setattr(page_memo, "MAX_NEW_SHAPES", 64)  # (every structure here may be new)
    memo = PageMemo()
    memo.keep("k", "v1", ODD_PAGE)
    line = orjson.dumps(ODD_PAGE)
    first, second, third = answers(memo)
    assert kept_state(memo)[0], "the page's shape is planned by now"
    for answer in (first, second, third):
        assert orjson.dumps(answer) == line and answer == ODD_PAGE
    second["messages"][0]["message"]["content"][0]["text"] = "mine"
    second["messages"][2]["message"]["grid"][0][1].append(3)
    second["messages"][8]["t"]["t"].append("u")
    second["extra"]["nested"][1]["two"] = 3
    second["empty"].append(1)
    second["messages"].append({})
    assert third == ODD_PAGE and first == ODD_PAGE
    assert orjson.dumps(memo.page(kept(memo))) == line


def kept(memo: PageMemo) -> Any:
    found = memo.get("k")
    assert found is not None
    return found


def kept_state(memo: PageMemo) -> list[Any]:
    state: list[Any] = kept(memo)[2]
    return state


def test_an_item_past_the_bounds_leaves_its_page_answered_by_decoding(monkeypatch: Any) -> None:
    # Prevents: an item nested deeper (or with more values) than a shape may hold compiled
    # anyway (the compiler's own nesting limit, a huge function), or answered wrongly.
    deep: Any = "bottom"
    for _ in range(page_memo.MAX_SHAPE_DEPTH + 1):
        deep = {"d": [deep]}
    wide = {"values": list(range(page_memo.MAX_SHAPE_VALUES + 1))}
    for odd in (deep, wide):
        memo = PageMemo()
        built = {"messages": [{"entry_id": "e1"}, odd], "has_more": False}
        memo.keep("k", "v1", built)
        for answer in answers(memo):
            assert orjson.dumps(answer) == orjson.dumps(built)
        assert kept_state(memo)[0] is False


def test_an_item_whose_keys_are_long_is_answered_by_decoding_and_never_compiled() -> None:
    # Prevents: the process-wide cache of compiled shapes holding callers' long keys (a source
    # per structure, each up to a page's size, kept for the process's life: ~256 MB at 512
    # shapes of 512 KiB pages) or such an item answered wrongly.
    before = dict(page_memo._SHAPES)
    memo = PageMemo()
    built = {"messages": [{"k" * (page_memo.MAX_SHAPE_SOURCE + 1): [{"x": 1}]}], "has_more": False}
    memo.keep("k", "v1", built)
    for answer in answers(memo):
        assert answer == built and orjson.dumps(answer) == orjson.dumps(built)
    assert kept_state(memo)[0] is False and before == page_memo._SHAPES


def test_a_new_structure_once_the_shapes_are_full_is_answered_by_decoding(monkeypatch: Any) -> None:
    # Prevents: the process-wide cache of compiled shapes growing without bound (one per
    # structure ever seen), or a page refused a correct answer when it is full.
    monkeypatch.setattr(page_memo, "MAX_SHAPES", len(page_memo._SHAPES))
    memo = PageMemo()
    built = {"messages": [{"a never seen key": [{"x": 1, "y": [True]}]}], "has_more": False}
    memo.keep("k", "v1", built)
    for answer in answers(memo):
        assert answer == built and orjson.dumps(answer) == orjson.dumps(built)
    assert kept_state(memo)[0] is False


def test_a_shapes_values_count_against_the_bytes_kept_and_leave_with_their_page(monkeypatch: Any) -> None:
    # Prevents: the values a planned page holds (its first answer's strings and numbers)
    # outside the memory bound, or still counted once the page is replaced or dropped.
    monkeypatch.setattr(page_memo, "MAX_NEW_SHAPES", 64)
    memo = PageMemo()
    memo.keep("k", "v1", ODD_PAGE)
    line = len(orjson.dumps(ODD_PAGE))
    assert memo._bytes == line
    answers(memo, 1)
    planned = kept_state(memo)[1]
    assert planned > 0 and memo._bytes == line + planned
    memo.keep("k", "v2", page())
    assert memo._bytes == len(orjson.dumps(page()))
    small = PageMemo(max_bytes=line + 1)  # the line fits, the line and its shape's values do not
    small.keep("k", "v1", ODD_PAGE)
    assert answers(small, 1)[0] == ODD_PAGE
    assert small.get("k") is None and small._bytes == 0


def test_a_page_read_fewer_times_than_plan_after_is_decoded_each_time_and_never_planned(monkeypatch: Any) -> None:
    # Prevents: a page read once or twice (a tail right after each append) paying for its
    # shape's planning, which costs about as much as ten answers save.
    monkeypatch.setattr(page_memo, "MAX_NEW_SHAPES", 64)
    memo = PageMemo()
    memo.keep("k", "v1", ODD_PAGE)
    found = kept(memo)
    for _ in range(page_memo.PLAN_AFTER - 1):
        assert orjson.dumps(memo.page(found)) == orjson.dumps(ODD_PAGE)
    assert kept_state(memo)[0] is None and kept_state(memo)[1] == 0
    assert memo._bytes == len(orjson.dumps(ODD_PAGE))
    assert memo.page(found) == ODD_PAGE and kept_state(memo)[0]


def test_a_page_of_many_new_structures_is_answered_by_decoding() -> None:
    # Prevents: one page's planning compiling a function for each of its items (varied tool
    # calls: each structure new), ~100 answers' savings each, for a page that may be read
    # only a few more times.
    memo = PageMemo()
    built = {"messages": [{f"unseen structure {i}": [i]} for i in range(page_memo.MAX_NEW_SHAPES + 1)]}
    before = len(page_memo._SHAPES)
    memo.keep("k", "v1", built)
    for answer in answers(memo):
        assert orjson.dumps(answer) == orjson.dumps(built)
    assert kept_state(memo)[0] is False
    assert len(page_memo._SHAPES) <= before + page_memo.MAX_NEW_SHAPES


def test_threads_planning_new_structures_at_once_never_grow_the_shapes_past_max_shapes(monkeypatch: Any) -> None:
    # Prevents: the process-wide shape cache growing past MAX_SHAPES when threads plan new
    # structures at once: each checked the bound, then compiled (~50-100 us), then inserted, so
    # every thread that checked before the others inserted added one (real threads, each planning
    # its own page; the compile step waits for the others, the interleaving a preemption there gives).
    import threading

    monkeypatch.setattr(page_memo, "_SHAPES", {f"[t[{i}]]#{i}": (lambda t: t) for i in range(7)})
    monkeypatch.setattr(page_memo, "MAX_SHAPES", 8)  # room for one more
    threads = 6
    met = threading.Barrier(threads, timeout=2.0)
    real_compile = compile

    def meeting_compile(*args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(threading.BrokenBarrierError):
            met.wait()  # (with the fix, at most one thread compiles: the wait times out once)
        return real_compile(*args, **kwargs)

    monkeypatch.setattr(page_memo, "compile", meeting_compile, raising=False)
    pages = [{"messages": [{f"key{i}": [{"x": i}]}], "has_more": False} for i in range(threads)]
    memos = [PageMemo() for _ in range(threads)]
    got: list[list[Any]] = [[] for _ in range(threads)]

    def plan(i: int) -> None:
        memos[i].keep("k", "v1", pages[i])
        got[i] = answers(memos[i], 2)

    workers = [threading.Thread(target=plan, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=30)
    assert len(page_memo._SHAPES) <= page_memo.MAX_SHAPES
    for i in range(threads):  # (every page answered exactly, planned or decoded)
        assert got[i] == [pages[i], pages[i]]
    assert sum(1 for m in memos if kept_state(m)[0]) == 1  # (the one structure that fit)
