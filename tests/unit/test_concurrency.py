"""Mutations from many threads: the per-session lock keeps every invariant."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import session_manager
from session_manager.ids import SequentialIds


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def test_parallel_appends_chain_without_losing_or_branching(tmp_path: Path) -> None:
    # Prevents: two threads reading the same leaf and forking the transcript, or a lost count.
    threads, per_thread = 6, 150
    sm = session_manager.open(tmp_path / "d", ids=SequentialIds())
    sm.call("session::ensure", {"session_id": "shared"})
    for n in range(threads):
        sm.call("session::ensure", {"session_id": f"own-{n}"})
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(per_thread):
                sm.call("session::append", {"session_id": "shared", "message": user(f"{n}-{i}")})
                sm.call("session::append", {"session_id": f"own-{n}", "message": user(str(i))})
                if i % 50 == 0:
                    sm.call("session::list", {"limit": 5})
        except BaseException as e:  # surfaced below
            errors.append(e)

    pool = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert errors == []
    sm.close()

    sm = session_manager.open(tmp_path / "d", ids=SequentialIds())
    total = threads * per_thread
    assert sm.call("session::get", {"session_id": "shared"})["meta"]["message_count"] == total
    seen: list[str] = []
    cursor = None
    while True:
        page = sm.call("session::messages", {"session_id": "shared", "limit": 500,
                                             **({"cursor": cursor} if cursor else {})})
        seen += [m["entry_id"] for m in page["messages"]]
        cursor = page.get("next_cursor")
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == total  # one linear chain holds every entry
    for n in range(threads):
        page = sm.call("session::messages", {"session_id": f"own-{n}", "limit": 500})
        assert [m["message"]["content"][0]["text"] for m in page["messages"]] == [str(i) for i in range(per_thread)]
    sm.close()
