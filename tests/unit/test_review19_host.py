"""Review 19's attacks on the embedded host's unobserved call (``SessionManager.call`` with the
gate's enter and leave and ``serve``'s steps written out, the third pass): every payload answered
as the general path answers it (the same calls with an observer registered), and the gate closing
while unobserved calls run on other threads."""

from __future__ import annotations

import collections
import threading
from pathlib import Path
from typing import Any

import orjson

import session_manager
from session_manager._wire.events import ON_MESSAGE_ADDED
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds
from tests.pg_support import text


class _Keys(dict):  # type: ignore[type-arg]
    """A dict whose keys() hides a key (the inline check must not trust a subclass's view)."""

    def keys(self) -> Any:
        return {"session_id"}


def _calls(sid: str) -> list[tuple[Any, Any]]:
    many = [text("x")] * 300  # (past CHUNK_ITEMS: parse_request's chunked way)
    return [
        ("session::append", None), ("session::append", []), ("session::append", "x"), ("session::append", 1),
        ("session::append", collections.OrderedDict(session_id=sid, message=text("od"))),
        ("session::append", _Keys(session_id=sid, message=text("sub"), limt=1)),
        ("session::append", {"session_id": sid, "message": text("a"), 1: 2}),
        ("session::append", {"session_id": sid, "message": text("a"), "_caller_worker_id": "w"}),
        ("session::append-many", {"session_id": sid, "messages": many}),
        ("session::append-many", {"session_id": sid, "messages": many, "limt": many}),
        ("session::append", {"session_id": sid, "message": text("a"), "xx": many}),
        ("session::append", {"session_id": sid, "message": {"role": "user", "content": "bad"}}),
        ("session::append", {"session_id": sid, "message": text("nan"), "origin": {"x": float("nan")}}),
        ("session::append", {"session_id": sid, "message": text("m"), "custom": {"custom_type": "k"}}),
        ("session::append", {"session_id": sid, "entry_id": "e_001", "message": text("replay")}),
        (None, {}), (1, {}), ("session::on-message-added", {}), ("nope", {}),
        ("session::messages-tail", {"session_id": sid, "limit": 3}),
        ("session::get", {"session_id": sid}),
        ("session::append", {"session_id": "absent", "message": text("a")}),
    ]


def test_the_unobserved_call_answers_every_payload_as_an_observed_one(tmp_path: Path) -> None:
    # Prevents: the inlined unobserved call skipping a check serve makes (unknown keys, through a
    # dict subclass too; non-string keys; NaN; an event function or unknown id), parsing a long
    # list otherwise than parse_request's chunks, or answering other bytes.
    out: dict[str, list[Any]] = {}
    for mode in ("unobserved", "observed"):
        with session_manager.open(f"sqlite:///{tmp_path / mode}.db", ids=SequentialIds(),
                                  clock=ManualClock(1000)) as sm:
            if mode == "observed":  # (forces serve's general path)
                sm.observe({"function_id": ON_MESSAGE_ADDED}, lambda e: None)
            sid = sm.call("session::ensure", {"session_id": "s"})["session_id"]
            got: list[Any] = []
            for function_id, payload in _calls(sid):
                try:
                    got.append(("ok", orjson.dumps(sm.call(function_id, payload))))
                except session_manager.SessionError as e:
                    got.append((e.code, e.detail))
            out[mode] = got
    assert out["unobserved"] == out["observed"]
    assert [a[0] for a in out["observed"]].count("ok") == 6


def test_closing_while_unobserved_calls_run_refuses_later_ones_and_loses_none(tmp_path: Path) -> None:
    # Prevents: the inlined gate letting a call run into a released store (a call counted in after
    # close() counted them, or counted out twice), or close() returning before a call in flight ends.
    uri = f"sqlite:///{tmp_path / 'g.db'}"
    sm = session_manager.open(uri)
    sid = sm.call("session::create", {})["session_id"]
    answered: list[list[str]] = [[] for _ in range(4)]
    refused: list[int] = []
    errors: list[BaseException] = []
    go = threading.Event()

    def run(mine: list[str]) -> None:
        go.wait()
        try:
            while True:
                mine.append(sm.call("session::append", {"session_id": sid, "message": text("m")})["entry_id"])
        except RuntimeError as e:
            assert "closed" in str(e)
            refused.append(1)
        except BaseException as e:  # (reported below)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(mine,)) for mine in answered]
    for t in threads:
        t.start()
    go.set()
    while sum(map(len, answered)) < 50:
        pass
    sm.close()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(refused) == 4 and len(sm._gate) == 0
    with session_manager.open(uri) as again:
        stored = [e["id"] for e in again.service.store.entries(sid)]
    assert sorted(stored) == sorted(i for mine in answered for i in mine)
