"""The benchmark instrument itself: rounds interleave, ratios and verdicts come from medians,
and the baselines return what they claim to (a baseline that reads less than ours is not honest).
No test here measures or asserts a time."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import orjson  # noqa: E402
import pytest  # noqa: E402
from baselines import RawLog, Sqlite, last_lines, raw_recent, raw_tail  # noqa: E402
from fixtures import assistant  # noqa: E402
from floor import Floor  # noqa: E402
from harness import Contender, Target, Workload, measure, rows, table  # noqa: E402

import session_manager  # noqa: E402
from session_manager.errors import SessionError  # noqa: E402
from session_manager.store.base import Commit  # noqa: E402
from session_manager.store.fs._sizes import encode_sized  # noqa: E402

# The slow lane (`pytest -m slow`): the benchmark instrument runs real rounds, sleeps and gc.collect().
pytestmark = pytest.mark.slow


def test_rounds_rotate_the_first_contender_and_drop_the_warmup() -> None:
    # Prevents: one contender always running first (or the cold warm-up round) skewing its figures.
    order: list[str] = []

    def contender(name: str, value: float) -> Contender:
        return Contender(name, lambda: order.append(name) or value)

    w = Workload("w", "time", "b", [contender("a", 1.0), contender("b", 2.0), contender("c", 3.0)])
    result = measure(w, rounds=3)
    assert order == ["a", "b", "c", "a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert result.samples == {"a": [1.0] * 3, "b": [2.0] * 3, "c": [3.0] * 3}


def test_workload_rounds_and_warmup_override_the_run() -> None:
    # Prevents: an expensive or deterministic workload (memory, first read) running the full round count.
    calls: list[int] = []
    w = Workload("w", "bytes", "x", [Contender("x", lambda: calls.append(1) or 5.0)], rounds=1, warmup=False)
    assert measure(w, rounds=7).samples == {"x": [5.0]}
    assert len(calls) == 1


def test_a_budget_cuts_rounds_of_a_slow_workload_but_never_below_three() -> None:
    # Prevents: a loaded machine stretching the default run far past its 3 minutes, or a figure from 1 round.
    import time

    slow = Workload("slow", "time", "x", [Contender("x", lambda: time.sleep(0.02) or 0.02)])
    assert len(measure(slow, rounds=7, budget=0.001).samples["x"]) == 3
    # A budget no round can overrun, however loaded the machine (a round's gc.collect() in a full
    # pytest worker once took over the 1.4 s that a 10 s budget left each of 7 rounds).
    assert len(measure(slow, rounds=7, budget=1e6).samples["x"]) == 7
    assert len(measure(slow, rounds=2, budget=0.001).samples["x"]) == 2


def test_ratios_and_verdicts_are_taken_on_medians_in_the_shown_unit() -> None:
    # Prevents: a throughput ratio inverted (seconds instead of ops/s) or a verdict read off one outlier.
    ours_s = iter([0.001, 0.001, 0.001, 0.1])  # seconds per op; one outlier
    base_s = iter([0.002] * 4)
    w = Workload("appends", "rate", "base",
                 [Contender("ours", lambda: next(ours_s)), Contender("base", lambda: next(base_s))],
                 [Target("ours", ">= 2x base", lambda ratio, _: ratio >= 2.0)], warmup=False)
    result = measure(w, rounds=4)
    assert result.samples["ours"] == [0.001, 0.001, 0.001, 0.1]
    (ours, base) = rows([result])
    assert ours == ("appends [4 rounds]", "ours", "1.0k/s", "10/s", "1.0k/s", "2.00x", ">= 2x base: met")
    assert base == ("", "base", "500/s", "500/s", "500/s", "baseline", "")
    text = table([result])
    assert text.splitlines()[0].split() == ["workload", "contender", "median", "min", "max", "vs", "baseline",
                                            "target"]
    assert table([result], markdown=True).splitlines()[2] == (
        "| appends [4 rounds] | ours | 1.0k/s | 10/s | 1.0k/s | 2.00x | >= 2x base: met |")


def test_a_missed_target_says_so() -> None:
    # Prevents: the table reporting a target as met when the median misses it.
    w = Workload("tail", "time", "raw", [Contender("ours", lambda: 0.02), Contender("raw", lambda: 0.001)],
                 [Target("ours", "<= 10x raw", lambda ratio, _: ratio <= 10.0)], warmup=False)
    (ours, raw) = rows([measure(w, rounds=1)])
    assert ours[5:] == ("20.00x", "<= 10x raw: NOT met")
    assert raw[2] == "1.00 ms"


def test_raw_last_lines_reads_exactly_the_tail_across_chunk_boundaries(tmp_path: Path) -> None:
    # Prevents: a raw baseline that returns fewer lines (or a cut line) and so looks cheaper than it is.
    path = tmp_path / "log.jsonl"
    log = RawLog(path)
    for n in range(300):
        log.append({"n": n, "pad": "x" * (n % 37)})
    log.close()
    for chunk in (7, 64, 1 << 16):
        assert [json.loads(line)["n"] for line in last_lines(path, 50, chunk=chunk)] == list(range(250, 300))
    assert [m["n"] for m in raw_tail(path, 3)] == [297, 298, 299]
    assert [json.loads(line)["n"] for line in last_lines(path, 1000)] == list(range(300))
    assert json.loads(path.read_text().splitlines()[-1]) == {"n": 299, "pad": "x" * (299 % 37)}


def test_raw_recent_sorts_every_files_last_line(tmp_path: Path) -> None:
    # Prevents: the raw list baseline skipping files or returning the wrong order.
    for n in range(10):
        meta = {"session_id": f"s_{n}", "updated_at": (n * 7) % 10}
        (tmp_path / f"s_{n}.jsonl").write_text('{"type":"entry"}\n' + json.dumps(meta) + "\n")
    got = raw_recent(tmp_path, 3)
    assert [m["updated_at"] for m in got] == [9, 8, 7]
    assert [m["session_id"] for m in got] == ["s_7", "s_4", "s_1"]


def test_sqlite_baseline_round_trips_rows_in_order(tmp_path: Path) -> None:
    # Prevents: a sqlite3 baseline that commits nothing or reads back other rows than ours would.
    db = Sqlite(tmp_path / "db.sqlite", "FULL")
    seqs = [db.append("s", {"n": n}) for n in range(60)]
    db.update(seqs[-1], {"n": "updated"})
    db.load_sessions([{"session_id": f"s_{n}", "created_at": 0, "updated_at": 0,
                       "metadata": {"owner": f"u_{n % 2}"}} for n in range(5)])
    db.close()
    again = Sqlite(tmp_path / "db.sqlite")
    assert [m["n"] for m in again.tail("s", 3)] == [57, 58, "updated"]
    assert again.get(seqs[0]) == {"n": 0}
    assert [m["session_id"] for m in again.recent(2)] == ["s_4", "s_3"]
    assert [m["session_id"] for m in again.by_owner("u_1", 5)] == ["s_3", "s_1"]
    assert [m["session_id"] for m in again.page(2, 2)] == ["s_2", "s_3"]
    assert again.conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    again.close()


def test_a_target_versus_another_contender_uses_that_contenders_median() -> None:
    # Prevents: a "no slower than a full decode" target being checked against the wrong row.
    w = Workload("first read", "time", "tail",
                 [Contender("ours", lambda: 0.3), Contender("tail", lambda: 0.001), Contender("all", lambda: 0.2)],
                 [Target("ours", "<= 1.6x all", lambda ratio, _: ratio <= 1.6, versus="all")], warmup=False)
    (ours, _, _) = rows([measure(w, rounds=1)])
    assert ours[5:] == ("300.00x", "<= 1.6x all: met (1.50x)")


def test_the_update_floor_writes_the_stores_bytes_and_refuses_what_ours_refuses(tmp_path: Path) -> None:
    # Prevents: a floor that writes less than our store does (an update line without its meta or commit
    # id, a different field order) or skips the strict validation, so it would claim a bar ours can't meet.
    floor = Floor(tmp_path / "floor.jsonl", "s_1")
    eid = floor.append({"session_id": "s_1", "message": assistant("")})["entry_id"]
    answer = floor.update({"session_id": "s_1", "entry_id": eid, "content": [{"type": "text", "text": "tok"}]})
    floor.close()
    assert answer == {"updated": True, "revision": 1}
    lines = (tmp_path / "floor.jsonl").read_bytes().splitlines(keepends=True)
    assert len(lines) == 3  # the append, then the update's entry and meta lines
    entry, meta = orjson.loads(lines[1]), orjson.loads(lines[2])
    assert entry["entry"]["revision"] == 1 and entry["entry"]["message"]["content"] == [{"type": "text", "text": "tok"}]
    commit = Commit(entries=(entry["entry"],), meta=meta["meta"], tx=lambda: str(entry["tx"]))
    assert encode_sized(commit)[0] == lines[1] + lines[2]
    other = Floor(tmp_path / "other.jsonl", "s_1")
    with pytest.raises(SessionError) as refused:
        other.update({"session_id": "s_1", "entry_id": eid, "content": "x"})
    other.close()
    assert refused.value.code == "session/invalid_request"


def test_the_bounded_update_floor_keeps_issue_9s_bound_and_the_same_state(tmp_path: Path) -> None:
    # Prevents: a "floor + bounded log" row that rewrites less often than the bound needs (so it would claim
    # a bar no bounded store can meet) or whose rewrites drop what the stream wrote.
    def last(path: Path, entry_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        entries: dict[str, Any] = {}
        meta: dict[str, Any] = {}
        for line in path.read_bytes().splitlines():  # replay is last-wins, as the store's and the reference's
            record = orjson.loads(line)
            if "entry" in record:
                entries[record["entry"]["id"]] = record["entry"]
            if "meta" in record:
                meta = record["meta"]
        return entries[entry_id], meta

    bounded, plain = Floor(tmp_path / "bounded.jsonl", "s_1", bounded=True), Floor(tmp_path / "plain.jsonl", "s_1")
    eid = bounded.append({"session_id": "s_1", "message": assistant("")})["entry_id"]
    plain.append({"session_id": "s_1", "message": assistant("")})
    plain.entries = {eid: bounded.entries[eid]}  # (the floor draws its own ids: both stream into one id)
    final = 0
    for k in range(400):
        body = {"session_id": "s_1", "entry_id": eid, "content": [{"type": "text", "text": " tok" * (k + 1)}]}
        bounded.update(body)
        plain.update(body)
        final = len(orjson.dumps(bounded.entries[eid]["message"]))
        assert (tmp_path / "bounded.jsonl").stat().st_size <= 3 * final + 64 * 1024
    bounded.close()
    plain.close()
    assert bounded.rewrites > 0
    assert (tmp_path / "plain.jsonl").stat().st_size > 3 * final + 64 * 1024  # the unbounded log did outgrow it
    (b_entry, b_meta), (p_entry, p_meta) = last(tmp_path / "bounded.jsonl", eid), last(tmp_path / "plain.jsonl", eid)
    assert b_entry == p_entry and b_entry["revision"] == 400
    assert {k: v for k, v in b_meta.items() if k != "updated_at"} == {k: v for k, v in p_meta.items()
                                                                       if k != "updated_at"}
    # The rewritten log is one the store reads (the snapshot's own record shapes): the same entry back.
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (tmp_path / "bounded.jsonl").rename(data_dir / "s_1.jsonl")
    with session_manager.open(data_dir, read_only=True) as sm:
        got = sm.call("session::get-message", {"session_id": "s_1", "entry_id": eid})
    assert got["entry"] == b_entry
