"""A warm ``messages-tail`` 50 with its kept page copied two ways, in one process (not a test):
the sides take turns call by call (in a shuffled order), on the same store and session, so the
box's load hits both alike. "new" is the service's :class:`~session_manager._service.page_memo.
PageMemo` (the first answer decoded from the page's JSON, later ones from its compiled shape);
"old" decodes the JSON for every answer (the memo before 2026-12-07's shapes). Each side has a
memo of its own (swapped into the service before its call), so each answers its own page.
(``--marshal``: "old" keeps the page as its ``marshal`` bytes instead, tried on 2026-12-07 against
the decoding: ~20,000 fewer client instructions per tail, ~2% slower at the 10th percentile in
four runs: not taken.)

Run: ``python bench/pg_tail_ab.py [--rounds 40] [--n 100] [--length 2000]`` with a server at
``SESSION_MANAGER_TEST_POSTGRES`` (default ``postgresql://127.0.0.1:5432/test``). Prints each
side's median µs per tail, the ratio (``old/new`` above 1: new is faster), the 10th
percentiles and the load.

``--floor``: ``bench/pg_floor.py``'s tail rows (cold open + tail 50 of ``--length`` 10,000,
the warm tail, the tail right after an append, each beside raw's prepared ``SELECT``), "new"
and "old" memo (as above) taking turns round by round (``--rounds``), each round's ratios to
raw printed: the ``--floor`` table's measure, the two memos alternated in one process.

``--base DIR``: this tree's warm tail against another release's, in one process (issue 24, the
warm tail's second pass): that release's ``session_manager`` package copied under another name
(its imports are relative), as for ``bench/pg_client_ab.py``::

    mkdir -p /tmp/base && git archive f2a971f session_manager | tar -x -C /tmp/base
    mv /tmp/base/session_manager /tmp/base/sm_base
    python bench/pg_tail_ab.py --base /tmp/base/sm_base [--rounds 40] [--n 100] [--length 2000]

each side its own store, schema and session of ``--length`` messages, calls taking turns in a
shuffled order ("new" this tree, "old" the base; ``old/new`` above 1: this tree is faster); then
the same for ``session::get`` (``--get``).

``--cold``: a cold open + tail instead (a new store and manager on the same schema, its first
tail, then closed), with the pool's maintenance threads ``core.POOL_WORKERS`` ("new") against
psycopg_pool's default of 3 ("old"), taking turns call by call; ``--n`` opens per round.
"""

from __future__ import annotations

import argparse
import marshal
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Hashable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

import session_manager  # noqa: E402
from session_manager._service.page_memo import PageMemo  # noqa: E402
from session_manager.store.postgres import PostgresSettings, PostgresStore, core  # noqa: E402

DSN = os.environ.get("SESSION_MANAGER_TEST_POSTGRES", "postgresql://127.0.0.1:5432/test")


class DecodingPageMemo(PageMemo):
    """Every answer the page's JSON decoded (no shape)."""

    def page(self, kept: tuple[Hashable, bytes, list[Any]]) -> Any:
        return orjson.loads(kept[1])


