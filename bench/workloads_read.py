"""Read workloads on one long session: cold and warm ``messages-tail`` 50, first read of a huge session.

"Cold" is a new store object in this running process (``session_manager.open``
included in the time), the OS page cache not dropped; for sqlite3 a new
connection, for raw a fresh ``open`` of the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

from baselines import Sqlite, raw_tail
from fixtures import Context, fill_session, message
from harness import Contender, Target, Workload, stopwatch

import session_manager

TAIL = 50


def _fixtures(ctx: Context, name: str, entries: int) -> tuple[Path, str, Path, Path]:
    """The same ``entries`` messages as our session, a sqlite3 database and a raw JSONL file."""
    ours = ctx.dir(f"ours-{name}")
    with session_manager.open(ours) as sm:
        sid = fill_session(sm, entries)
    db_path = ctx.dir(f"sqlite-{name}") / "db.sqlite"
    db = Sqlite(db_path)
    with db.conn:
        db.conn.executemany("INSERT INTO messages (session_id, body) VALUES (?, ?)",
                            ((sid, json.dumps(message(n))) for n in range(entries)))
    db.close()
    raw = ctx.dir(f"raw-{name}") / "log.jsonl"
    with open(raw, "w") as f:
        f.writelines(json.dumps(message(n)) + "\n" for n in range(entries))
    return ours, sid, db_path, raw


def _ours_cold(where: Path, sid: str) -> Callable[[], float]:
    def once() -> None:
        with session_manager.open(where) as sm:
            got = sm.call("session::messages-tail", {"session_id": sid, "limit": TAIL})
            assert len(got["messages"]) == TAIL

    return lambda: stopwatch(once)


def _sqlite_cold(db_path: Path, sid: str) -> Callable[[], float]:
    def once() -> None:
        db = Sqlite(db_path)
        assert len(db.tail(sid, TAIL)) == TAIL
        db.close()

    return lambda: stopwatch(once)


def _raw(path: Path) -> Callable[[], float]:
    return lambda: stopwatch(lambda: raw_tail(path, TAIL))


def _repeat(fn: Callable[[], object], reps: int) -> Callable[[], float]:
    return lambda: stopwatch(lambda: [fn() for _ in range(reps)], reps)


def workloads(ctx: Context) -> Iterator[Workload]:
    s = ctx.sizes
    ours, sid, db_path, raw = _fixtures(ctx, "tail", s.tail_entries)
    yield Workload(
        f"cold open + messages-tail {TAIL} of a {s.tail_entries:,}-entry session", "time", "raw last lines",
        [Contender("ours", _ours_cold(ours, sid)),
         Contender("sqlite3 (new connection)", _sqlite_cold(db_path, sid)),
         Contender("raw last lines", _raw(raw))],
        [Target("ours", "<= 10x raw", lambda ratio, _: ratio <= 10.0)])

    sm = ctx.manager("ours-tail")
    sm.call("session::messages-tail", {"session_id": sid, "limit": TAIL})
    db = Sqlite(db_path)
    ctx.stack.callback(db.close)
    payload = {"session_id": sid, "limit": TAIL}
    yield Workload(
        f"warm messages-tail {TAIL}", "time", "sqlite3 (open connection)",
        [Contender("ours", _repeat(lambda: sm.call("session::messages-tail", payload), s.warm_reps)),
         Contender("sqlite3 (open connection)", _repeat(lambda: db.tail(sid, TAIL), s.warm_reps)),
         Contender("raw last lines", _repeat(lambda: raw_tail(raw, TAIL), s.warm_reps))])

    ours, sid, db_path, raw = _fixtures(ctx, "big", s.big_entries)
    yield Workload(
        f"first read (open + messages-tail {TAIL}) of a {s.big_entries:,}-entry session", "time", "raw last lines",
        [Contender("ours", _ours_cold(ours, sid)),
         Contender("sqlite3 (new connection)", _sqlite_cold(db_path, sid)),
         Contender("raw last lines", _raw(raw))],
        [Target("ours", "<= 100 ms", lambda _, median: median <= 0.100)],
        rounds=min(ctx.rounds, 3))
