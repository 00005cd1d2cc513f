"""Rounds, statistics and the one results table of a benchmark run.

A workload is a set of contenders doing the same job (ours through the
embedded API, stdlib sqlite3, raw ``os.write``). Each contender's ``run``
performs one round and returns one sample: seconds per operation for a
``rate`` or ``time`` workload, bytes for a ``bytes`` workload; it does its
own per-round setup outside the timed part. Rounds interleave the
contenders, rotating who goes first, so a noisy neighbour on the shared
machine hits everyone alike. A first, unrecorded round warms imports and
caches.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

Unit = Literal["rate", "time", "bytes"]


@dataclass(frozen=True)
class Contender:
    name: str
    run: Callable[[], float]


@dataclass(frozen=True)
class Target:
    """The issue's goal for one contender, checked on the median."""

    contender: str
    text: str
    met: Callable[[float, float], bool]  # (ratio, median sample) -> met?
    versus: str | None = None  # the ratio is to this contender's median instead of the baseline's


@dataclass
class Workload:
    name: str
    unit: Unit
    baseline: str
    contenders: list[Contender]
    targets: list[Target] = field(default_factory=list)
    rounds: int | None = None  # overrides the run's default (expensive or deterministic workloads)
    warmup: bool = True  # an unrecorded first round


MIN_ROUNDS = 3


@dataclass(frozen=True)
class Result:
    workload: Workload
    samples: dict[str, list[float]]


def stopwatch(fn: Callable[[], object], ops: int = 1) -> float:
    """Seconds per operation of one call of ``fn`` doing ``ops`` operations."""
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) / ops


@contextmanager
def timing() -> Iterator[list[float]]:
    """``with timing() as t: ...`` then ``t[0]`` is the block's seconds."""
    box: list[float] = []
    start = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - start)


def measure(workload: Workload, rounds: int, budget: float | None = None) -> Result:
    """Interleaved rounds of every contender. With a ``budget`` (seconds), a workload
    whose warm-up round shows it would overrun gets fewer rounds, never under
    ``MIN_ROUNDS``: a loaded shared machine then stretches the run less."""
    planned = workload.rounds or rounds
    samples: dict[str, list[float]] = {c.name: [] for c in workload.contenders}
    n = len(workload.contenders)
    r = -1 if workload.warmup else 0
    while r < planned:
        started = time.perf_counter()
        first = r % n if r > 0 else 0
        for contender in workload.contenders[first:] + workload.contenders[:first]:
            gc.collect()
            value = contender.run()
            if r >= 0:
                samples[contender.name].append(value)
        if r == -1 and budget is not None:
            per_round = time.perf_counter() - started
            planned = max(min(planned, MIN_ROUNDS), min(planned, int(budget / max(per_round, 1e-9))))
        r += 1
    return Result(workload, samples)


# -- presentation -----------------------------------------------------------------------


def _shown(unit: Unit, samples: list[float]) -> tuple[float, float, float]:
    """Median, min, max in the unit a reader compares: ops/s, ms or MiB."""
    if unit == "rate":
        values = [1.0 / s for s in samples if s > 0]
    elif unit == "time":
        values = [s * 1000 for s in samples]
    else:
        values = [s / 2**20 for s in samples]
    return statistics.median(values), min(values), max(values)


def _fmt(unit: Unit, value: float) -> str:
    if unit == "rate":
        return f"{value / 1000:,.1f}k/s" if value >= 1000 else f"{value:,.0f}/s"
    if unit == "time":
        return f"{value:,.2f} ms" if value < 100 else f"{value:,.0f} ms"
    return f"{value:,.1f} MiB"


UNIT_HEAD = {"rate": "ops/s", "time": "ms", "bytes": "MiB"}


def rows(results: list[Result]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for result in results:
        w = result.workload
        base_median = _shown(w.unit, result.samples[w.baseline])[0]
        targets = {t.contender: t for t in w.targets}
        first = True
        for contender in w.contenders:
            median, low, high = _shown(w.unit, result.samples[contender.name])
            ratio = median / base_median if base_median else float("nan")
            note = "baseline" if contender.name == w.baseline else f"{ratio:.2f}x"
            target = targets.get(contender.name)
            verdict = ""
            if target is not None:
                raw_median = statistics.median(result.samples[contender.name])
                if target.versus is not None:
                    versus = _shown(w.unit, result.samples[target.versus])[0]
                    ratio = median / versus if versus else float("nan")
                verdict = f"{target.text}: {'met' if target.met(ratio, raw_median) else 'NOT met'}"
                if target.versus is not None:
                    verdict += f" ({ratio:.2f}x)"
            count = len(result.samples[contender.name])
            label = f"{w.name} [{count} round{'' if count == 1 else 's'}]" if first else ""
            out.append((label, contender.name, _fmt(w.unit, median), _fmt(w.unit, low),
                        _fmt(w.unit, high), note, verdict))
            first = False
    return out


HEADER = ("workload", "contender", "median", "min", "max", "vs baseline", "target")


def table(results: list[Result], markdown: bool = False) -> str:
    body = rows(results)
    if markdown:
        lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(HEADER)]
    right = {2, 3, 4, 5}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(cells))

    return "\n".join([line(HEADER), "  ".join("-" * w for w in widths), *map(line, body)]).rstrip()