class MarshalPageMemo(PageMemo):
    """The page kept as its ``marshal`` bytes, loaded for each answer."""

    def page(self, kept: tuple[Hashable, bytes, list[Any]]) -> Any:
        return marshal.loads(kept[1])

    def keep(self, key: Hashable, version: Hashable, page: Any) -> None:
        line = marshal.dumps(page)
        with self._lock:
            self._pages[key] = (version, line, [None, 0, key])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--length", type=int, default=2000, help="messages in the session")
    parser.add_argument("--cold", action="store_true", help="cold open + tail: POOL_WORKERS against 3")
    parser.add_argument("--floor", action="store_true", help="pg_floor's tail rows, new and old memo by turns")
    parser.add_argument("--marshal", action="store_true", help='"old" keeps marshal bytes (not the decoding)')
    parser.add_argument("--base", help="another release's package directory (renamed): tree against tree")
    parser.add_argument("--get", action="store_true", help="with --base: session::get instead of the tail")
    args = parser.parse_args()
    if args.base:
        versus(Path(args.base).resolve(), args.rounds, args.n, args.length, "session::get" if args.get
               else "session::messages-tail")
        return
    if args.floor:
        floor(args.rounds, 10_000 if args.length == 2000 else args.length)
        return
    schema = f"sm_tail_ab_{uuid.uuid4().hex[:10]}"
    sm = session_manager.open(store=PostgresStore(PostgresSettings(dsn=DSN, schema=schema)))
    try:
        sid = sm.call("session::create", {})["session_id"]
        sm.call("session::append-many", {"session_id": sid, "messages": [
            {"role": "user", "content": [{"type": "text", "text": f"message {i}"}], "timestamp": i}
            for i in range(args.length)]})
        req = {"session_id": sid, "limit": 50}
        samples = (cold(sm, schema, req, args.rounds, args.n) if args.cold
                   else warm(sm, schema, req, args.rounds, args.n, args.marshal))
        load = samples.pop("load")
        new, old = statistics.median(samples["new"]), statistics.median(samples["old"])
        q_new, q_old = (statistics.quantiles(samples[s], n=10)[0] for s in ("new", "old"))
        what = "cold open + tail" if args.cold else "tail"
        print(f"{what} new {new:.1f} µs, old {old:.1f} µs (medians of {len(samples['new'])} calls each);"
              f" old/new {old / new:.3f}; 10th percentiles {q_new:.1f} / {q_old:.1f};"
              f" load {min(load):.2f}-{max(load):.2f}")
    finally:
        sm.close()
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def warm(sm: session_manager.SessionManager, schema: str, req: dict[str, Any], rounds: int,
         n: int, use_marshal: bool = False) -> dict[str, list[float]]:
    service = sm.service.core
    memos: dict[str, PageMemo] = {"new": PageMemo(), "old": MarshalPageMemo() if use_marshal else DecodingPageMemo()}
    for side in memos.values():
        service.tail_pages = side
        assert sm.call("session::messages-tail", req) == sm.call("session::messages-tail", req)
    samples: dict[str, list[float]] = {"new": [], "old": [], "load": []}
    clock = time.perf_counter
    for _ in range(rounds):
        for _ in range(n):
            sides = list(memos)
            random.shuffle(sides)
            for side in sides:
                service.tail_pages = memos[side]
                start = clock()
                sm.call("session::messages-tail", req)
                samples[side].append((clock() - start) * 1e6)
        samples["load"].append(float(Path("/proc/loadavg").read_text().split()[0]))
    return samples


