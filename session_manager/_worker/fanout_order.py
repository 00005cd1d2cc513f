"""The order of a main's fan-out, kept across the engine.

A main hands its events to ``session::store::on-events`` one at a time, in
order, from one thread. The engine runs each of those invocations on its own
and offers each to the observers when it has run, so a bridge's relay (and a
viewer over an engine) can receive two events of one session the other way
round. The main therefore numbers its envelopes (:class:`Numbering`: a
``stream`` id per emitter and a ``seq`` from 1), and the receiver puts them
back in order (:class:`Reorder`): an event is handed on once every earlier
one has been; one that never comes (a void call the engine dropped, or lost
with the link) holds the rest back for at most ``gap_s``. The first envelope
of a stream sets where it starts (a receiver attaches mid-stream); one
numbered before it arrives late and is handed on at once. An envelope
without numbers (a main of an older release) is handed on as it comes.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable
from typing import Any

from .._wire.events import Event

GAP_S = 0.25  # how long a missing number holds back the events after it


class Numbering:
    """The main side: each fanned-out envelope's ``stream`` and ``seq``."""

    def __init__(self) -> None:
        self.stream = uuid.uuid4().hex
        self._seq = itertools.count(1)

    def stamp(self, envelope: dict[str, Any]) -> dict[str, Any]:
        """``envelope`` with the next number (called from the one delivering thread)."""
        envelope["stream"] = self.stream
        envelope["seq"] = next(self._seq)
        return envelope


def numbers_of(raw: Any) -> tuple[str, int] | None:
    """An envelope's ``(stream, seq)``, or ``None`` when it carries none (or malformed ones)."""
    if not isinstance(raw, dict):
        return None
    stream, seq = raw.get("stream"), raw.get("seq")
    if isinstance(stream, str) and isinstance(seq, int) and not isinstance(seq, bool) and seq > 0:
        return stream, seq
    return None


class Reorder:
    """The receiver side: hands events to ``deliver`` in their ``seq`` order, one at a time."""

    def __init__(self, deliver: Callable[[Event], None], gap_s: float = GAP_S) -> None:
        self._deliver = deliver
        self._gap_s = gap_s
        self._lock = threading.RLock()  # held while delivering: events leave one at a time, in order
        self._stream: str | None = None
        self._next = 0
        self._held: dict[int, Event] = {}
        self._timer: threading.Timer | None = None
        self._closed = False

    def receive(self, event: Event, numbers: tuple[str, int] | None) -> None:
        """Hand ``event`` on now, or once the events numbered before it have been."""
        with self._lock:
            if numbers is None:
                self._deliver(event)
                return
            stream, seq = numbers
            if stream != self._stream:  # the first envelope, or a restarted main: start from here
                self._flush()
                self._stream, self._next = stream, seq
            if seq < self._next:  # late (its gap was given up on, or it preceded the first): at once
                self._deliver(event)
                return
            self._held[seq] = event
            self._drain()
            self._arm()

    def _drain(self) -> None:
        while self._next in self._held:
            self._deliver(self._held.pop(self._next))
            self._next += 1

    def _arm(self) -> None:
        if not self._held:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        elif self._timer is None and not self._closed:
            self._timer = threading.Timer(self._gap_s, self._give_up)
            self._timer.daemon = True
            self._timer.start()

    def _flush(self) -> None:
        """Hand on everything held, in order, past any gap."""
        for seq in sorted(self._held):
            self._deliver(self._held.pop(seq))
            self._next = seq + 1
        self._arm()

    def _give_up(self) -> None:
        with self._lock:
            self._timer = None
            if self._held:  # the missing number did not come: go on from the first held one
                self._next = min(self._held)
                self._drain()
            self._arm()

    def close(self) -> None:
        """Stop waiting: what is held is handed on now."""
        with self._lock:
            self._closed = True
            self._flush()


__all__ = ["GAP_S", "Numbering", "Reorder", "numbers_of"]
