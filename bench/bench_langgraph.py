"""LangGraph checkpointers in one run (not a test): ``SessionManagerSaver`` beside
``SqliteSaver`` (langgraph-checkpoint-sqlite), each over a file in a temp dir.

Run: ``python bench/bench_langgraph.py [--quick]``. Prints, per saver, the
median time of ``put`` (a checkpoint whose messages channel, 10 to 19
messages of ~200 characters, and a counter changed; one more channel did
not: 2 KB of settings, or 30 KB of documents set at the first step), of
``get_tuple`` of the newest checkpoint, and of ``get_tuple`` by id of an
earlier one, and of a whole ``graph.invoke`` turn of a chat StateGraph (first
state only), and the ratio to SqliteSaver at the same durability (target:
>= 1x, i.e. at least as fast). SqliteSaver stores every channel's value in
every checkpoint; ours stores a channel's value once per version, so the
unchanged channel costs it nothing after the first put:

- no sync per write: our ``durability="flush"`` (the default) beside
  SqliteSaver with ``PRAGMA synchronous=NORMAL`` (WAL: no fsync per commit);
- a sync per write: our ``durability="fsync"`` beside SqliteSaver as it comes
  (WAL, ``synchronous=FULL``: an fsync per commit).

Both savers get the same checkpoints through LangGraph's serializer. Speed is
machine-bound: compare figures from one run, not across machines.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402

import session_manager  # noqa: E402
from session_manager.adapters.langgraph import SessionManagerSaver  # noqa: E402

MESSAGES = [(HumanMessage if i % 2 == 0 else AIMessage)(f"message {i}: " + "lorem ipsum " * 16) for i in range(20)]
SETTINGS = {f"key_{i}": "value " * 8 for i in range(40)}
# A large channel set once and then left as it is (retrieved documents, an uploaded file's text).
DOCUMENTS = {"settings": SETTINGS, "documents": [f"document {i}: " + "lorem ipsum dolor " * 40 for i in range(40)]}
WORKLOADS = {"messages + 2 KB settings": SETTINGS, "messages + 30 KB documents": DOCUMENTS}


class Thread:
    """Chained checkpoints on one thread of one saver, put a batch at a time."""

    def __init__(self, saver: BaseCheckpointSaver[Any], thread: str, settings: Any) -> None:
        self.saver = saver
        self.settings = settings
        self.config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        self.latest: Any = dict(self.config)
        self.versions: dict[str, Any] = {}
        self.configs: list[Any] = []
        self.picks = random.Random(7)

    def put(self, count: int) -> list[float]:
        """Put ``count`` more checkpoints; the seconds each put took."""
        timings = []
        for _ in range(count):
            step = len(self.configs)
            changed = ["messages", "counter"] if step else ["messages", "counter", "settings"]
            for ch in changed:
                self.versions[ch] = self.saver.get_next_version(self.versions.get(ch), None)
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"messages": MESSAGES[: 10 + step % 10], "counter": step,
                                            "settings": self.settings}
            checkpoint["channel_versions"] = dict(self.versions)
            checkpoint["versions_seen"] = {"bot": dict(self.versions)}
            metadata: Any = {"source": "loop", "step": step, "parents": {}}
            new_versions = {ch: self.versions[ch] for ch in changed}
            start = time.perf_counter()
            self.config = self.saver.put(self.config, checkpoint, metadata, new_versions)
            timings.append(time.perf_counter() - start)
            self.configs.append(self.config)
        return timings

    def get_newest(self, count: int) -> list[float]:
        return [timed(lambda: self.saver.get_tuple(self.latest)) for _ in range(count)]

    def get_by_id(self, count: int) -> list[float]:
        return [timed(lambda: self.saver.get_tuple(self.picks.choice(self.configs))) for _ in range(count)]


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    if fn() is None:
        raise AssertionError("a checkpoint put was not found")
    return time.perf_counter() - start


OPERATIONS = {"put": Thread.put, "get_tuple (newest)": Thread.get_newest, "get_tuple (by id)": Thread.get_by_id}


def compare(ours: Thread, baseline: Thread, rounds: int, batch: int) -> dict[str, tuple[float, float]]:
    """Each operation in ``rounds`` rounds of ``batch``, the two savers taking turns (so a
    busy moment of a shared machine falls on both); the medians per operation."""
    samples: dict[str, tuple[list[float], list[float]]] = {op: ([], []) for op in OPERATIONS}
    for _ in range(rounds):
        for op, fn in OPERATIONS.items():
            samples[op][0].extend(fn(ours, batch))
            samples[op][1].extend(fn(baseline, batch))
    return {op: (statistics.median(a), statistics.median(b)) for op, (a, b) in samples.items()}


def chat_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """A StateGraph over a messages channel whose node answers each user message."""

    def bot(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("lorem ipsum " * 16)]}

    builder = StateGraph(MessagesState)
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    return builder.compile(checkpointer=saver)


def compare_turns(ours: BaseCheckpointSaver[Any], baseline: BaseCheckpointSaver[Any], rounds: int,
                  batch: int) -> tuple[float, float]:
    """Median seconds of one ``graph.invoke`` turn (get_tuple, then puts and put_writes as the loop
    makes them) on a thread growing by a user and a bot message per turn, the savers taking turns."""
    graphs = [(chat_graph(saver), []) for saver in (ours, baseline)]
    thread: Any = {"configurable": {"thread_id": "turns"}}
    for _ in range(rounds):
        for graph, samples in graphs:
            for i in range(batch):
                start = time.perf_counter()
                graph.invoke({"messages": [HumanMessage(f"question {i}: " + "lorem ipsum " * 16)]}, thread)
                samples.append(time.perf_counter() - start)
    return statistics.median(graphs[0][1]), statistics.median(graphs[1][1])


def sqlite_saver(path: Path, synchronous: str | None) -> SqliteSaver:
    conn = sqlite3.connect(str(path), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    if synchronous:
        conn.execute(f"PRAGMA synchronous={synchronous}")
    return saver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer operations (a smoke run)")
    rounds, batch = (5, 20) if parser.parse_args().quick else (20, 25)
    rows: list[tuple[str, str, dict[str, tuple[float, float]]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for workload, settings in WORKLOADS.items():
            for label, durability, synchronous in (("no sync per write", "flush", "NORMAL"),
                                                   ("fsync per write", "fsync", None)):
                where = Path(tmp) / f"{len(rows)}"
                with session_manager.open(where / "sm", durability=durability) as sm:  # type: ignore[arg-type]
                    baseline_saver = sqlite_saver(where.with_suffix(".db"), synchronous)
                    ours_saver = SessionManagerSaver(sm)
                    figures = compare(Thread(ours_saver, "bench", settings),
                                      Thread(baseline_saver, "bench", settings), rounds, batch)
                    if settings is SETTINGS:
                        figures["graph.invoke (a turn)"] = compare_turns(ours_saver, baseline_saver, rounds // 2, 10)
                    baseline_saver.conn.close()
                rows.append((workload, label, figures))
    print(f"LangGraph checkpointers: {rounds} rounds of {batch} per operation, the savers taking turns; "
          f"{rounds * batch} checkpoints per thread; medians\n")
    print(f"{'state':<28} {'durability':<18} {'operation':<19} {'SessionManagerSaver':>19} {'SqliteSaver':>12}"
          f" {'x Sqlite':>9}")
    for workload, label, figures in rows:
        for op, (ours, baseline) in figures.items():
            print(f"{workload:<28} {label:<18} {op:<19} {ours * 1e6:>16.0f} us {baseline * 1e6:>9.0f} us"
                  f" {baseline / ours:>8.2f}x")


if __name__ == "__main__":
    main()
