"""Id generation, injected so tests can assert exact ids."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from typing import Protocol

# Version 4 and the RFC 4122 variant, set on 128 random bits (what uuid.uuid4 does).
_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_SET = (0x4000 << 64) | (0x8000 << 48)
_BATCH = 256  # ids per os.urandom call


class _RandomPool:
    """Random hex ids made :data:`_BATCH` at a time from one ``os.urandom`` call:
    ``uuid.uuid4()`` costs a system call and a UUID object per id, more than
    the rest of an id-drawing append together. ``list.pop`` is atomic, so
    threads draw without a lock; two refilling at once both add fresh ids."""

    def __init__(self, fresh: Callable[[bytes], list[str]], width: int) -> None:
        self._pool: list[str] = []
        self._fresh = fresh  # a batch of ids from _BATCH * width random bytes
        self._width = width

    def hex(self) -> str:
        try:
            return self._pool.pop()
        except IndexError:
            fresh = self._fresh(os.urandom(self._width * _BATCH))
            value = fresh.pop()
            self._pool.extend(fresh)
            return value

    def reset(self) -> None:
        # A forked child must not hand out the ids its parent has still to draw.
        self._pool = []


def _uuid4s(raw: bytes) -> list[str]:
    return [f"{int.from_bytes(raw[i:i + 16], 'big') & _CLEAR | _SET:032x}" for i in range(0, len(raw), 16)]


# uuid4's version and variant bits, set on every id of a batch at once: byte 6 of each 16 is
# 0100xxxx, byte 8 is 10xxxxxx (what _CLEAR and _SET do to the id as an integer).
_VERSION = bytes((b & 0x0F) | 0x40 for b in range(256))
_VARIANT = bytes((b & 0x3F) | 0x80 for b in range(256))


def _prefixed_uuid4s(prefix: str) -> Callable[[bytes], list[str]]:
    """:func:`_uuid4s` with ``prefix`` on each, made in C but for one slice and one
    concatenation per id (an append draws one: the integer formatting cost ~5x that)."""
    def fresh(raw: bytes) -> list[str]:
        ids = bytearray(raw)
        ids[6::16] = ids[6::16].translate(_VERSION)
        ids[8::16] = ids[8::16].translate(_VARIANT)
        text = ids.hex()
        return [prefix + text[i:i + 32] for i in range(0, len(text), 32)]
    return fresh


def _hex16s(raw: bytes) -> list[str]:
    # A commit id is 64 random bits, no uuid: one hex() of the batch, then slices
    # (each update-message draws one; the uuid format per id cost ~0.5 us).
    text = raw.hex()
    return [text[i:i + 16] for i in range(0, len(text), 16)]


_RANDOM = _RandomPool(_uuid4s, 16)
_TX_IDS = _RandomPool(_hex16s, 8)
_ENTRY_IDS = _RandomPool(_prefixed_uuid4s("e_"), 16)  # (its own pool: every append draws one)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_RANDOM.reset)
    os.register_at_fork(after_in_child=_ENTRY_IDS.reset)
    os.register_at_fork(after_in_child=_TX_IDS.reset)


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
        return f"s_{_RANDOM.hex()}"

    # The pool's own bound method: an instance attribute lookup hands it on unchanged (no frame
    # of this class's on every append).
    entry_id: Callable[[], str] = _ENTRY_IDS.hex

    def attachment_id(self) -> str:
        return f"a_{_RANDOM.hex()}"

    def tx_id(self) -> str:
        return _TX_IDS.hex()


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
