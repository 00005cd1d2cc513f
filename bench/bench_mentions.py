"""How fast session::mention::search answers over many sessions.

The console gives each mention provider 2.5 s per keystroke; this prints
what one search costs through the embedded host (validation, ranking, copy
of the result) for a few query shapes, over N sessions in an fs store:
warm (metas cached, the steady state of a running worker) and cold (a fresh
open that scans every session file first).

    python bench/bench_mentions.py [--sessions 10000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import session_manager
from session_manager.ids import SequentialIds
from session_manager.mentions.token import parse_mentions, parse_prose_mentions

WORDS = [
    "fix", "login", "redirect", "page", "polish", "database", "migration", "deploy", "staging", "review",
    "agent", "plan", "refactor", "cache", "search", "index", "billing", "invoice", "export", "report",
    "weekly", "standup", "bug", "crash", "memory", "leak", "test", "flaky", "retry",
]  # fmt: skip
QUERIES = ("", "login", "fix log", "s_004", "migration staging", "zzzz-no-match")


def populate(sm: session_manager.SessionManager, n: int, rng: random.Random) -> None:
    for i in range(n):
        metadata: dict[str, str] = {}
        if i % 10 == 9:
            metadata["parent_session_id"] = f"s_{i:03d}"
        if i % 100 == 42:
            metadata["kind"] = "e2e"
        sm.call("session::create", {
            "title": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))),
            "description": " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 8))),
            **({"metadata": metadata} if metadata else {}),
        })  # fmt: skip


def timed(sm: session_manager.SessionManager, query: str) -> float:
    start = time.perf_counter()
    sm.call("session::mention::search", {"query": query, "context": {"session_id": "s_001"}})
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "sessions"
        t0 = time.perf_counter()
        with session_manager.open(data, ids=SequentialIds()) as sm:
            populate(sm, args.sessions, rng)
        print(f"populated {args.sessions} sessions in {time.perf_counter() - t0:.1f} s")

        with session_manager.open(data) as sm:
            cold = timed(sm, "login")
            print(f"cold (open + scan + search 'login'): {cold:.1f} ms")
            worst = 0.0
            for query in QUERIES:
                runs = [timed(sm, query) for _ in range(args.repeat)]
                worst = max(worst, max(runs))
                print(f"warm {query!r:22} median {statistics.median(runs):6.1f} ms   max {max(runs):6.1f} ms")
        budget = 2500.0
        print(f"worst warm search over {args.sessions} sessions: {worst:.1f} ms "
              f"({worst / budget:.1%} of the console's {budget:.0f} ms budget)")  # fmt: skip
    # The token parsers on hostile texts (each was super-linear once: about a minute and 20 s).
    for name, parse, text in (
            ("1 MB of unpartnered backtick runs", parse_prose_mentions, " ".join("`" * k for k in range(1, 1415))),
            ("2 MB of unclosed token starts", parse_mentions, '@a(id="' * 300_000 + ")")):
        started = time.process_time()
        parse(text)
        print(f"parse {name}: {(time.process_time() - started) * 1000:.0f} ms of CPU")


if __name__ == "__main__":
    main()
