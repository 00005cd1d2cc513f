"""The messages, sizes and data directories every workload shares.

Fixtures are written through the public embedded API (``session::append-many``
and friends), so they stay valid whatever the store does inside; the
baselines get the same message dicts.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import session_manager

T = TypeVar("T")

# About 650 bytes as JSON, the size the issue measures with.
TEXT = ("An ordinary conversational turn of modest length, the kind a user types into a chat box "
        "and an agent answers at some length; it is padded to a realistic size. ") * 4


def message(n: int = 0) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": f"{n} {TEXT}"[:560]}], "timestamp": 1}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}], "stop_reason": "end",
            "model": "m", "provider": "p", "timestamp": 1}


MESSAGE_BYTES = len(json.dumps(message()))


@dataclass(frozen=True)
class Sizes:
    appends: int          # flush-mode appends per round
    fsyncs: int           # fsync-mode appends per round, one thread
    thread_fsyncs: int    # fsync-mode appends per thread per round, 8 threads
    updates: int          # update-message calls on one message per round
    tail_entries: int     # entries in the session the cold/warm tail reads
    recent_sessions: int  # sessions in the "50 most recent" store
    list_sessions: int    # sessions in the list/walk/filter/memory store
    big_entries: int      # entries in the first-read session
    warm_reps: int        # calls per round for a warm (sub-millisecond) read


FULL = Sizes(appends=3000, fsyncs=300, thread_fsyncs=60, updates=1000, tail_entries=20_000, recent_sessions=2000,
             list_sessions=10_000, big_entries=100_000, warm_reps=50)
QUICK = Sizes(appends=500, fsyncs=60, thread_fsyncs=15, updates=300, tail_entries=5000, recent_sessions=500,
              list_sessions=2000, big_entries=20_000, warm_reps=20)


@dataclass
class Context:
    sizes: Sizes
    rounds: int
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="sm-bench-")))
    stack: ExitStack = field(default_factory=ExitStack)
    built: dict[str, Any] = field(default_factory=dict)

    def fixture(self, name: str, build: Callable[[], T]) -> T:
        """``build()`` once per run; workloads sharing a data set share the files."""
        if name not in self.built:
            self.built[name] = build()
        return self.built[name]  # type: ignore[no-any-return]

    def dir(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def manager(self, name: str, **options: Any) -> session_manager.SessionManager:
        """An open store closed at the end of the run."""
        return self.stack.enter_context(session_manager.open(self.dir(name), **options))


def fill_session(sm: session_manager.SessionManager, entries: int, batch: int = 1000) -> tuple[str, list[str]]:
    """A new session holding ``entries`` messages, written in large batches; its id and entry ids."""
    sid: str = sm.call("session::create", {"title": "bench"})["session_id"]
    ids: list[str] = []
    for start in range(0, entries, batch):
        messages = [message(n) for n in range(start, min(entries, start + batch))]
        ids += sm.call("session::append-many", {"session_id": sid, "messages": messages})["entry_ids"]
    return sid, ids


def owner(n: int) -> str:
    return f"u_{n % 20}"


def fill_sessions(sm: session_manager.SessionManager, count: int, messages_each: int = 3) -> list[str]:
    """``count`` sessions with an ``owner`` metadata key and a few messages each."""
    ids = []
    for n in range(count):
        sid = sm.call("session::create", {"title": f"chat {n}", "metadata": {"owner": owner(n)}})["session_id"]
        sm.call("session::append-many", {"session_id": sid, "messages": [message(i) for i in range(messages_each)]})
        ids.append(sid)
    return ids