def versus(base: Path, rounds: int, n: int, length: int, function: str) -> None:
    """``function``'s warm call of this tree ("new") against the release at ``base`` ("old")."""
    import importlib

    sys.path.insert(0, str(base.parent))
    schemas = {side: f"sm_tail_vs_{uuid.uuid4().hex[:10]}" for side in ("new", "old")}
    opened = {}
    for side, package in (("new", "session_manager"), ("old", base.name)):
        top = importlib.import_module(package)
        pg = importlib.import_module(f"{package}.store.postgres")
        opened[side] = top.open(store=pg.PostgresStore(pg.PostgresSettings(dsn=DSN, schema=schemas[side])))
    try:
        reqs = {}
        for side, sm in opened.items():
            sid = sm.call("session::create", {})["session_id"]
            sm.call("session::append-many", {"session_id": sid, "messages": [
                {"role": "user", "content": [{"type": "text", "text": f"message {i}"}], "timestamp": i}
                for i in range(length)]})
            reqs[side] = {"session_id": sid, "limit": 50} if function.endswith("tail") else {"session_id": sid}
            for _ in range(30):
                sm.call(function, reqs[side])
        samples: dict[str, list[float]] = {"new": [], "old": []}
        load = []
        clock = time.perf_counter
        for _ in range(rounds):
            for _ in range(n):
                sides = ["new", "old"]
                random.shuffle(sides)
                for side in sides:
                    sm, req = opened[side], reqs[side]
                    start = clock()
                    sm.call(function, req)
                    samples[side].append((clock() - start) * 1e6)
            load.append(float(Path("/proc/loadavg").read_text().split()[0]))
        new, old = statistics.median(samples["new"]), statistics.median(samples["old"])
        q_new, q_old = (statistics.quantiles(samples[s], n=10)[0] for s in ("new", "old"))
        print(f"{function} this tree {new:.1f} µs, base {old:.1f} µs (medians of {len(samples['new'])} calls each);"
              f" old/new {old / new:.3f}; 10th percentiles {q_new:.1f} / {q_old:.1f};"
              f" load {min(load):.2f}-{max(load):.2f}")
    finally:
        for sm in opened.values():
            sm.close()
        with psycopg.connect(DSN, autocommit=True) as conn:
            for schema in schemas.values():
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def floor(rounds: int, length: int) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import pg_floor

    from session_manager._service import core as service_core

    schema = f"sm_tail_floor_{uuid.uuid4().hex[:10]}"
    memos: dict[str, type[PageMemo]] = {"new": PageMemo, "old": DecodingPageMemo}
    ratios: dict[str, list[tuple[float, float, float]]] = {"new": [], "old": []}
    try:
        pg_floor.setup(DSN, schema)
        pg_floor.long_session(DSN, schema, length)
        for r in range(rounds):
            sides = list(memos) if r % 2 == 0 else list(memos)[::-1]
            for side in sides:
                service_core.PageMemo = memos[side]  # type: ignore[misc]
                got = pg_floor.tails(DSN, schema, 1)
                raw, ours = got["raw"], got["ours"]
                ratios[side].append((ours[0] / raw[0], ours[1] / raw[1], ours[2] / raw[2]))
                print(f"round {r} {side}: cold {ours[0]:.2f} / raw {raw[0]:.2f} ms ({ratios[side][-1][0]:.2f}x),"
                      f" warm {ours[1] * 1000:.1f} / {raw[1] * 1000:.1f} µs ({ratios[side][-1][1]:.2f}x),"
                      f" after an append {ours[2] * 1000:.1f} / {raw[2] * 1000:.1f} µs ({ratios[side][-1][2]:.2f}x);"
                      f" load {Path('/proc/loadavg').read_text().split()[0]}", flush=True)
        for side, got in ratios.items():
            print(f"{side}: medians over {rounds} rounds: cold {statistics.median(g[0] for g in got):.2f}x,"
                  f" warm {statistics.median(g[1] for g in got):.2f}x,"
                  f" after an append {statistics.median(g[2] for g in got):.2f}x raw")
    finally:
        service_core.PageMemo = PageMemo  # type: ignore[misc]
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def cold(sm: session_manager.SessionManager, schema: str, req: dict[str, Any], rounds: int,
         n: int) -> dict[str, list[float]]:
    workers = {"new": core.POOL_WORKERS, "old": 3}
    samples: dict[str, list[float]] = {"new": [], "old": [], "load": []}
    clock = time.perf_counter
    try:
        for _ in range(rounds):
            for _ in range(n):
                sides = list(workers)
                random.shuffle(sides)
                for side in sides:
                    core.POOL_WORKERS = workers[side]
                    start = clock()
                    other = session_manager.open(store=PostgresStore(PostgresSettings(dsn=DSN, schema=schema)))
                    other.call("session::messages-tail", req)
                    samples[side].append((clock() - start) * 1e6)
                    other.close()
            samples["load"].append(float(Path("/proc/loadavg").read_text().split()[0]))
    finally:
        core.POOL_WORKERS = workers["new"]
    return samples


if __name__ == "__main__":
    main()
