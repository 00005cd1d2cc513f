"""LangGraph checkpointers in one run (not a test): ``SessionManagerSaver`` over our fs
store and over our sqlite store, beside ``SqliteSaver`` (langgraph-checkpoint-sqlite), each
over files in a temp dir, the three taking turns (in that order) in every round.

Run: ``python bench/bench_langgraph.py [--quick] [--split]``. Prints, per saver, the
median time of ``put`` (a checkpoint whose messages channel, 10 to 19
messages of ~200 characters, and a counter changed; one more channel did
not: 2 KB of settings, or 30 KB of documents set at the first step), of
``get_tuple`` of the newest checkpoint, and of ``get_tuple`` by id of an
earlier one, and of a whole ``graph.invoke`` turn of a chat StateGraph (first
state only), and the ratio to SqliteSaver at the same durability (target:
>= 1x, i.e. at least as fast). SqliteSaver stores every channel's value in
every checkpoint; ours stores a channel's value once per version, so the
unchanged channel costs it nothing after the first put:

- no sync per write: our ``durability="flush"`` (the default: each write handed
  to the OS before put returns) beside SqliteSaver with ``PRAGMA synchronous=NORMAL``
  (WAL: each commit written to the WAL file, no fsync): both survive a crash of
  the process, neither a power loss;
- a sync per write: our ``durability="fsync"`` beside SqliteSaver as it comes
  (WAL, ``synchronous=FULL``: the WAL synced at each commit): both survive a power loss.

Our sqlite store runs at the same two settings (``durability="flush"``: WAL,
``synchronous=NORMAL``; ``"fsync"``: ``synchronous=FULL``, its WAL sized once so each
commit's sync overwrites, as SqliteSaver's does once its WAL has wrapped): the
configuration of ours whose sync is SQLite's (docs/langgraph.md, "a sync on every checkpoint").

The settings each side ran with are read back (SQLite's ``journal_mode`` and
``synchronous`` pragmas, our store's ``durability``) and printed with the figures.

Both savers get the same checkpoints through LangGraph's serializer. Speed is
machine-bound: compare figures from one run, not across machines.

Beside the put rows, a floor: the bytes of each of our puts appended again to a plain file
beside the data_dir, one ``write`` each (and one ``fsync`` in the fsync rows), timed in the
same rounds: what the kernel and the disk alone cost to append them as ours does. Ours less
the floor is the library's share (its CPU, which after a put's fsync runs with cold caches).

``--split`` then splits one more run of ``put`` (first state, no sync per write)
into the serializer's share, the store call's (``SessionManager.call`` and
``_append_owned``, the typed append: ours only) and the rest (ours: the saver's own work; SqliteSaver's: its INSERT and
commit), medians per put, so a change to the shared append path shows where it landed. Ours' serializer share is
its ``serialize_values`` (the serializer memo's work and the messages it serializes, issue 29: its serde is left
as it is, as a wrapped one would turn the memo off); SqliteSaver's its ``serde.dumps_typed``.

``--long`` then puts one thread growing by a message a put up to 510 messages, each saver in turn (ours with its
serializer memo, ours with it off: a ``JsonPlusSerializer`` subclass, and SqliteSaver), and prints the median put
and serializer share of the puts at ~100 and ~500 messages (and their minimums), in CPU time
(``time.process_time``: what the other processes of a busy machine take is not in it): how each grows with a
thread's history.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint  # noqa: E402
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402

import session_manager  # noqa: E402
from session_manager.adapters import langgraph as adapter  # noqa: E402
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
        self.ledger: Ledger | None = None

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
            if self.ledger is not None:
                self.ledger.start()
            start = time.perf_counter()
            self.config = self.saver.put(self.config, checkpoint, metadata, new_versions)
            timings.append(time.perf_counter() - start)
            if self.ledger is not None:
                self.ledger.stop(timings[-1])
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


class Floor:
    """What a put's write costs with no library at all: the bytes each of our saver's puts
    appended to its logs, appended again to a plain file of the same directory, one ``write``
    each (and, with ``sync``, one ``fsync``: what ``durability="fsync"`` runs per write), timed
    in the same rounds as the savers. Ours less this is the library's share of a put."""

    def __init__(self, data_dir: Path, sync: bool) -> None:
        self.data_dir = data_dir
        self.sync = sync
        self.seen: dict[Path, int] = {}  # bytes of each log already taken
        self.queued: list[bytes] = []
        self.fd = os.open(data_dir.parent / f"{data_dir.name}-floor.jsonl", os.O_RDWR | os.O_APPEND | os.O_CREAT,
                          0o644)

    def capture(self, puts: int) -> None:
        """Take the bytes the last ``puts`` puts appended, as ``puts`` equal parts: read once
        the batch is timed (reading the logs between our puts, as a first version did, left
        each next put's caches cold and cost it ~15-20%, which SqliteSaver's puts never paid)."""
        chunk = b""
        for log in sorted(self.data_dir.glob("*.jsonl")):
            with log.open("rb") as f:
                f.seek(self.seen.get(log, 0))
                new = f.read()
            self.seen[log] = self.seen.get(log, 0) + len(new)
            chunk += new
        size = len(chunk)
        self.queued.extend(chunk[i * size // puts:(i + 1) * size // puts] for i in range(puts))

    def put(self, count: int) -> list[float]:
        """Append the next ``count`` puts' bytes; the seconds each took."""
        timings = []
        fd, sync = self.fd, self.sync
        for data in self.queued[:count]:
            start = time.perf_counter()
            os.write(fd, data)
            if sync:
                os.fsync(fd)
            timings.append(time.perf_counter() - start)
        del self.queued[:count]
        return timings

    def close(self) -> None:
        os.close(self.fd)


def compare(threads: list[Thread], rounds: int, batch: int,
            floor: Floor | None = None) -> tuple[dict[str, list[float]], list[list[float]]]:
    """Each operation in ``rounds`` rounds of ``batch``, the savers taking turns in the order
    given (so a busy moment of a shared machine falls on all of them); the medians per
    operation and saver, and the put timings of each saver, then of ``floor`` (its appends of
    the first saver's puts' bytes, made after each round's puts; none without it)."""
    samples: dict[str, list[list[float]]] = {op: [[] for _ in threads] for op in OPERATIONS}
    floors: list[float] = []
    for _ in range(rounds):
        for op, fn in OPERATIONS.items():
            for i, thread in enumerate(threads):
                samples[op][i].extend(fn(thread, batch))
                if op == "put" and floor is not None and i == 0:
                    floor.capture(batch)
            if op == "put" and floor is not None:
                floors.extend(floor.put(batch))
    return ({op: [statistics.median(xs) for xs in per] for op, per in samples.items()},
            [*samples["put"], floors])


def chat_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """A StateGraph over a messages channel whose node answers each user message."""

    def bot(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("lorem ipsum " * 16)]}

    builder = StateGraph(MessagesState)
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    return builder.compile(checkpointer=saver)


def compare_turns(savers: list[BaseCheckpointSaver[Any]], rounds: int, batch: int) -> list[float]:
    """Median seconds of one ``graph.invoke`` turn (get_tuple, then puts and put_writes as the loop
    makes them) on a thread growing by a user and a bot message per turn, the savers taking turns."""
    graphs: list[tuple[Any, list[float]]] = [(chat_graph(saver), []) for saver in savers]
    thread: Any = {"configurable": {"thread_id": "turns"}}
    for _ in range(rounds):
        for graph, samples in graphs:
            for i in range(batch):
                start = time.perf_counter()
                graph.invoke({"messages": [HumanMessage(f"question {i}: " + "lorem ipsum " * 16)]}, thread)
                samples.append(time.perf_counter() - start)
    return [statistics.median(samples) for _, samples in graphs]


class Ledger:
    """Seconds one put spent in each clocked part; per put: (put, serializer, store call)."""

    def __init__(self, timer: Callable[[], float] = time.perf_counter) -> None:
        self.timer = timer
        self.spent = {"serializer": 0.0, "store call": 0.0}
        self.rows: list[tuple[float, float, float]] = []

    def clock(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        timer = self.timer

        def clocked(*args: Any, **kwargs: Any) -> Any:
            start = timer()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[part] += timer() - start
        return clocked

    def start(self) -> None:
        self.spent = dict.fromkeys(self.spent, 0.0)

    def stop(self, took: float) -> None:
        self.rows.append((took, self.spent["serializer"], self.spent["store call"]))

    def medians(self) -> tuple[float, float, float, float]:
        """Median put, serializer, store call, and rest (put less the two), each over the puts."""
        return (statistics.median(r[0] for r in self.rows), statistics.median(r[1] for r in self.rows),
                statistics.median(r[2] for r in self.rows), statistics.median(r[0] - r[1] - r[2] for r in self.rows))


class ClockedSerde:
    """A saver's serializer whose ``dumps_typed`` is clocked into a :class:`Ledger` (the
    default serializer is shared by every saver: it is wrapped, not changed)."""

    def __init__(self, serde: Any, ledger: Ledger) -> None:
        self.serde = serde
        self.dumps_typed = ledger.clock("serializer", serde.dumps_typed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.serde, name)


def split_puts(where: Path, rounds: int, batch: int) -> dict[str, tuple[float, float, float, float]]:
    """:class:`Ledger` medians of ``put`` per saver (first state, no sync per write), the savers taking turns."""
    with session_manager.open(where / "sm") as sm:
        savers: dict[str, Any] = {"SessionManagerSaver": SessionManagerSaver(sm),
                                  "SqliteSaver": sqlite_saver(where.with_suffix(".db"), "NORMAL")}
        ledgers = {name: Ledger() for name in savers}
        threads = []
        for name, saver in savers.items():
            thread = Thread(saver, "split", SETTINGS)
            thread.ledger = ledgers[name]
            saver.serde = ClockedSerde(saver.serde, ledgers[name])
            threads.append(thread)
        ledger = ledgers["SessionManagerSaver"]  # its own sm: both ways into the store are clocked
        savers["SessionManagerSaver"].serde = savers["SessionManagerSaver"].serde.serde  # (its memo on)
        sm.call = ledger.clock("store call", sm.call)  # type: ignore[method-assign]
        sm._append_owned = ledger.clock("store call", sm._append_owned)  # type: ignore[method-assign]
        real = adapter.serialize_values
        adapter.serialize_values = ledger.clock("serializer", real)  # type: ignore[assignment]
        try:
            for _ in range(rounds):
                for thread in threads:
                    thread.put(batch)
        finally:
            adapter.serialize_values = real  # type: ignore[assignment]
        savers["SqliteSaver"].conn.close()
    return {name: ledger.medians() for name, ledger in ledgers.items()}


LONG = [(HumanMessage if i % 2 == 0 else AIMessage)(f"message {i}: " + "lorem ipsum " * 16) for i in range(520)]


class PlainSerde(JsonPlusSerializer):
    """LangGraph's serializer under another class: the saver's memo stays off (it serializes every list whole)."""


def long_thread(where: Path, sizes: tuple[int, ...] = (100, 500),
                ) -> dict[str, dict[int, tuple[float, float, float, float]]]:
    """Per saver and size, the median put and serializer seconds, then their minimums (the least
    disturbed by a busy machine's caches), of the puts of a thread of ``size``
    +- 5 messages, the thread growing by one message a put to ``max(sizes) + 10``, the savers taking turns."""
    with session_manager.open(where / "sm") as sm, session_manager.open(where / "sm-off") as off:
        savers: dict[str, Any] = {"ours (memo)": SessionManagerSaver(sm),
                                  "ours (memo off)": SessionManagerSaver(off, serde=PlainSerde()),
                                  "SqliteSaver": sqlite_saver(where.with_suffix(".db"), "NORMAL")}
        ledgers = {name: Ledger(time.process_time) for name in savers}  # (CPU time: a busy machine's
        # other processes not counted; wall-clock of 500-message puts was 10x their CPU time at load 25)
        savers["SqliteSaver"].serde = ClockedSerde(savers["SqliteSaver"].serde, ledgers["SqliteSaver"])
        real = adapter.serialize_values
        clocked = {name: ledgers[name].clock("serializer", real) for name in savers}
        configs: dict[str, Any] = {name: {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
                                   for name in savers}
        rows: dict[str, list[tuple[int, float, float]]] = {name: [] for name in savers}
        versions: dict[str, int] = dict.fromkeys(savers, 0)
        try:
            for n in range(1, max(sizes) + 11):
                for name, saver in savers.items():
                    versions[name] += 1
                    version = f"{versions[name]:032}.0"
                    checkpoint = empty_checkpoint()
                    checkpoint["channel_values"] = {"messages": LONG[:n]}
                    checkpoint["channel_versions"] = {"messages": version}
                    adapter.serialize_values = clocked[name]  # type: ignore[assignment]
                    ledgers[name].start()
                    start = time.process_time()
                    configs[name] = saver.put(configs[name], checkpoint, {"step": n}, {"messages": version})
                    took = time.process_time() - start
                    rows[name].append((n, took, ledgers[name].spent["serializer"]))
        finally:
            adapter.serialize_values = real  # type: ignore[assignment]
        savers["SqliteSaver"].conn.close()
    return {name: {size: (statistics.median(t for n, t, _ in got if abs(n - size) <= 5),
                          statistics.median(z for n, _, z in got if abs(n - size) <= 5),
                          min(t for n, t, _ in got if abs(n - size) <= 5),
                          min(z for n, _, z in got if abs(n - size) <= 5)) for size in sizes}
            for name, got in rows.items()}


def sqlite_saver(path: Path, synchronous: str | None) -> SqliteSaver:
    conn = sqlite3.connect(str(path), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    if synchronous:
        conn.execute(f"PRAGMA synchronous={synchronous}")
    return saver


_SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def pragmas(conn: sqlite3.Connection) -> str:
    """A connection's journal mode and synchronous level, as read back from it."""
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]
    return f"journal_mode={journal}, synchronous={_SYNCHRONOUS.get(synchronous, synchronous)}"


def durability_line(sm: Any, on_sqlite: Any, baseline: SqliteSaver) -> str:
    """The durability each side runs with, as read back from it (not as asked for): our
    sqlite store's from the connection its writes used (this thread's)."""
    return (f"ours over fs durability={sm.service.store.durability!r}; ours over sqlite "
            f"durability={on_sqlite.service.store.durability!r}, "
            f"{pragmas(on_sqlite.service.store.db.local.state.conn)}; SqliteSaver {pragmas(baseline.conn)}")


# The contenders, in the order they take turns and are printed: ours over each of our stores, then the baseline.
SAVERS = ("ours over fs", "ours over sqlite", "SqliteSaver")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer operations (a smoke run)")
    parser.add_argument("--split", action="store_true", help="then split put into serializer, store call, rest")
    parser.add_argument("--long", action="store_true", help="then put a thread growing to 510 messages")
    parser.add_argument("--only", choices=("split", "long"), help="run only the --split or --long part")
    args = parser.parse_args()
    rounds, batch = (5, 20) if args.quick else (20, 25)
    rows: list[tuple[str, str, dict[str, list[float]]]] = []
    # state, durability, statistic, then the floor's and each saver's put by it
    floors: list[tuple[str, str, str, float, list[float]]] = []
    settings_run: dict[str, str] = {}
    if args.only:
        with tempfile.TemporaryDirectory() as tmp:
            show_split(split_puts(Path(tmp) / "split", rounds, batch) if args.only == "split" else {})
            show_long(long_thread(Path(tmp) / "long") if args.only == "long" else {})
        return
    with tempfile.TemporaryDirectory() as tmp:
        for workload, settings in WORKLOADS.items():
            runs: tuple[tuple[str, Literal["flush", "fsync"], str | None], ...] = (
                ("no sync per write", "flush", "NORMAL"), ("fsync per write", "fsync", None))
            for label, durability, synchronous in runs:
                where = Path(tmp) / f"{len(rows)}"
                with session_manager.open(where / "sm", durability=durability) as sm, \
                        session_manager.open(f"sqlite:///{where.resolve()}-sm.db", durability=durability) as on_sqlite:
                    baseline_saver = sqlite_saver(where.with_suffix(".db"), synchronous)
                    savers = [SessionManagerSaver(sm), SessionManagerSaver(on_sqlite), baseline_saver]
                    floor = Floor(where / "sm", sync=durability == "fsync")
                    figures, puts = compare([Thread(saver, "bench", settings) for saver in savers], rounds,
                                            batch, floor)
                    settings_run[label] = durability_line(sm, on_sqlite, baseline_saver)
                    floor.close()
                    *saver_puts, floor_puts = puts
                    for stat, of in (("median", statistics.median),
                                     ("p10", lambda xs: statistics.quantiles(xs, n=10)[0])):
                        floors.append((workload, label, stat, of(floor_puts), [of(xs) for xs in saver_puts]))
                    if settings is SETTINGS:
                        figures["graph.invoke (a turn)"] = compare_turns(savers, rounds // 2, 10)
                    baseline_saver.conn.close()
                rows.append((workload, label, figures))
        split = split_puts(Path(tmp) / "split", rounds, batch) if args.split else {}
        long = long_thread(Path(tmp) / "long") if args.long else {}
    print(f"LangGraph checkpointers: {rounds} rounds of {batch} per operation, the savers taking turns; "
          f"{rounds * batch} checkpoints per thread; medians; SessionManagerSaver over our fs store and "
          f"over our sqlite store")
    for label, line in settings_run.items():
        print(f"  {label}: {line}")
    print()
    print(f"{'state':<28} {'durability':<18} {'operation':<22} {'ours over fs':>12} {'ours / sqlite':>13}"
          f" {'SqliteSaver':>12} {'x (fs)':>7} {'x (sqlite)':>10}")
    for workload, label, figures in rows:
        for op, (fs, sq, baseline) in figures.items():
            print(f"{workload:<28} {label:<18} {op:<22} {fs * 1e6:>9.0f} us {sq * 1e6:>10.0f} us"
                  f" {baseline * 1e6:>9.0f} us {baseline / fs:>6.2f}x {baseline / sq:>9.2f}x")
    print("(x = SqliteSaver's time / ours: above 1 is faster)")

    print("\nput beside its floor: the bytes of each of our fs puts appended again to a plain file (one write,"
          " and one fsync\nin the fsync rows) in the same rounds; ours over fs less the floor is the library's share."
          " On a busy disk the\nmedians of the fsync rows are its queue; the 10th percentiles are nearer its own cost")
    print(f"{'state':<28} {'durability':<18} {'':<6} {'raw append floor':>16} {'ours over fs':>12}"
          f" {'ours / sqlite':>13} {'SqliteSaver':>12} {'fs - floor':>10}")
    for workload, label, stat, floor_put, (fs, sq, baseline) in floors:
        print(f"{workload:<28} {label:<18} {stat:<6} {floor_put * 1e6:>13.0f} us {fs * 1e6:>9.0f} us"
              f" {sq * 1e6:>10.0f} us {baseline * 1e6:>9.0f} us {(fs - floor_put) * 1e6:>7.0f} us")

    show_split(split)
    show_long(long)


def show_split(split: dict[str, tuple[float, float, float, float]]) -> None:
    if split:
        print("\nput, split (messages + 2 KB settings, no sync per write; medians per put, which need not add up)")
        print(f"{'saver':<20} {'put':>9} {'serializer':>11} {'store call':>11} {'rest':>9}")
        for name, (took, serializer, call, rest) in split.items():
            shown = f"{call * 1e6:>8.0f} us" if name == "SessionManagerSaver" else f"{'-':>11}"
            print(f"{name:<20} {took * 1e6:>6.0f} us {serializer * 1e6:>8.0f} us {shown} {rest * 1e6:>6.0f} us")


def show_long(long: dict[str, dict[int, tuple[float, float, float, float]]]) -> None:
    if long:
        print("\na long thread (one more message a put, no sync per write; CPU time of the puts at +-5 messages,"
              " median / minimum)")
        for name, by_size in long.items():
            shown = ", ".join(f"{size} messages: put {took * 1e6:.0f} / {least * 1e6:.0f} us, serializer "
                              f"{ser * 1e6:.0f} / {least_ser * 1e6:.0f} us"
                              for size, (took, ser, least, least_ser) in by_size.items())
            print(f"  {name:<17} {shown}")


if __name__ == "__main__":
    main()
