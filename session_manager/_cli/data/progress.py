"""Progress bars for long runs, on stderr and only on a terminal.

tqdm (no dependencies of its own, TTY-aware with ``disable=None``) draws
them; a short run (under :data:`MIN_ITEMS`) or a pipe gets none, so output
meant for scripts is never interleaved with bar redraws.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

MIN_ITEMS = 50


def progress(items: Iterable[T], total: int, what: str) -> Iterator[T]:
    """``items`` with a bar when stderr is a terminal and the run is long."""
    if total < MIN_ITEMS or not sys.stderr.isatty():
        yield from items
        return
    from tqdm import tqdm

    yield from tqdm(items, total=total, desc=what, unit="session", file=sys.stderr, leave=False, disable=None)
