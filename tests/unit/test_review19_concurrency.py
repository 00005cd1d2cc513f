"""Review 19's attacks under real concurrency (threads) on the page memo's shapes over sqlite
(postgres, and the third pass's inlined append paths: test_review19_postgres.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._service import page_memo
from tests.unit.review19_support import readers_while_a_writer_appends


def test_sqlite_tail_readers_while_a_writer_appends_answer_a_fresh_page_exactly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a kept page (its shapes: compiled answers past PLAN_AFTER) answered for a version it
    # was not built from, or one thread's answer (or its change to it) showing in another's.
    shaped: list[int] = []
    real = page_memo._answer

    def answer(plan: Any) -> Any:
        shaped.append(1)
        return real(plan)

    monkeypatch.setattr(page_memo, "_answer", answer)
    uri = f"sqlite:///{tmp_path / 'c.db'}"
    with session_manager.open(uri) as sm, session_manager.open(uri) as fresh:
        assert readers_while_a_writer_appends(sm, fresh) > 0
    assert len(shaped) > 100  # (the attack reached the shapes)


@pytest.mark.parametrize("kind", ["fs", "sqlite"])
def test_an_observer_registered_mid_stream_gets_every_append_begun_after_it(tmp_path: Path, kind: str) -> None:
    # Prevents: the host's unobserved call (its observers read once, as it begins: the inlined
    # serve drops its events) missing an append that began after observe() returned, on another
    # thread; an event fired twice or out of the session's order; one fired for a call that
    # finished before the observer registered.
    import threading
    import time

    from session_manager._wire.events import ON_MESSAGE_ADDED
    from tests.pg_support import text

    target = tmp_path / "fs" if kind == "fs" else f"sqlite:///{tmp_path / 'o.db'}"
    with session_manager.open(target) as sm:
        sid = sm.call("session::create", {})["session_id"]
        calls: list[tuple[float, float, str]] = []
        stop = threading.Event()
        errors: list[BaseException] = []

        def write() -> None:
            try:
                while not stop.is_set():
                    began = time.monotonic()
                    got = sm.call("session::append", {"session_id": sid, "message": text("m")})
                    calls.append((began, time.monotonic(), got["entry_id"]))
            except BaseException as e:  # (reported below)
                errors.append(e)

        writers = [threading.Thread(target=write) for _ in range(2)]
        for t in writers:
            t.start()
        time.sleep(0.1)
        seen: list[str] = []
        registering = time.monotonic()
        sm.observe({"function_id": ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
        registered = time.monotonic()
        time.sleep(0.2)
        stop.set()
        for t in writers:
            t.join(60)
        assert not errors, errors
        owed = {i for began, _, i in calls if began > registered}
        before = {i for _, ended, i in calls if ended < registering}
        deadline = time.monotonic() + 30  # (delivered on the host's delivery thread)
        while not owed <= set(seen) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # (a second copy of any would have arrived by now)
        assert owed and owed <= set(seen), sorted(owed - set(seen))
        assert not before & set(seen)
        assert len(seen) == len(set(seen))
        order = [e["id"] for e in sm.service.store.entries(sid)]
        assert seen == [i for i in order if i in set(seen)]
