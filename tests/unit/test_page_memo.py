"""The service's kept pages (``_service/page_memo.py``): each answer a copy of its own,
every value exactly as built, or the page not kept."""

from __future__ import annotations

from typing import Any

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
