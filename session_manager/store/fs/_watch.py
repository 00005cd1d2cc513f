"""Events for a read-only fs store: what the follower sees change, as the six events.

A read-only open (``session_manager.open(data_dir, read_only=True)``) takes
no part in the writer's mutations, so it learns of them only from the files.
While anyone observes it, a :class:`LogWatch` thread stats every log each
``interval`` seconds; a log whose stat key (inode, size, mtimes) moved is read
through the store (the follower applies only what it gained) and the session's
new state is compared with the one last seen:

- a new session: ``on-created``, then ``on-message-added`` for each entry;
- a new entry: ``on-message-added``; a higher revision: ``on-message-updated``
  (its ``origin`` is the update request's, which the log does not keep: ``None``);
- another status: ``on-status-changed``; another title, description or
  metadata: ``on-meta-updated`` (both stamped with the meta's ``updated_at``);
- a log gone: ``on-deleted`` (stamped with the time it was noticed).

A follower sees states, not mutations: several updates of one entry made
between two polls arrive as one event carrying the last. What exists when an
observer is added while none was (:meth:`LogWatch.baseline`, called from the
host's ``observe``) is the baseline and fires nothing; every change after it
is an event. Events of one session are delivered in that order, from
one thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..._wire import events as ev
from ...errors import StoreError
from ..resync import SeenSession as _Seen
from ..resync import session_events
from ._cold_list import SUFFIX, log_stats
from ._encoding import decode_id

if TYPE_CHECKING:
    from ..._wire.events import Event
    from ..base import Entry, EventSink, Meta
    from ._datadir import DataDir

log = logging.getLogger("session_manager.watch")

INTERVAL = 0.2  # seconds between two polls of the logs' stats


class Reads(Protocol):
    """What a watch reads of the store it watches for (the store itself)."""

    def get_meta(self, session_id: str) -> Meta | None: ...

    def entries(self, session_id: str) -> list[Entry]: ...


class LogWatch:
    """One polling thread delivering a read-only store's changes to ``sink``, started by the
    first :meth:`baseline` (a read-only open nobody observes, as ``data ls``, runs none)."""

    def __init__(self, data: DataDir, store: Reads, sink: EventSink, wants: Callable[[str], bool] | None,
                 interval: float = INTERVAL) -> None:
        self._data = data
        self._store = store
        self._sink = sink
        self._wants = wants
        self._interval = interval
        self._seen: dict[str, _Seen] | None = None  # None: no baseline (nobody observed)
        self._stop = threading.Event()
        self._polling = threading.RLock()  # one pass at a time (an observer may observe from inside one)
        self._thread: threading.Thread | None = None
        if wants is None:
            self.baseline()  # a subscriber of everything: observed from now on

    def stop(self) -> None:
        """Stop polling; returns once the thread delivers nothing more."""
        self._stop.set()
        thread = self._thread  # (not under _polling: a pass may be delivering to the caller's observer)
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _observed(self) -> bool:
        return self._wants is None or any(self._wants(f) for f in ev.EVENT_FUNCTIONS)

    def baseline(self) -> None:
        """Take the state later changes are compared with now, unless there is one (an
        observer was just added: what changes from now on is its event)."""
        with self._polling:
            if self._stop.is_set():
                return
            if self._seen is None:
                self._pass()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="session-manager-watch", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._polling:
                if not self._observed():
                    self._seen = None  # what changes unobserved is nobody's event: a new baseline later
                else:
                    self._pass()
            self._stop.wait(self._interval)

    def _pass(self) -> None:
        try:
            self.poll()
        except StoreError as e:  # a data_dir that cannot be read now: try again next time
            log.warning("watching %s: %s", self._data.dir, e)

    def poll(self) -> None:
        """One pass: stat every log, read the changed ones, deliver their events."""
        names, flat = log_stats(self._data.ops, self._data.path, lambda name, why: None)
        keys: dict[str, tuple[int, ...]] = {}
        for i, name in enumerate(names):
            sid = decode_id(name[: -len(SUFFIX)])
            if sid is not None:
                keys[sid] = tuple(flat[4 * i: 4 * i + 4])
        baseline = self._seen is None
        seen: dict[str, _Seen] = {} if self._seen is None else self._seen
        for sid in [s for s in seen if s not in keys]:
            self._emit(session_events(sid, seen.pop(sid), None, [], _now_ms()), baseline)
        for sid, key in keys.items():
            before = seen.get(sid)
            if before is not None and before.key == key:
                continue
            meta = self._store.get_meta(sid)
            entries = self._store.entries(sid) if meta is not None else []
            if meta is None:
                seen.pop(sid, None)
                if before is not None:
                    self._emit(session_events(sid, before, None, [], _now_ms()), baseline)
                continue
            seen[sid] = _Seen(key, meta, {e["id"]: e.get("revision", 0) for e in entries})
            self._emit(session_events(sid, before, meta, entries, _now_ms()), baseline)
        self._seen = seen

    def _emit(self, events: list[Event], baseline: bool) -> None:
        if baseline or self._stop.is_set():
            return
        wanted = [e for e in events if self._wants is None or self._wants(e.function_id)]
        if wanted:
            self._sink(wanted)


class Watches:
    """The fs store's :meth:`subscribe` (its part): a read-only store delivers what its follower
    sees another process change; a writable one's events are its own calls' (none here)."""

    def __init__(self, data: DataDir) -> None:
        self._data = data
        self._watches: list[LogWatch] = []  # read-only: pollers delivering what the follower sees change

    def subscribe(self, store: Reads, sink: EventSink,
                  wants: Callable[[str], bool] | None = None) -> Callable[[], None]:
        """Deliver ``store``'s changes to ``sink`` (read-only; a writable store's are its calls')."""
        if not self._data.read_only:
            return lambda: None
        watch = LogWatch(self._data, store, sink, wants)
        self._watches.append(watch)

        def unsubscribe() -> None:
            watch.stop()
            with contextlib.suppress(ValueError):
                self._watches.remove(watch)

        return unsubscribe

    def observing(self) -> None:
        for watch in list(self._watches):
            watch.baseline()

    def stop(self) -> None:
        for watch in list(self._watches):
            watch.stop()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


__all__ = ["INTERVAL", "LogWatch", "Reads", "Watches", "session_events"]
