"""Test doubles for applications that use session-manager (and for its own tests).

* :class:`FakeEngine` — an in-process iii engine that behaves like the wire
  stand-in: filters evaluated with ``iii.filter``, ``_caller_worker_id``
  injected into object payloads, no reply to fire-and-forget calls,
  ``ObserveHooks`` and ``ready()`` as on a real engine, and a built-in
  configuration worker. :func:`serve` puts session-manager on it, so an
  application's own observers and callers can be tested against it::

      import tempfile
      from pathlib import Path
      from typing import Any

      from session_manager.testing import FakeEngine, ManualClock, SequentialIds, serve

      seen: list[Any] = []
      with tempfile.TemporaryDirectory() as tmp:
          engine = FakeEngine()
          host = serve(engine, Path(tmp) / "data", ids=SequentialIds(), clock=ManualClock())
          caller = engine.connection("app")
          caller.register_function("app::on-message", seen.append)
          caller.observe({"function_id": "session::on-message-added", "deliver": "input"}, "app::on-message").ready(1)
          sid = caller.trigger({"function_id": "session::create", "payload": {}})["session_id"]
          caller.trigger({"function_id": "session::append", "payload": {"session_id": sid, "message": {
              "role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 0}}})
          host.flush()
          host.close()
      assert [event["session_id"] for event in seen] == [sid] == ["s_001"]

* :class:`~session_manager.ids.SequentialIds` and
  :class:`~session_manager.clock.ManualClock` — deterministic ids
  (``s_001``, ``e_001``, ...) and a clock that moves only when told; pass
  them to :func:`session_manager.open` or :func:`serve` to assert exact values.

* :class:`StoreContract` — the storage contract suite (pytest) every adapter
  of :class:`~session_manager.store.SessionStore` passes; a third-party
  adapter runs it by subclassing it (:mod:`session_manager.testing.contract`)::

      from collections.abc import Iterator
      from pathlib import Path

      from session_manager.store import MemoryStore, SessionStore
      from session_manager.testing import StoreContract


      class TestMyStore(StoreContract):  # pytest collects every contract test over this store
          def open_store(self, tmp_path: Path) -> Iterator[SessionStore]:
              store = MemoryStore()  # your adapter, opened on tmp_path
              yield store
              store.close()
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..clock import Clock, ManualClock
from ..ids import IdGen, SequentialIds
from ._connection import FakeConnection
from ._engine import FakeEngine, FakeHandle, FakeObserver, Registration

if TYPE_CHECKING:
    from .._worker.iii_host import IIIHost
    from .contract import StoreContract


def __getattr__(name: str) -> Any:
    # The contract suite needs pytest: loaded only when asked for.
    if name == "StoreContract":
        from .contract import StoreContract

        return StoreContract
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def serve(engine: FakeEngine, data_dir: str | os.PathLike[str], *, ids: IdGen | None = None,
          clock: Clock | None = None) -> IIIHost:
    """Register session-manager (fs adapter over ``data_dir``) on ``engine``.

    Events are delivered from a background thread, as in production: call
    ``host.flush()`` before asserting on what observers received, and
    ``host.close()`` at the end.
    """
    from .._worker.config_value import parse_config
    from .._worker.iii_host import IIIHost

    config = parse_config({"adapter": {"name": "fs", "config": {"data_dir": os.fspath(data_dir)}}})
    host = IIIHost(engine, config, ids=ids, clock=clock)
    host.register()
    return host


__all__ = [
    "FakeConnection",
    "FakeEngine",
    "FakeHandle",
    "FakeObserver",
    "ManualClock",
    "Registration",
    "SequentialIds",
    "StoreContract",
    "serve",
]
