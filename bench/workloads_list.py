"""``session::list`` workloads: most recent 50 (cold, warm), the whole list over 10k, a paged walk, a filter.

sqlite3 keeps the metas in a ``sessions`` table indexed on updated_at,
created_at and (owner, updated_at); raw keeps one file per session whose
last line is the session's meta.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from baselines import Sqlite, raw_recent
from fixtures import Context, fill_sessions, message, owner
from harness import Contender, Target, Workload, stopwatch

import session_manager

RECENT = 50
PAGE = 500


def _all_metas(sm: session_manager.SessionManager) -> list[dict[str, Any]]:
    """Every meta in creation order, read back through the API."""
    metas: list[dict[str, Any]] = []
    payload: dict[str, Any] = {"limit": PAGE, "order": "created_asc"}
    while True:
        got = sm.call("session::list", payload)
        metas += got["sessions"]
        if not got.get("next_cursor"):
            return metas
        payload["cursor"] = got["next_cursor"]


def _fixtures(ctx: Context, name: str, count: int) -> tuple[Path, Path, Path]:
    ours = ctx.dir(f"ours-{name}")
    with session_manager.open(ours) as sm:
        fill_sessions(sm, count)
        metas = _all_metas(sm)
    db_path = ctx.dir(f"sqlite-{name}") / "db.sqlite"
    db = Sqlite(db_path)
    db.load_sessions(metas)
    db.close()
    raw = ctx.dir(f"raw-{name}")
    lines = "".join(json.dumps(message(i)) + "\n" for i in range(3))
    for meta in metas:
        (raw / f"{meta['session_id']}.jsonl").write_text(lines + json.dumps(meta) + "\n")
    return ours, db_path, raw


def list_fixture(ctx: Context) -> tuple[Path, Path, Path]:
    """The 10k-session store (list, walk, filter and memory workloads share it)."""
    return ctx.fixture("list", lambda: _fixtures(ctx, "list", ctx.sizes.list_sessions))


def _ours_cold(where: Path, payload: dict[str, Any]) -> Callable[[], float]:
    def once() -> None:
        with session_manager.open(where) as sm:
            sm.call("session::list", payload)

    return lambda: stopwatch(once)


def _sqlite_cold(db_path: Path, limit: int) -> Callable[[], float]:
    def once() -> None:
        db = Sqlite(db_path)
        db.recent(limit)
        db.close()

    return lambda: stopwatch(once)


def _repeat(fn: Callable[[], object], reps: int) -> Callable[[], float]:
    return lambda: stopwatch(lambda: [fn() for _ in range(reps)], reps)


def _ours_walk(sm: session_manager.SessionManager) -> Callable[[], float]:
    def walk() -> None:
        payload: dict[str, Any] = {"limit": PAGE, "order": "created_asc"}
        while True:
            got = sm.call("session::list", payload)
            if not got.get("next_cursor"):
                return
            payload["cursor"] = got["next_cursor"]

    return lambda: stopwatch(walk)


def _sqlite_walk(db: Sqlite) -> Callable[[], float]:
    def walk() -> None:
        after = 0
        while page := db.page(after, PAGE):
            after += len(page)  # the created_at column is the creation rank

    return lambda: stopwatch(walk)


def workloads(ctx: Context) -> Iterator[Workload]:
    s = ctx.sizes
    ours, db_path, raw = _fixtures(ctx, "recent", s.recent_sessions)
    n = f"{s.recent_sessions:,}"
    yield Workload(
        f"cold open + list {RECENT} most recent of {n} sessions", "time", "sqlite3 (new connection)",
        [Contender("ours", _ours_cold(ours, {"limit": RECENT})),
         Contender("sqlite3 (new connection)", _sqlite_cold(db_path, RECENT)),
         Contender("raw: each file's last line", lambda: stopwatch(lambda: raw_recent(raw, RECENT)))])
    sm = ctx.manager("ours-recent")
    sm.call("session::list", {"limit": RECENT})
    db = Sqlite(db_path)
    ctx.stack.callback(db.close)
    yield Workload(
        f"warm list {RECENT} most recent of {n}", "time", "sqlite3 (open connection)",
        [Contender("ours", _repeat(lambda: sm.call("session::list", {"limit": RECENT}), s.warm_reps)),
         Contender("sqlite3 (open connection)", _repeat(lambda: db.recent(RECENT), s.warm_reps))])

    ours, db_path, raw = list_fixture(ctx)
    n = f"{s.list_sessions:,}"
    yield Workload(
        f"session::list over {n} sessions, cold", "time", "sqlite3 (new connection)",
        [Contender("ours", _ours_cold(ours, {})),
         Contender("sqlite3 (new connection)", _sqlite_cold(db_path, RECENT))],
        [Target("ours", "<= 50 ms", lambda _, median: median <= 0.050)])
    sm = ctx.manager("ours-list")
    sm.call("session::list", {})
    db = Sqlite(db_path)
    ctx.stack.callback(db.close)
    yield Workload(
        f"session::list over {n} sessions, warm", "time", "sqlite3 (open connection)",
        [Contender("ours", _repeat(lambda: sm.call("session::list", {}), max(5, s.warm_reps // 5))),
         Contender("sqlite3 (open connection)", _repeat(lambda: db.recent(RECENT), s.warm_reps))],
        [Target("ours", "<= 1 ms", lambda _, median: median <= 0.001)])
    pages = -(-s.list_sessions // PAGE)
    one_page = {"limit": PAGE, "order": "created_asc"}
    yield Workload(
        f"walk all {n} in {pages} pages of {PAGE} vs one warm page", "time", "ours, one page",
        [Contender(f"ours, {pages}-page walk", _ours_walk(sm)),
         Contender("ours, one page", _repeat(lambda: sm.call("session::list", one_page), 5)),
         Contender(f"sqlite3, {pages}-page keyset walk", _sqlite_walk(db)),
         Contender("sqlite3, one page", _repeat(lambda: db.page(0, PAGE), 5))],
        [Target(f"ours, {pages}-page walk", "<= 25x one page", lambda ratio, _: ratio <= 25.0)])
    by_owner = {"metadata": {"owner": owner(3)}, "limit": RECENT}
    yield Workload(
        f"metadata-filtered list on {n} sessions, warm", "time", "sqlite3 (indexed owner)",
        [Contender("ours", _repeat(lambda: sm.call("session::list", by_owner), max(5, s.warm_reps // 5))),
         Contender("sqlite3 (indexed owner)", _repeat(lambda: db.by_owner(owner(3), RECENT), s.warm_reps))],
        [Target("ours", "<= 5 ms", lambda _, median: median <= 0.005)])
