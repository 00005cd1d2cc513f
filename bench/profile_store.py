"""cProfile of the three workloads the issue asks to profile before optimizing.

    python bench/profile_store.py append   # 3,000 flush-mode appends
    python bench/profile_store.py sqlite-append  # 3,000 typed flush appends over sqlite (issue 23)
    python bench/profile_store.py tail     # cold open + messages-tail 50 of a 20,000-entry session
    python bench/profile_store.py list     # cold open + session::list over 10,000 sessions
    python bench/profile_store.py all [--top 25] [--sort tottime]

Fixtures are written first, through the public API, outside the profile. For a
sampling profile of the same code, run it under py-spy:
``py-spy record -o append.svg -- python bench/profile_store.py append --plain``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from fixtures import fill_session, fill_sessions, message
from harness import stopwatch

import session_manager


def append(root: Path) -> Callable[[], None]:
    sm = session_manager.open(root / "append")
    sid = sm.call("session::create", {"title": "profile"})["session_id"]
    body = {"session_id": sid, "message": message()}

    def work() -> None:
        for _ in range(3000):
            sm.call("session::append", body)
        sm.close()

    return work


def sqlite_append(root: Path) -> Callable[[], None]:
    """The typed append bench/bench_sqlite.py times (``sm.append`` over ``sqlite:///``, flush)."""
    sm = session_manager.open(f"sqlite:///{root / 'append.db'}", durability="flush")
    sid = sm.create().session_id
    body: Any = message()  # a plain dict, as bench_sqlite passes it
    for _ in range(20):  # warm: the statements prepared, the session's row cached
        sm.append(sid, message=body)

    def work() -> None:
        for _ in range(APPENDS):
            sm.append(sid, message=body)
        sm.close()

    return work


def tail(root: Path) -> Callable[[], None]:
    where = root / "tail"
    with session_manager.open(where) as sm:
        sid, _ = fill_session(sm, 20_000)

    def work() -> None:
        with session_manager.open(where) as cold:
            cold.call("session::messages-tail", {"session_id": sid, "limit": 50})

    return work


def list_sessions(root: Path) -> Callable[[], None]:
    where = root / "list"
    with session_manager.open(where) as sm:
        fill_sessions(sm, 10_000)
        sm.call("session::list", {})  # the sessions index exists, as in bench/ (its fixture lists)

    def work() -> None:
        with session_manager.open(where) as cold:
            cold.call("session::list", {})

    return work


WORKLOADS = {"append": append, "sqlite-append": sqlite_append, "tail": tail, "list": list_sessions}
APPENDS = 3000


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("workload", choices=[*WORKLOADS, "all"])
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--plain", action="store_true", help="run without cProfile (to sample it with py-spy)")
    parser.add_argument("--sort", default="tottime", help="pstats sort key (tottime, cumulative, ...)")
    args = parser.parse_args()
    names = list(WORKLOADS) if args.workload == "all" else [args.workload]
    root = Path(tempfile.mkdtemp(prefix="sm-profile-"))
    try:
        for name in names:
            work = WORKLOADS[name](root)
            if args.plain:
                print(f"{name}: {stopwatch(work) * 1000:.0f} ms")
                continue
            profile = cProfile.Profile()
            profile.runcall(work)
            print(f"\n==== {name} ====")
            stats = pstats.Stats(profile).strip_dirs().sort_stats(args.sort)
            if name.endswith("append"):  # the figure issue 23 tracks: Python calls (C ones too) per append
                calls = sum(ncalls for _, ncalls, _, _, _ in stats.stats.values())  # type: ignore[attr-defined]
                print(f"{calls / APPENDS:.0f} calls per append")
            stats.print_stats(args.top)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
