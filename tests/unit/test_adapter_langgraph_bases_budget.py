"""The LangGraph saver's delta bases (each thread's newest whole value per channel, kept by its
index so a put's value is stored as a delta of it) count in its ``cache_bytes`` budget with the
entries' data, over every store: past it, least recently used first, a thread's bases are let go
(a read of a delta then reads its base's entry; the channel's next put stores its value whole, a
new base), and every value still reads back byte-exact, before and after a restart. Before, the
bases were held outside the budget (up to ~50 MB for 1,024 threads of 50 KB histories), and a
``cache_bytes=0`` saver, asked to keep nothing, kept them too."""

from __future__ import annotations

from pathlib import Path

from session_manager.adapters import _kept
from session_manager.adapters.langgraph import SessionManagerSaver
from tests.unit.test_adapter_attacks_review12_langgraph import HISTORY, Log, _open, deltas
from tests.unit.test_adapter_attacks_review12_langgraph import where as where


def held_bases(saver: SessionManagerSaver) -> int:
    """The bytes of the bases every index of the saver holds (each Base once)."""
    seen: set[int] = set()
    size = 0
    for index in list(saver._indexes.values()):
        for base in [b for line in index.bases.values() for b in line.values()] + list(index.moved.values()):
            if id(base) not in seen:
                seen.add(id(base))
                size += len(base.mid) if base.mid is not None else len(base.text)
    return size


def kept_data(saver: SessionManagerSaver) -> int:
    """The bytes of entries' data the saver keeps (its bases' and memo's charges left out)."""
    charges = (getattr(_kept, "BASES", None), getattr(_kept, "MEMO", None))
    return sum(size for (_, entry_id), (_, _, size) in saver._kept._kept.items() if entry_id not in charges)


def put_threads(log: Log, threads: int, puts: int) -> None:
    for t in range(threads):
        parent = None
        for i in range(puts):
            parent = log.put(f"t{t}", parent, f"c{i:03d}", {"messages": HISTORY[: 12 + i]})


def test_delta_bases_count_in_the_saver_s_cache_budget(where: tuple[str, str], tmp_path: Path) -> None:
    # Prevents: each thread's delta bases held beside the budget, uncounted: 8 threads' ~2.5 KB
    # bases and the 20,000 bytes of data the budget allows held together.
    budget = 20_000
    with _open(*where) as sm:
        saver = SessionManagerSaver(sm, cache_bytes=budget)
        log = Log(saver)
        put_threads(log, 8, 4)
        assert saver._kept.total <= budget
        assert held_bases(saver) + kept_data(saver) <= budget
        assert held_bases(saver) > 0  # the threads in use keep theirs
        assert deltas(sm, "t7")  # and their puts are still deltas
        assert log.check(saver) == 32  # bases let go or not, every value reads back
        assert held_bases(saver) + kept_data(saver) <= budget
        log.put("t0", "c003", "c004", {"messages": HISTORY[:17]})  # a thread whose bases went: put again
        assert log.check(saver) == 33
    with _open(*where) as sm:  # after a restart, through a saver that derives every index
        again = SessionManagerSaver(sm, cache_bytes=budget)
        assert log.check(again) == 33
        assert held_bases(again) + kept_data(again) <= budget


def test_a_saver_keeping_nothing_keeps_no_bases_and_reads_everything_back(where: tuple[str, str]) -> None:
    # Prevents: cache_bytes=0 (memory-bound hosts) still holding every thread's bases.
    with _open(*where) as sm:
        saver = SessionManagerSaver(sm, cache_bytes=0)
        log = Log(saver)
        put_threads(log, 3, 4)
        assert held_bases(saver) == 0 and saver._kept.total == 0
        assert log.check(saver) == 12
        assert held_bases(saver) == 0
