"""The service's kept pages (``_service/page_memo.py``): each answer a copy of its own,
every value exactly as built."""

from __future__ import annotations

from typing import Any

from session_manager._service.page_memo import PageMemo


def page() -> dict[str, Any]:
    return {"messages": [{"entry_id": "e1", "message": {"role": "user", "timestamp": 2 ** 70, "score": 0.1,
                                                        "content": [{"type": "text", "text": "lone \ud800"}]}},
                         {"entry_id": "e2", "elided": True, "message": None}],
            "has_more": False, "oldest_entry_id": "e1"}


def test_a_kept_page_is_answered_exactly_and_as_containers_of_its_own() -> None:
    # Prevents: a value changed by the copy (an integer past 64 bits read as a float, a lone
    # surrogate refused, a float's last bits), or two answers sharing a container.
    memo = PageMemo()
    memo.keep("k", "v1", page())
    kept = memo.get("k")
    assert kept is not None and kept[0] == "v1"
    first, second = memo.page(kept), memo.page(kept)
    assert first == second == page()
    assert type(first["messages"][0]["message"]["timestamp"]) is int
    first["messages"][0]["message"]["content"][0]["text"] = "mine"
    first["messages"][1]["elided"] = False
    first["messages"].append({})
    assert second == page()
    assert memo.page(kept) == page()


def test_a_page_holding_what_the_copy_cannot_write_is_not_kept() -> None:
    # Prevents: a page answered later with a value the copy changed or dropped.
    memo = PageMemo()
    memo.keep("k", "v1", {"messages": [object()]})
    assert memo.get("k") is None
