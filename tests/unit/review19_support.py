"""Review 19's concurrent checks, run over each store that names versions (sqlite, postgres)."""

from __future__ import annotations

import threading
from typing import Any

import orjson

import session_manager
from session_manager._service.page_memo import PageMemo
from tests.pg_support import text  # (imports no driver)


def readers_while_a_writer_appends(sm: session_manager.SessionManager, fresh: session_manager.SessionManager,
                                   *, appends: int = 40, readers: int = 3) -> int:
    """Threads answer ``messages-tail`` from ``sm``'s kept pages (past PLAN_AFTER: the shapes) while
    another appends; every answer is byte for byte the page ``fresh`` (keeping nothing) builds for
    the session as it was after some append. Returns the answers checked."""
    fresh.service.core.tail_pages = PageMemo(max_pages=0)
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    ids = [sm.call("session::append", {"session_id": sid, "message": text("m0")})["entry_id"]]
    req = {"session_id": sid, "limit": 5}
    done = threading.Event()
    got: list[list[Any]] = [[] for _ in range(readers)]
    errors: list[BaseException] = []

    def read(out: list[Any]) -> None:
        try:
            while not done.is_set():
                answer = sm.call("session::messages-tail", req)
                out.append(orjson.dumps(answer))
                answer["messages"].clear()  # (a caller changing its answer)
        except BaseException as e:  # (reported below)
            errors.append(e)

    threads = [threading.Thread(target=read, args=(out,)) for out in got]
    for t in threads:
        t.start()
    try:
        for i in range(1, appends):
            for _ in range(12):  # (the page read often at this version: planned, then its shapes answer)
                sm.call("session::messages-tail", req)
            ids.append(sm.call("session::append", {"session_id": sid, "message": text(f"m{i}" * (i % 3 + 1))})
                       ["entry_id"])
    finally:
        done.set()
        for t in threads:
            t.join(60)
    assert not errors, errors
    expected: dict[str, bytes] = {}
    for k, entry_id in enumerate(ids):
        before = {"before_entry_id": ids[k + 1]} if k + 1 < len(ids) else {}
        expected[entry_id] = orjson.dumps(fresh.call("session::messages-tail", {**req, **before}))
    checked = 0
    for out in got:
        for line in out:
            last = orjson.loads(line)["messages"][-1]["entry_id"]
            assert line == expected[last]
            checked += 1
    return checked
