"""Id generation, injected so tests can assert exact ids."""

from __future__ import annotations

import itertools
import threading
import uuid
from typing import Protocol


class IdGen(Protocol):
    """Where the service takes its ids from (duck-typed: any object with these).

    A generator may also offer ``tx_id()``: the id grouping the lines of one
    multi-line record on disk (an update's entry and meta). Without it the fs
    store draws a random one, so only generators with it give byte-for-byte
    reproducible files.
    """

    def session_id(self) -> str: ...
    def entry_id(self) -> str: ...
    def attachment_id(self) -> str: ...


class UuidIds:
    """Production ids: ``s_<uuid>``, ``e_<uuid>``, ``a_<uuid>``."""

    def session_id(self) -> str:
        return f"s_{uuid.uuid4().hex}"

    def entry_id(self) -> str:
        return f"e_{uuid.uuid4().hex}"

    def attachment_id(self) -> str:
        return f"a_{uuid.uuid4().hex}"

    def tx_id(self) -> str:
        return uuid.uuid4().hex[:16]


class SequentialIds:
    """Deterministic ids for tests: ``s_001``, ``e_001``, ``a_001``, ``t_001``, ... per kind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters = {p: itertools.count(1) for p in ("s", "e", "a", "t")}

    def _next(self, prefix: str) -> str:
        with self._lock:
            return f"{prefix}_{next(self._counters[prefix]):03d}"

    def session_id(self) -> str:
        return self._next("s")

    def entry_id(self) -> str:
        return self._next("e")

    def attachment_id(self) -> str:
        return self._next("a")

    def tx_id(self) -> str:
        return self._next("t")
